#!/usr/bin/env python3
"""Session-compaction benchmark: `python bench/compaction.py [--reps N] [--sizes 50,200,1000] [--json]`.

Host side only, pure Python (no DSH, no model): scripted sessions of 50, 200 and 1,000
completed tool-using turns (1-4 tool calls per turn with 10-80 line build/test logs, plus
an open turn), each at exactly its pressure threshold, compacted once.

- **tokens**: the surface priced with `turn_memory.host.tokens` (the DSH meter's heuristic)
  before and after the compaction, and what the checkpoint itself costs;
- **one automatic compaction end to end**: `CompactionService.pre_step` on the in-memory host
  (`tests/unit/fake_host.py`, which checks every append with the surface model and forwards
  it to the engine's mirror as JSON), a meter that answers with the surface's heuristic
  price, instant scripted workers that call the real session tools
  through the worker registry, and the whole commit;
- **where the time goes**: the same work step by step on a fresh log (measure, selection,
  landing compaction/start, segmentation, the workers' tool calls and prompts, checkpoint
  rendering, commit plan validation with the surface model, folding the commit into the
  mirror).

Medians of `--reps` repetitions. The exit status is non-zero when a compaction did not
commit or a scripted worker was refused, never for a slow result: the verdict column says that.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import re
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
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # the in-memory host and the session builders

from fake_host import FakeHost  # noqa: E402
from session_builders import SessionBuilder  # noqa: E402
from machine import machine_info  # noqa: E402
from turn_memory.bridge.protocol import AgentOptions, MeasureResult, MeteredNode, WorkerRunParams, WorkerRunResult  # noqa: E402
from turn_memory.compaction import transaction as tx_  # noqa: E402
from turn_memory.compaction.policy import select_pressure_range  # noqa: E402
from turn_memory.compaction.segmented import SegmentedJob, render_transcript  # noqa: E402
from turn_memory.compaction.policy import surface_measure, surface_prices  # noqa: E402
from turn_memory.compaction.scope import CompactionScope  # noqa: E402
from turn_memory.compaction.service import CompactionService  # noqa: E402
from turn_memory.config import EngineConfig  # noqa: E402
from turn_memory.host.dialects import RC8  # noqa: E402
from turn_memory.host.surface import SessionLog  # noqa: E402
from turn_memory.host.tokens import estimate_message  # noqa: E402
from turn_memory.prompts import read_prompt  # noqa: E402
from turn_memory.runtime.land import validate  # noqa: E402
from turn_memory.runtime.mirror import MirroredSession  # noqa: E402
from turn_memory.runtime.workers import WorkerRegistry  # noqa: E402

SIZES = (50, 200, 1000)
AGENT = AgentOptions(provider="deepseek-official", model="deepseek-v4-flash")
CONFIG = EngineConfig()  # defaults: threshold 80%, retain 16% of the window, 32k-token segments, workers
#: a growth factor more than this multiple of the size ratio is flagged as superlinear
SUPERLINEAR = 1.5


class BenchFailure(Exception):
    pass


# -- the session ---------------------------------------------------------------------------

def build_events(turns: int) -> tuple[list[dict[str, Any]], int]:
    """`turns` completed tool-using turns and one open turn; (events, surface tokens)."""
    b = SessionBuilder(RC8, seed=turns)
    b.preamble()
    rng = random.Random(turns)
    for _ in range(turns):
        b.work_turn(calls=rng.randint(1, 4), log_lines=rng.randint(10, 80))
    b.open_turn()
    log = SessionLog(RC8, b.events)
    return b.events, sum(surface_prices(log).values())


def window_at_threshold(tokens: int, ratio: float) -> int:
    """The context window whose pressure threshold is exactly `tokens`."""
    window = -(-tokens * 10 // int(ratio * 10))
    while int(window * ratio) > tokens:
        window -= 1
    return window


def with_window(events: list[dict[str, Any]], window: int) -> list[dict[str, Any]]:
    seq = len(events)
    return events + [{"type": "request/context", "seq": seq, "time": 1_796_000_000_000 + seq,
                      "data": {"contextWindow": window}}]


# -- instant scripted workers ---------------------------------------------------------------

SEGMENT_LINE = re.compile(r"^- S(\d+) · (?:turns (\d+)-(\d+)|no complete turn) ")


def worker_memory(first: int, last: int) -> list[dict[str, str]]:
    """What a diligent worker keeps of turns first..last: the asks, and per turn what was found and done."""
    asks = "\n".join(f"Turn {t}: fix the failing module on nested input, run its tests, keep the API stable."
                     for t in range(first, last + 1))
    done = "\n".join(f"Turn {t}: lookahead skipped one token on nested input (src/<module>/mod.rs); fixed it; "
                     f"cargo test -p <module> passes; unused-variable warnings left as they were."
                     for t in range(first, last + 1))
    return [{"role": "user", "content": asks}, {"role": "assistant", "content": done}]


def scripted_worker(call: Callable[[str, str, str, Any], Any], requests: list[int]):
    """A worker that looks around like a real one, then folds its segment and finishes."""

    async def run_worker(params: WorkerRunParams, timeout: float) -> WorkerRunResult:
        job, worker = params.jobId, params.workerId

        def tool(name: str, args: Any) -> str:
            answer = call(job, worker, name, args)
            if answer.is_error:
                raise BenchFailure(f"worker {worker}: {name} refused: {answer.text[:300]}")
            return answer.text

        catalog = tool("list_session_segments", {})
        revision = int(re.search(r"revision (\d+)", catalog).group(1))
        assigned = int(re.search(r"you are assigned S(\d+)", catalog).group(1))
        first = last = 0
        for line in catalog.splitlines()[1:]:
            m = SEGMENT_LINE.match(line)
            if m and int(m.group(1)) == assigned and m.group(2):
                first, last = int(m.group(2)), int(m.group(3))
        tool("read_session_source", {})  # the first page of its segment
        tool("read_session_memory", {})  # the working checkpoint's catalog
        tool("search_session_memory", {"query": "lookahead nested"})
        tool("replace_session_memory", {"expected_revision": revision, "from": f"P{assigned}",
                                        "nodes": worker_memory(first, last)})
        tool("finish_session_segment", {})
        requests.append(6)
        return WorkerRunResult(stop="concluded", requests=6)

    return run_worker


class SurfaceMeter:
    """DSH's token meter, answering what its heuristic gives for the current surface (the
    engine's own pricing stands in for it only when the meter refuses a node a landing wrote)."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.calls = 0

    async def __call__(self, session_id: str) -> MeasureResult:
        self.calls += 1
        measure = surface_measure(self.host.session.log)
        return MeasureResult(totalTokens=measure.tokens, nodes=[MeteredNode(seq=s, tokens=t) for s, t in measure.nodes.items()])


# -- one automatic compaction, end to end -----------------------------------------------------

def end_to_end(events: list[dict[str, Any]], open_turn: int) -> dict[str, Any]:
    host = FakeHost(RC8, events)
    registry = WorkerRegistry()
    workers: list[int] = []
    host.run_worker = scripted_worker(registry.call, workers)  # type: ignore[method-assign]
    applied = {"s": 0.0, "n": 0}
    apply = host.apply

    async def timed_apply(*args: Any) -> Any:
        s = time.perf_counter()
        try:
            return await apply(*args)
        finally:
            applied["s"] += time.perf_counter() - s
            applied["n"] += 1

    host.apply = timed_apply  # type: ignore[method-assign]
    service = CompactionService(registry)
    meter = SurfaceMeter(host)
    before_tokens = sum(surface_prices(host.session.log).values())
    gc.collect()
    s = time.perf_counter()
    asyncio.run(service.pre_step(CompactionScope(host.session, host, CONFIG, AGENT, registry), open_turn, meter))
    total = time.perf_counter() - s

    log = host.session.log
    ends = [e for e in log.events if e["type"] == "compaction/end"]
    if len(ends) != 1 or "error" in ends[0]["data"]:
        raise BenchFailure(f"the compaction did not commit: {ends}")
    checkpoint = next(e for e in log.events if e["type"] == "user/message" and e.get("surfaceOp") != "append"
                      and e["seq"] > len(events))
    return {
        "total_s": total, "host_apply_s": applied["s"], "applies": applied["n"], "meter_calls": meter.calls,
        "workers": len(workers), "tokens_before": before_tokens,
        "tokens_after": sum(surface_prices(log).values()),
        "checkpoint_tokens": estimate_message(checkpoint["data"]),
        "shadowed_nodes": len(next(e for e in log.events if e["type"] == "compaction/summary")["data"]["shadowedSeqs"]),
        "surface_nodes_before": len(SessionLog(RC8, events).nodes),
        "surface_nodes_after": len(log.nodes),
    }


# -- the same work, step by step ----------------------------------------------------------------

def steps(events: list[dict[str, Any]], open_turn: int) -> dict[str, float]:
    log = SessionLog(RC8, events)
    session = MirroredSession("bench", RC8, None, log)
    registry = WorkerRegistry()
    cfg = CONFIG.compaction
    t: dict[str, float] = {}
    clock = time.perf_counter
    gc.collect()

    s = clock()
    measured = surface_measure(log)
    t["measure: price the surface"] = clock() - s

    s = clock()
    window = next(e["data"]["contextWindow"] for e in reversed(log.events) if e["type"] == "request/context")
    selection = select_pressure_range(log, measured.nodes, int(window * cfg.retainRatio))
    t["select the range"] = clock() - s
    if selection is None:
        raise BenchFailure("nothing selected")

    tx = tx_.Transaction.new(None, open_turn)
    s = clock()
    for event in validate(log, tx_.start_plan(tx)):
        log.append(event)
    start_seq = len(log) - 1
    t["land compaction/start (check + fold)"] = clock() - s

    job = SegmentedJob(session, None, cfg, selection)  # type: ignore[arg-type]
    s = clock()
    job.prepare()
    t["segment + worker sources"] = clock() - s

    workers: list[int] = []

    class Port:
        run_worker = staticmethod(scripted_worker(registry.call, workers))

    job.port = Port()  # type: ignore[assignment]
    registry.add(job.job_id, job)
    s = clock()
    asyncio.run(job.run())
    t["workers: prompts + tool calls"] = clock() - s

    s = clock()
    text = render_transcript(job.prepare()[1])  # prepared above: the workers' checkpoint
    block = {"type": "text", "text": text}
    summary = tx_.Summary(blocks=[block], raw_output=[block], provider=AGENT.provider or "", model=AGENT.model or "")
    shadowed = tx_.shadowed_tokens(log, selection)
    message = tx_.checkpoint_message(RC8, tx, summary, read_prompt("checkpoint"))
    tx_.check_smaller(message, shadowed)
    t["checkpoint: render + size check"] = clock() - s

    s = clock()
    plan = tx_.commit_plan(log, tx, start_seq, selection, summary, message, shadowed)
    stamped = validate(log, plan)
    t["commit: plan + surface-model check"] = clock() - s

    s = clock()
    for event in stamped:
        log.append(event)
    t["commit: fold into the mirror"] = clock() - s
    return t


# -- report -------------------------------------------------------------------------------------

def fmt_ms(v: float) -> str:
    if v < 1:
        return f"{v * 1e3:.0f} µs"
    return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"


def fmt_tokens(v: float) -> str:
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k" if v >= 1e3 else f"{v:.0f}"


def table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda c: "  ".join(x.ljust(widths[i]) if i == 0 else x.rjust(widths[i]) for i, x in enumerate(c)).rstrip()  # noqa: E731
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])


def run(sizes: tuple[int, ...], reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}, "reps": reps}
    warm, tokens = build_events(10)  # imports, prompt files, caches
    warm = with_window(warm, window_at_threshold(tokens, CONFIG.compaction.thresholdRatio))
    end_to_end(warm, 11)
    steps(warm, 11)
    for turns in sizes:
        events, tokens = build_events(turns)
        window = window_at_threshold(tokens, CONFIG.compaction.thresholdRatio)
        events = with_window(events, window)
        e2e = [end_to_end(events, turns + 1) for _ in range(reps)]
        parts = [steps(events, turns + 1) for _ in range(reps)]
        first = e2e[0]
        out["sizes"][turns] = {
            "events": len(events), "window": window, **{k: v for k, v in first.items() if not k.endswith("_s")},
            "e2e_ms": statistics.median(r["total_s"] for r in e2e) * 1e3,
            "host_apply_ms": statistics.median(r["host_apply_s"] for r in e2e) * 1e3,
            "e2e_runs_ms": [round(r["total_s"] * 1e3, 2) for r in e2e],
            "steps_ms": {k: statistics.median(p[k] for p in parts) * 1e3 for k in parts[0]},
            "steps_total_ms": statistics.median(sum(p.values()) for p in parts) * 1e3,
        }
    growth = {}
    for a, b in zip(sizes, sizes[1:]):
        A, B = out["sizes"][a], out["sizes"][b]
        per_step = {k: B["steps_ms"][k] / A["steps_ms"][k] for k in A["steps_ms"]}
        growth[f"{b}/{a}"] = {"turns": b / a, "e2e": B["e2e_ms"] / A["e2e_ms"],
                              "steps": B["steps_total_ms"] / A["steps_total_ms"],
                              "tokens": B["tokens_before"] / A["tokens_before"], "per_step": per_step}
    out["growth"] = growth
    return out


def report(data: dict[str, Any]) -> str:
    sizes = data["sizes"]
    cols = list(sizes)
    head = ["metric", *[f"{n} turns" for n in cols], *data["growth"].keys()]
    rows: list[list[str]] = []

    def row(metric: str, values: list[str], growth: list[str] | None = None) -> None:
        rows.append([metric, *values, *(growth or [""] * len(data["growth"]))])

    g = data["growth"]
    row("surface events / nodes", [f"{sizes[n]['events']} / {sizes[n]['surface_nodes_before']}" for n in cols],
        [f"{v['turns']:.0f}× turns" for v in g.values()])
    row("tokens before (= threshold)", [fmt_tokens(sizes[n]["tokens_before"]) for n in cols],
        [f"{v['tokens']:.2f}×" for v in g.values()])
    row("tokens after", [f"{fmt_tokens(sizes[n]['tokens_after'])} ({sizes[n]['tokens_after'] / sizes[n]['tokens_before']:.0%})"
                         for n in cols])
    row("  of which the checkpoint", [fmt_tokens(sizes[n]["checkpoint_tokens"]) for n in cols])
    row("  folded nodes -> surface nodes after", [f"{sizes[n]['shadowed_nodes']} -> {sizes[n]['surface_nodes_after']}"
                                                  for n in cols])
    row("segments (= workers, one each)", [str(sizes[n]["workers"]) for n in cols])
    row("one compaction, end to end", [fmt_ms(sizes[n]["e2e_ms"]) for n in cols],
        [f"{v['e2e']:.2f}× ({verdict(v['e2e'], v['turns'])})" for v in g.values()])
    row("  per completed turn", [f"{sizes[n]['e2e_ms'] * 1e3 / n:.0f} µs" for n in cols])
    row("  of which in-memory host apply", [fmt_ms(sizes[n]["host_apply_ms"]) for n in cols])
    row("steps on a fresh log, total", [fmt_ms(sizes[n]["steps_total_ms"]) for n in cols],
        [f"{v['steps']:.2f}× ({verdict(v['steps'], v['turns'])})" for v in g.values()])
    row("  per completed turn", [f"{sizes[n]['steps_total_ms'] * 1e3 / n:.0f} µs" for n in cols])
    for step in sizes[cols[0]]["steps_ms"]:
        row(f"  {step}", [fmt_ms(sizes[n]["steps_ms"][step]) for n in cols],
            [f"{v['per_step'][step]:.2f}×{' !' if verdict(v['per_step'][step], v['turns']) != '≈ linear' else ''}"
             for v in g.values()])
    return table(head, rows)


def verdict(factor: float, turns: float) -> str:
    return "≈ linear" if factor <= SUPERLINEAR * turns else "SUPERLINEAR"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per size (default 5)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="completed turns per session (default 50,200,1000)")
    ap.add_argument("--json", action="store_true", help="print every number as JSON instead of the table")
    args = ap.parse_args(argv)
    started = time.monotonic()
    try:
        data = run(tuple(int(x) for x in args.sizes.split(",")), args.reps)
    except BenchFailure as exc:
        print(f"FAIL: {exc}")
        return 1
    data["machine"] = machine_info()
    data["total_s"] = time.monotonic() - started
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"machine: {data['machine']}")
    print(f"one automatic compaction at the pressure threshold (80% of the window, 16% retained), default config; "
          f"median of {args.reps}\n")
    print(report(data))
    print(f"\n≈ linear: growth ≤ {SUPERLINEAR}× the growth in turns; ! marks a step above that (steps under a "
          f"millisecond are noise)")
    print(f"\ntotal {data['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
