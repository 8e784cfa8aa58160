#!/usr/bin/env python3
"""Session benchmark: cost and latency of whole DSH sessions, turn-memory vs stock compaction-basic.

`python bench/session_cost.py [--host rc8|v021|all] [--scenarios coding,12x1] [--runs N] [--json]`

For each scenario (bench/session_scenarios.py: a coding session, a long one that crosses a
128K window, a chat, the short 12x1 tool session, and the coding session with the scripted
worker keeping 10% and 40%) it runs the same scripted session on the real DSH, once in a home
with turn-memory installed by the real installer and once in a stock home, alternating, and
prices every request the scripted model received with the DeepSeek-style prefix-cache price
model (`turn_memory.devtools.price_model`). It prints per scenario (bench/session_report.py):
the bill and its floor, cache hit ratio, workers' share, worker requests per compressed turn,
the final and peak request, the session compactions each engine ran, per-turn latency, the
ratios to stock and the targets of issue 21.

The exit status is non-zero when something failed to run (a DSH run that did not exit 0, a
turn that did not complete, a scripted reply spent on the wrong request, an engine error),
never for a missed target: the verdict column says that. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
try:
    import turn_memory  # noqa: F401
except ImportError:  # running with a Python that has not pip-installed the project
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import machine_info  # noqa: E402
from session_analysis import (Received, analyse_requests, compactions, decisions, failed_compactions,  # noqa: E402
                              job_starts, landed_turns, landing_modes, log_size, turn_ends, two_turn_gaps)
from session_report import VARIANTS, report  # noqa: E402
from session_scenarios import (DEFAULT_SCENARIOS, INSTANT, REALISTIC, SCENARIOS, Scenario,  # noqa: E402
                               parse_scenarios, script, tasks)


def engine_log(log_file: Path) -> list[str]:
    return log_file.read_text(errors="replace").splitlines() if log_file.exists() else []


def engine_problems(lines: Sequence[str]) -> list[str]:
    return [line for line in lines if " ERROR " in line or " CRITICAL " in line or "Traceback" in line][:3]


# =========================================================================================
# running it on the real DSH
# =========================================================================================

def run_once(template: Path, variant: str, sc: Scenario, runtime: Any, work: Path, tag: str,
             tm_overrides: Mapping[str, Any], keep: bool = False) -> dict[str, Any]:
    from turn_memory.devtools.dsh_home import DshHome
    from turn_memory.devtools.fake_model import FakeModel
    from turn_memory.install.layout import deep_merge

    root = work / tag
    shutil.copytree(template, root, symlinks=True)  # every run is a DSH process's first start after install
    home = DshHome(root, runtime, None, context_window=sc.context_window)
    log_file = work / f"{tag}.engine.log"
    overrides = deep_merge({"engine": {"logFile": str(log_file)}}, dict(tm_overrides)) if variant == "turn-memory" else None
    calls = sc.calls or sc.calls_range[1]
    timeout = 300 + (sc.turns + 1) * (calls + 2) * 20
    try:
        with FakeModel(ttfb_ms=sc.ttfb_ms, tokens_per_s=sc.tokens_per_s,
                       log_path=work / f"{tag}.requests.jsonl" if keep else None) as fake:
            home.model_url = fake.base_url
            script(fake, sc)
            run = home.run(tasks(sc), engine_overrides=overrides, timeout=timeout)
            received = [Received.of(r) for r in fake.requests]
        problems: list[str] = []
        if run.returncode != 0:
            problems.append(f"dsh exited {run.returncode}: {run.stderr[-600:]}")
        turns = run.tasks()
        if [t.get("reason", {}).get("kind") for t in turns] != ["completed"] * (sc.turns + 1):
            problems.append(f"turns did not all complete: {[t.get('reason') for t in turns]}")
        try:
            _, events = home.session_log(run.session_id)
        except (StopIteration, FileNotFoundError, KeyError) as exc:
            events = []
            problems.append(f"no session log: {exc!r}")
        landed = landed_turns(events)
        out = analyse_requests(received, sc, landed["worker"])
        problems += out.pop("wrong_replies")
        lines = engine_log(log_file) if overrides else []
        problems += [f"engine: {line}" for line in engine_problems(lines)]
        out.update({"variant": variant, "wall_s": run.seconds, "turn_ms": [t.get("ms") for t in turns],
                    "landed": landed, "landing_modes": landing_modes(events, home.dialect), "log": log_size(events),
                    "job_start_ms": job_starts(received, events),
                    "two_turn_gaps_ms": two_turn_gaps(turn_ends(events), out.pop("first_request_time")),
                    "compactions": compactions(events), "failed_compactions": failed_compactions(events),
                    "decisions": decisions(lines), "host_warnings": len(run.logs()),
                    "host_warning_texts": [f"{r.get('name')}: {str(r.get('text'))[:300]}" for r in run.logs()[:3]],
                    "problems": problems})
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_host(host: str, scenarios: Sequence[Scenario], runs: int | None, tm_overrides: Mapping[str, Any],
               keep: bool, say: Callable[[str], None]) -> dict[str, Any]:
    from turn_memory.devtools.dsh_home import DshHome
    from turn_memory.devtools.runtime import ensure_runtime

    runtime = ensure_runtime(host=host)
    work = Path(tempfile.mkdtemp(prefix=f"tm-bench-session-{host}-"))
    try:
        started = time.monotonic()
        templates = {"turn-memory": work / "template-tm", "stock": work / "template-stock"}
        DshHome(templates["stock"], runtime, None).create()
        DshHome(templates["turn-memory"], runtime, None).create().install_turn_memory()
        say(f"{host}: DSH {runtime.version}, homes set up in {time.monotonic() - started:.1f} s")
        results: dict[str, Any] = {}
        names = {sc.name for sc in scenarios}
        for sc in scenarios:
            n = runs or sc.runs
            # a sensitivity run reuses the stock runs of its scenario (the scripted worker changes nothing there)
            variants = ("turn-memory",) if sc.stock_of and sc.stock_of in names else VARIANTS
            per: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for i in range(n):
                for variant in (variants if i % 2 == 0 else variants[::-1]):  # interleaved, alternating order
                    t0 = time.monotonic()
                    r = run_once(templates[variant], variant, sc, runtime, work, f"{sc.name}-{variant}-{i}", tm_overrides,
                                 keep)
                    per[variant].append(r)
                    say(f"{host} {sc.name} run {i + 1}/{n} {variant}: ${r['cost_usd']:.5f}, "
                        f"{time.monotonic() - t0:.1f} s{' PROBLEMS' if r['problems'] else ''}")
            results[sc.name] = {"scenario": asdict(sc), "runs": per}
        return {"host": host, "version": runtime.version, "results": results}
    finally:
        if keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    from turn_memory.install.installer import parse_sets as parse

    return parse(pairs)


def failures_of(hosts: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for h in hosts:
        for name, res in h["results"].items():
            for v, rs in res["runs"].items():
                for i, r in enumerate(rs):
                    out += [f"{h['host']} {name} {v} run {i + 1}: {p}" for p in r["problems"]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--host", choices=["rc8", "v021", "all"], default="all", help="DSH host(s) (default: all)")
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                    help=f"comma-separated: {', '.join(SCENARIOS)}, or TURNSxCALLS[:RESULT_TOKENS] "
                         f"(default: {','.join(DEFAULT_SCENARIOS)})")
    ap.add_argument("--runs", type=int, default=None, help="runs per variant and scenario (default: the scenario's)")
    ap.add_argument("--turns", type=int, default=None, help="turns of every scenario (a shorter run while developing)")
    ap.add_argument("--context-window", type=int, default=None,
                    help="route every scenario through a generic route with this window (tokens)")
    ap.add_argument("--model", choices=["scenario", "instant", "realistic"], default="scenario",
                    help="model latency for every scenario (default: each scenario's own)")
    ap.add_argument("--think-ms", type=int, default=None, help="user think time between turns (default: the scenario's)")
    ap.add_argument("--result-tokens", type=int, default=None, help="tokens of each tool result (uniform scenarios)")
    ap.add_argument("--rewrite-ratio", type=float, default=None, help="scripted worker's rewrite / turn content")
    ap.add_argument("--worker-requests", type=int, choices=[1, 2], default=None,
                    help="scripted worker requests: 1 = replace and finish in one reply (default), 2 = then finish")
    ap.add_argument("--tm-set", action="append", default=[], metavar="KEY=VALUE",
                    help="turn-memory config for its runs, e.g. turns.policy=size (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the homes and engine logs (path on stderr)")
    ap.add_argument("--json", action="store_true", help="print every number as JSON instead of the table")
    ap.add_argument("--save", type=Path, default=None, help="also write every number as JSON to this file")
    ap.add_argument("--from", dest="from_", type=Path, nargs="+", default=None, metavar="FILE",
                    help="print the table of earlier runs' --save files (e.g. one per host) instead of running")
    args = ap.parse_args(argv)
    if args.from_:
        saved = [json.loads(path.read_text()) for path in args.from_]
        hosts = [h for s in saved for h in s["hosts"]]
        for s in saved:
            load = s.get("load_before")
            print(f"machine: {s['machine']}; load average {'?' if load is None else f'{load:.2f}'} at start; "
                  f"turn-memory config overrides: {s.get('tm_overrides') or 'none'}")
        print("\n" + report(hosts))
        failures = [f for s in saved for f in s["failures"]]
        for f in failures:
            print(f"FAIL: {f}")
        return 1 if failures else 0
    scenarios = parse_scenarios(args.scenarios)
    changes: dict[str, Any] = {}
    if args.model == "instant":
        changes.update(ttfb_ms=INSTANT[0], tokens_per_s=INSTANT[1])
    elif args.model == "realistic":
        changes.update(ttfb_ms=REALISTIC[0], tokens_per_s=REALISTIC[1])
    for key, value in (("think_ms", args.think_ms), ("result_tokens", args.result_tokens),
                       ("worker_requests", args.worker_requests), ("turns", args.turns),
                       ("context_window", args.context_window)):
        if value is not None:
            changes[key] = value
    scenarios = [replace(sc, **changes, **({"rewrite_ratio": args.rewrite_ratio}
                                           if args.rewrite_ratio is not None and not sc.stock_of else {}))
                 for sc in scenarios]
    tm_overrides = parse_sets(args.tm_set)
    started = time.monotonic()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    hosts, failures = [], []
    for host in (["rc8", "v021"] if args.host == "all" else [args.host]):
        try:
            h = bench_host(host, scenarios, args.runs, tm_overrides, args.keep, say)
        except Exception as exc:  # one host could not run at all: report it, go on with the other
            failures.append(f"{host}: could not run: {exc!r}")
            continue
        hosts.append(h)
    failures += failures_of(hosts)
    everything = {"machine": machine_info(), "load_before": load, "tm_overrides": tm_overrides,
                  "hosts": hosts, "failures": failures, "total_s": time.monotonic() - started}
    if args.save:
        args.save.write_text(json.dumps(everything, indent=2, default=str))
    if args.json:
        print(json.dumps(everything, indent=2, default=str))
        return 1 if failures else 0
    print(f"machine: {machine_info()}" + (f"; load average {load:.2f} at start" if load is not None else ""))
    print("price model: DeepSeek-style prefix cache, 64-token units, hit $0.028 / miss $0.28 / output $0.42 per M "
          f"tokens, 4 chars per token; turn-memory config overrides: {tm_overrides or 'none'}")
    print("")
    if hosts:
        print(report(hosts))
    print(f"total {time.monotonic() - started:.0f} s")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
