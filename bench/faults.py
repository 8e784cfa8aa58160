"""Reliability report (issue 12, Deliver 5): run the fault-injection suite on every real DSH host
and print, per scenario and host, what a user would notice.

    python bench/faults.py                 # runs tests/e2e/test_faults_e2e.py (both hosts, ~3 min)
    python bench/faults.py -k rc8          # extra arguments go to pytest
    python bench/faults.py --from FILE     # print the table of an earlier run's summary file

Columns: turns completed / asked; logs reloaded (every session's log folds through the surface
model with the host's reload checks); landings lost / doubled (target 0 / 0: a turn that ended
and had a later turn to land in, without a compression marker — landed or no-op — and not
taken by a session checkpoint / with two or more); requests spent (agent, worker); redone
after finishing (paid twice: in a case with a restart, turns whose workers finished more than
once — a finished compression the fault threw away; n/a where nothing restarts).
Before issue 12a's engine fixes (pending marker at turn/end, finished compressions kept in a
sidecar) the DSH-killed and restart cases showed nonzero lost or paid-twice figures here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
SUITE = "tests/e2e/test_faults_e2e.py"


def load(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    seen: dict[tuple[str, str], dict] = {}
    for row in rows:  # a scenario reports once per host and run; the last one counts
        seen[(row["case"], row["host"])] = row
    return sorted(seen.values(), key=lambda r: (r["case"], r["host"]))


def table(rows: list[dict]) -> str:
    head = ["case", "host", "covers", "runs", "turns", "reloaded", "lost/doubled", "requests agent+worker",
            "redone after finishing (turn: workers)"]
    body = []
    for r in rows:
        redone = r.get("redone")
        body.append([r["case"], r["host"], "; ".join(r["covers"]), str(r["runs"]),
                     f"{r['turns_completed']}/{r['turns_asked']}", "yes" if r["logs_reloaded"] else "NO",
                     f"{r['landings_lost']}/{r['landings_doubled']}",
                     f"{r['agent_requests']}+{r['worker_requests']}",
                     "n/a" if redone is None else ", ".join(f"{t}: {n}" for t, n in redone.items()) or "none"])
    total = ["total", "", "", str(sum(r["runs"] for r in rows)),
             f"{sum(r['turns_completed'] for r in rows)}/{sum(r['turns_asked'] for r in rows)}",
             f"{sum(1 for r in rows if r['logs_reloaded'])}/{len(rows)}",
             f"{sum(r['landings_lost'] for r in rows)}/{sum(r['landings_doubled'] for r in rows)}",
             f"{sum(r['agent_requests'] for r in rows)}+{sum(r['worker_requests'] for r in rows)}", ""]
    lines = [head, *body, total]
    width = [max(len(line[i]) for line in lines) for i in range(len(head))]
    fmt = lambda line: "| " + " | ".join(c.ljust(w) for c, w in zip(line, width)) + " |"  # noqa: E731
    return "\n".join([fmt(head), "|" + "|".join("-" * (w + 2) for w in width) + "|", *map(fmt, body), fmt(total)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="source", type=Path, help="a summary file an earlier run wrote")
    args, pytest_args = ap.parse_known_args(argv)
    code = 0
    if args.source is None:
        fd, name = tempfile.mkstemp(prefix="turn-memory-faults-", suffix=".jsonl")
        os.close(fd)
        args.source = Path(name)
        env = {**os.environ, "TURN_MEMORY_FAULTS_REPORT": name}
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SUITE, *pytest_args],
                              cwd=CHECKOUT, env=env).returncode
    rows = load(args.source)
    print(f"\nturn-memory reliability under faults ({len(rows)} scenario runs; summary: {args.source})\n")
    print(table(rows))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
