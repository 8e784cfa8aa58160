#!/usr/bin/env python3
"""Memory-tool benchmark: `python bench/memory_tools.py [--reps N] [--sizes 50,200,1000] [--json]`.

Host side only, pure Python: scripted sessions of 50, 200 and 1,000 completed tool-using
turns (the session-compaction benchmark's builder), each turn compressed-looking or not does
not matter here — read_session_history always reads the append-only log. Times, per size,
one call of each form through the public-tool dispatch (argument validation included):

- **catalog** (no arguments), **read** (the middle turn, whole), **query** (a word from one turn);
- **baseline**: one `json.dumps` of the whole log — the cheapest thing that touches every
  event, i.e. what any tool reading the log must at least pay. The ratio column is call time
  over that baseline, side by side in the same run.

Medians of `--reps` repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
try:
    import turn_memory  # noqa: F401
except ImportError:  # running with a Python that has not pip-installed the project
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from machine import machine_info  # noqa: E402
from session_builders import work_session  # noqa: E402
from turn_memory.bridge.protocol import AgentOptions  # noqa: E402
from turn_memory.catalog import public_tools  # noqa: E402
from turn_memory.config import EngineConfig  # noqa: E402
from turn_memory.host.dialects import RC8  # noqa: E402
from turn_memory.host.surface import SessionLog  # noqa: E402
from turn_memory.runtime.mirror import MirroredSession  # noqa: E402
from turn_memory.runtime.public_tools import PublicCall, PublicTools  # noqa: E402

SIZES = (50, 200, 1000)


def median_ms(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def measure(turns: int, reps: int) -> dict[str, Any]:
    builder = work_session(RC8, turns, seed=turns)
    log = SessionLog(RC8, builder.events)
    session = MirroredSession(id="bench", dialect=RC8, peer=None, log=log)
    tools = PublicTools(public_tools())
    config = EngineConfig()

    def call(args: dict[str, Any]) -> str:
        c = PublicCall(session=session, args=args, turn=None, call_id=None, agent_options=AgentOptions(),
                       config=config, port=None)  # type: ignore[arg-type]
        answer = asyncio.run(tools.call("read_session_history", c))
        assert not answer.is_error, answer.text
        return answer.text

    word = call({"turn": turns // 2}).split()[40]
    row: dict[str, Any] = {"turns": turns, "events": len(log.events),
                           "log_mb": round(len(json.dumps(builder.events)) / 1e6, 1)}
    row["baseline_ms"] = median_ms(lambda: json.dumps(builder.events), reps)
    for name, args in (("catalog", {}), ("read", {"turn": turns // 2}), ("query", {"query": word})):
        row[f"{name}_ms"] = median_ms(functools.partial(call, args), reps)
        row[f"{name}_ratio"] = row[f"{name}_ms"] / row["baseline_ms"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per size (default 5)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="completed turns per session (default 50,200,1000)")
    ap.add_argument("--json", action="store_true", help="print every number as JSON instead of the table")
    args = ap.parse_args()
    rows = [measure(int(n), args.reps) for n in args.sizes.split(",")]
    if args.json:
        print(json.dumps({"machine": machine_info(), "rows": rows}, indent=2))
        return 0
    print(f"read_session_history, host side — {machine_info()}; median of {args.reps}")
    print(f"{'turns':>6} {'events':>7} {'log MB':>7} {'json.dumps':>11} {'catalog':>16} {'read turn':>16} {'query':>16}")
    for r in rows:
        cells = [f"{r[k + '_ms']:7.1f} ms {r[k + '_ratio']:4.1f}×" for k in ("catalog", "read", "query")]
        print(f"{r['turns']:>6} {r['events']:>7} {r['log_mb']:>7} {r['baseline_ms']:8.1f} ms " + " ".join(f"{c:>16}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
