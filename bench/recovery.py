#!/usr/bin/env python3
"""Resync benchmark: `python bench/recovery.py [--sizes 10000,50000,100000] [--reps 3] [--baseline] [--json]`.

What the engine does when the shim resends a whole session (agent/created, reconnect, an
engine restart, a resync after a gap), on synthetic DSH 0.1.0-rc.8 sessions of 10k, 50k and
100k events (about 200 events per turn: 50, 250 and 500 turns) with turn-memory's footprint
(`turn_memory.devtools.synthetic_log`: a pending marker per turn, landings in place, no-op
landings, every 11th turn left pending, a checkpoint every 150 turns):

- **fold**: `SessionMirror.receive` of the one reset batch, as the shim sends it (assistant
  chunks elided to their envelope): JSON parse, the surface model with its reload checks,
  the log's turn index and the session's hand-off ledger;
- **recovery**: what the engine's `session.events` handler then runs synchronously, before
  it answers anything else: the thought-hint catch-up, the turn service's recovery scan
  (which turns to redo), their enqueue and the check for stale kept compressions, and the
  follow-up dispatcher's scan.

It prints the median time of each per size, the cost per event, and the growth factor of
the per-event cost from the smallest to the largest size (1.0 = flat). `--baseline` also
times the recovery scan as it was before the turn index (one pass over the log per
completed turn with a marker), for comparison. The exit status is non-zero when the
largest size's fold + recovery takes a second or more, or the per-event cost grows more
than 1.5x; the verdict line says which.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:
    import turn_memory  # noqa: F401
except ImportError:  # running with a Python that has not pip-installed the project
    sys.path.insert(0, str(ROOT / "python"))

from machine import machine_info  # noqa: E402
from turn_memory.bridge.protocol import SessionEventsParams, SessionMeta  # noqa: E402
from turn_memory.config import EngineConfig  # noqa: E402
from turn_memory.continuation.dispatch import FollowupDispatcher  # noqa: E402
from turn_memory.devtools.synthetic_log import write_synthetic_log  # noqa: E402
from turn_memory.hints.service import HintService  # noqa: E402
from turn_memory.host.dialects import RC8  # noqa: E402
from turn_memory.host.continuations import awaiting_followup  # noqa: E402
from turn_memory.host.markers import marker_of  # noqa: E402
from turn_memory.host.surface import SessionLog  # noqa: E402
from turn_memory.host.turn_index import TURN_NODE_TYPES, has_reasoning, node_origins  # noqa: E402
from turn_memory.logs.reader import read_session_log  # noqa: E402
from turn_memory.runtime.mirror import SessionMirror  # noqa: E402
from turn_memory.runtime.workers import WorkerRegistry  # noqa: E402
from turn_memory.turns.results import ResultStore  # noqa: E402
from turn_memory.turns.service import TurnService  # noqa: E402

EVENTS_PER_TURN = 200
STREAM_SCALE = 1.8  # synthetic_log's chunk density for about 200 events per turn
TARGET_S = 1.0
FLAT = 1.5
SESSION = "bench-recovery"


class IdlePort:
    """A host port nothing is asked of while the timed part runs."""

    def __getattr__(self, name: str) -> Any:
        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the benchmark host does not answer")
        return refuse


def session_payload(events_target: int, tmp: Path) -> tuple[bytes, int, int]:
    """(the reset batch as the shim sends it, event count, completed turns)."""
    path = tmp / f"s{events_target}.jsonl.zstd"
    stats = write_synthetic_log(path, turns=max(2, events_target // EVENTS_PER_TURN), stream_scale=STREAM_SCALE)
    _, events = read_session_log(path)
    slim = [e if e["type"] != "assistant/chunk" else {"type": e["type"], "seq": e["seq"], "time": e["time"], "data": None}
            for e in events]
    return json.dumps(slim, separators=(",", ":")).encode(), len(slim), stats.turns


def old_turns_to_recover(log: SessionLog) -> list[int]:
    """The recovery scan before the turn index: one pass over the log per landed turn."""
    completed, pending, landed = set(), set(), set()
    for event in log.events:
        if event["type"] == "turn/end":
            completed.add(event["data"]["turn"])
        elif (mark := marker_of(event)) is not None:
            (pending if mark[0] == "pending" else landed).add(mark[1])
    redo = {t for t in pending - landed if t in completed}
    redo.update(r.turn for r in awaiting_followup(log.events) if r.turn not in landed)
    for turn in landed & completed:
        origins = node_origins(log.events, log.dialect)
        nodes = [s for s in log.nodes if origins.get(s) == ("turn", turn) and log.events[s]["type"] in TURN_NODE_TYPES]
        if any(has_reasoning(log.events[s]) for s in nodes):
            redo.add(turn)
    return sorted(redo)


async def one_resync(payload: bytes, count: int, baseline: bool, home: Path) -> dict[str, Any]:
    config = EngineConfig()
    mirror = SessionMirror()
    hints, workers = HintService(), WorkerRegistry()
    turns = TurnService(workers, hints)
    followups = FollowupDispatcher(turns)
    port = IdlePort()
    results = ResultStore(home)  # kept compressions: none here, but the scan for stale ones runs
    params = SessionEventsParams(sessionId=SESSION, start=0, count=count, reset=True, meta=SessionMeta(liveFrom=None))
    started = time.perf_counter()
    events = mirror.receive(None, RC8, params, payload)
    folded = time.perf_counter()
    assert events is not None, "the synthetic session did not fold"
    session = mirror.get(SESSION)
    assert session is not None and not session.log.reload_problems, session and session.log.reload_problems[:3]
    hints.on_events(session, events, True, lambda: port, config)  # type: ignore[arg-type,return-value]
    turns.on_events(session, events, True, lambda: port, config, results)  # type: ignore[arg-type,return-value]
    followups.on_events(session, events, True, lambda: port, config)  # type: ignore[arg-type,return-value]
    recovered = time.perf_counter()
    queued = sorted(turns.sessions[SESSION].jobs) if SESSION in turns.sessions else []
    out: dict[str, Any] = {"fold_s": folded - started, "recovery_s": recovered - folded, "total_s": recovered - started,
                           "recovered_turns": len(queued)}
    if baseline:
        t0 = time.perf_counter()
        old = old_turns_to_recover(session.log)
        out["baseline_recovery_s"] = time.perf_counter() - t0
        assert old == [t for _, t in queued], (old, queued)
    hints.close()
    await asyncio.gather(*turns.close(), return_exceptions=True)
    await followups.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000,100000", help="session sizes in events, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--baseline", action="store_true", help="also time the recovery scan before the turn index")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tm-bench-recovery-") as tmp:
        for size in sizes:
            payload, count, turn_count = session_payload(size, Path(tmp))
            runs = [asyncio.run(one_resync(payload, count, args.baseline and rep == 0, Path(tmp) / "home"))
                    for rep in range(args.reps)]
            row: dict[str, Any] = {"events": count, "turns": turn_count, "bytes": len(payload),
                                   "recovered_turns": runs[0]["recovered_turns"], "runs": runs}
            for key in ("fold_s", "recovery_s", "total_s"):
                row[key] = statistics.median(r[key] for r in runs)
            if args.baseline:
                row["baseline_recovery_s"] = runs[0]["baseline_recovery_s"]
            rows.append(row)
    first, last = rows[0], rows[-1]

    def growth(key: str) -> float:
        return (last[key] / last["events"]) / (first[key] / first["events"])

    growths = {key: growth(key) for key in ("fold_s", "recovery_s", "total_s")}
    failures = []
    if last["total_s"] >= TARGET_S:
        failures.append(f"resync of {last['events']} events took {last['total_s']:.2f} s (target < {TARGET_S:.0f} s)")
    if growths["total_s"] > FLAT:
        failures.append(f"per-event cost grew {growths['total_s']:.2f}x from {first['events']} to {last['events']} events")
    if args.json:
        print(json.dumps({"machine": machine_info(), "rows": rows, "growth": growths, "failures": failures}, indent=2))
        return 1 if failures else 0
    print(f"resync of a whole session (median of {args.reps}); {machine_info()}")
    head = f"{'events':>8} {'turns':>6} {'redo':>5} {'fold ms':>9} {'recovery ms':>12} {'total ms':>9} {'µs/event':>9}"
    if args.baseline:
        head += f" {'before index: recovery ms':>26}"
    print(head)
    for row in rows:
        line = (f"{row['events']:>8} {row['turns']:>6} {row['recovered_turns']:>5} {row['fold_s'] * 1000:>9.1f} "
                f"{row['recovery_s'] * 1000:>12.2f} {row['total_s'] * 1000:>9.1f} {row['total_s'] / row['events'] * 1e6:>9.2f}")
        if args.baseline:
            line += f" {row['baseline_recovery_s'] * 1000:>26.1f}"
        print(line)
    print(f"per-event cost growth {first['events']} -> {last['events']} events: total {growths['total_s']:.2f}x, "
          f"fold {growths['fold_s']:.2f}x, recovery {growths['recovery_s']:.2f}x (1.0 = flat)")
    print("verdict: " + ("; ".join(failures) if failures else
                         f"OK: {last['events']} events resync in {last['total_s'] * 1000:.0f} ms, cost per event flat"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
