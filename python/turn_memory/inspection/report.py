"""Run the streaming fold over one log and shape the result: the JSON schema and the text view.

The JSON schema (`SCHEMA`) is documented in docs/inspect-json.md; scripts may rely on it.
Bump the version when a field changes meaning or disappears; adding fields keeps it.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any, Callable, Collection

import orjson

from turn_memory.host.dialect import Dialect
from turn_memory.inspection.fold import CheckpointStats, Fold, TurnStats
from turn_memory.logs.reader import SessionLogError, UnknownDialect, log_dialect
from turn_memory.logs.stream import LogStream
from turn_memory.turns.lifecycle import Phase, durable_phase

SCHEMA = "turn-memory.inspect/1"
#: fold problems that mean part of the log could not be read (the rest are inconsistencies)
DAMAGE_KINDS = frozenset({"bad-line", "bad-row", "seq-gap"})


#: lines of its first batch a log's dialect is told from when its header is lost (a zstd
#: batch holds 512 or more unless the log is shorter; a plain one a whole read block)
SNIFF_LINES = 2000


def dialect_of(path: Path, lines: list[bytes]) -> Dialect:
    """The dialect that wrote the log, from its first lines (`logs.reader.log_dialect`)."""
    records = []
    for line in lines[:SNIFF_LINES]:
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue  # damage: the fold reports it
    try:
        return log_dialect(records)
    except UnknownDialect as exc:
        raise UnknownDialect(f"{path}: cannot tell which DSH version wrote this session log: {exc}") from exc
    except SessionLogError as exc:
        raise SessionLogError(f"{path} is not a readable DSH session log: {exc}") from exc


def inspect_log(path: str | os.PathLike[str], on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Read the whole log once, in bounded memory, and return the report (see SCHEMA)."""
    path = Path(path)
    stream, fold = fold_log(path, on_progress)
    return build_report(path, stream, fold)


def fold_log(path: Path, on_progress: Callable[[int], None] | None = None) -> tuple[LogStream, Fold]:
    """The whole log streamed through the fold once, in the dialect its content names.

    Raises UnknownDialect when the content does not name one turn-memory knows, and
    SessionLogError when nothing in the file could be read as a session log.
    """
    stream = LogStream(path, on_progress=on_progress)
    fold: Fold | None = None
    # the fold makes no reference cycles, but its millions of short-lived dicts keep
    # triggering the cycle collector, which then rescans every live node: about a sixth
    # of the run. Refcounting frees everything; the collector is restored afterwards.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for batch in stream.batches():
            if fold is None:
                fold = Fold(dialect_of(path, batch.lines))
            fold.feed_lines(batch.lines, batch.where)
    finally:
        if collecting:
            gc.enable()
    if fold is None:
        damage = "; ".join(f"{d.kind}: {d.detail}" for d in stream.damage)
        raise SessionLogError(f"{path} is not a readable DSH session log" + (f" ({damage})" if damage else ""))
    return stream, fold


def _size(nodes: int, tokens: int) -> dict[str, int]:
    return {"nodes": nodes, "tokens": tokens}


#: how `inspect` words each phase the log can show (`turns.lifecycle.durable_phase`)
_STATE_OF = {Phase.PENDING: "pending", Phase.LANDED: "compressed", Phase.NO_OP: "no-op"}


def _phase(t: TurnStats) -> Phase | None:
    return durable_phase(t.complete, [m.kind for m in t.markers])


def _state(t: TurnStats) -> str:
    """As recovery sees the turn (`turns.recovery`): a pending one (held for a later batch, or
    compressing) and a landed one that still shows raw reasoning ("stale": the marker of a
    version that left it raw) are both compressed again on the next start."""
    phase = _phase(t)
    if phase is None:
        return "untouched" if t.complete else "open"
    kept = bool(t.markers) and t.markers[-1].kept_assistants  # its reasoning stays by design
    if phase is not Phase.PENDING and t.reasoning_nodes > 0 and t.shadowed_by is None and not kept:
        return "stale"
    return _STATE_OF[phase]


def with_journal(report: dict[str, Any], owed: Collection[int]) -> dict[str, Any]:
    """The report with the turns the engine's journal says ended and still owe their marker
    (`turns.marking`) read as recovery reads them: pending, `journaled`."""
    for turn in report["turns"]:
        if turn["state"] == "untouched" and turn["turn"] in owed:
            turn.update(state="pending", phase=Phase.PENDING.value, journaled=True)
    return report


def _turn(t: TurnStats) -> dict[str, Any]:
    after = t.folded if t.folded is not None else (t.nodes, t.tokens)
    phase = _phase(t)
    last = t.markers[-1] if t.markers else None
    landing = last.form if last is not None and last.kind == "compression" else None
    return {"turn": t.turn, "complete": t.complete, "state": _state(t), "phase": phase.value if phase else None,
            "journaled": False, "landing": landing,
            "before": _size(t.raw_nodes, t.raw_tokens), "after": _size(*after), "current": _size(t.nodes, t.tokens),
            "markers": [{"kind": m.kind, "seq": m.seq} for m in t.markers], "shadowed_by": t.shadowed_by}


def _checkpoint(c: CheckpointStats) -> dict[str, Any]:
    turns = [c.first_turn, c.last_turn] if c.first_turn is not None else None
    return {"seq": c.seq, "compaction_id": c.compaction_id, "range": {"start": c.start, "end": c.end},
            "shadowed": {"nodes": c.shadowed_nodes, "tokens": c.shadowed_tokens, "turns": turns},
            "tokens": c.own_tokens, "current": c.folded_by is None, "folded_by": c.folded_by}


def build_report(path: Path, stream: LogStream, fold: Fold) -> dict[str, Any]:
    damage = [d.to_json() for d in stream.damage]
    if fold.header is None and (stream.damage or fold.lines):
        damage.insert(0, {"kind": "no-header", "offset": 0, "detail": "no session header line was read"})
    damage += [{"kind": p.kind, "offset": p.offset, "detail": p.detail} for p in fold.problems if p.kind in DAMAGE_KINDS]
    inconsistencies = [{"kind": p.kind, "offset": p.offset, "detail": p.detail}
                       for p in fold.problems if p.kind not in DAMAGE_KINDS]
    header = fold.header or {}
    surface_tokens = fold.surface_tokens
    saved = fold.raw_tokens - surface_tokens
    return {
        "schema": SCHEMA,
        "log": {"path": str(path), "format": "zstd" if stream.compressed else "jsonl", "dialect": fold.dialect.name,
                "bytes": stream.size, "frames": stream.frames if stream.compressed else None,
                "lines": fold.lines, "events": fold.events},
        "session": {k: header.get(k) for k in ("id", "origin", "cwd", "createdAt")} if fold.header else None,
        "whole": not damage,
        "damage": damage,
        "inconsistencies": inconsistencies,
        "problem_counts": dict(fold.problem_counts),
        "events_by_type": dict(sorted(fold.by_type.items(), key=lambda kv: str(kv[0]))),
        "turns": [_turn(t) for t in sorted(fold.turns.values(), key=lambda t: t.turn)],
        "checkpoints": [_checkpoint(c) for c in fold.checkpoints],
        "compactions": {"started": fold.compactions_started, "committed": len(fold.checkpoints),
                        "failed": fold.compactions_failed},
        "surface": _size(fold.surface_nodes, surface_tokens),
        "before": _size(fold.raw_nodes, fold.raw_tokens),
        "savings": {"tokens": saved, "percent": round(100 * saved / fold.raw_tokens, 1) if fold.raw_tokens else 0.0},
    }


# -- text view --------------------------------------------------------------------------------

def _n(value: int) -> str:
    return f"{value:,}"


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size:,} bytes"


def print_report(report: dict[str, Any], out: Any) -> None:
    """The text view through `out.say` (detail) and `out.result` (what --quiet keeps)."""
    log, session = report["log"], report["session"] or {}
    frames = f" in {_n(log['frames'])} frames" if log["frames"] is not None else ""
    out.result(f"{log['path']}")
    out.say(f"  {log['dialect']} {log['format']} log, {_mb(log['bytes'])}{frames}, {_n(log['events'])} events; "
            f"session {session.get('id') or '?'}" + (f" ({session['origin']})" if session.get("origin") else ""))
    turns = report["turns"]
    if turns:
        out.say(f"  {'turn':>6}  {'before turn-memory':<25}  {'after':<24}  {'state':<10} markers")
    for t in turns:
        before, after = t["before"], t["after"]
        markers = " ".join(f"{m['kind']}@{m['seq']}" for m in t["markers"])
        folded = f"  folded into checkpoint @{t['shadowed_by']}" if t["shadowed_by"] is not None else ""
        landing = f" (landed {t['landing']})" if t["landing"] else ""
        out.say(f"  {t['turn']:>6}  {before['nodes']:>5} nodes ~{before['tokens']:>8,} tok  "
                f"{after['nodes']:>4} nodes ~{after['tokens']:>8,} tok  {t['state']:<10} {markers}{landing}{folded}")
    for c in report["checkpoints"]:
        sh = c["shadowed"]
        turns_text = f"turns {sh['turns'][0]}-{sh['turns'][1]}, " if sh["turns"] else ""
        where = "on the surface" if c["current"] else f"itself folded into @{c['folded_by']}"
        out.say(f"  checkpoint @{c['seq']} ({c['compaction_id']}): folds seqs {c['range']['start']}..{c['range']['end']} "
                f"({_n(sh['nodes'])} nodes, {turns_text}~{_n(sh['tokens'])} tok) into ~{_n(c['tokens'])} tok; {where}")
    comp = report["compactions"]
    if comp["started"]:
        out.say(f"  compactions: {comp['started']} started, {comp['committed']} committed, {comp['failed']} failed")
    surface, before, saved = report["surface"], report["before"], report["savings"]
    out.result(f"  surface now: {_n(surface['nodes'])} nodes, ~{_n(surface['tokens'])} tokens; before turn-memory: "
               f"{_n(before['nodes'])} nodes, ~{_n(before['tokens'])} tokens; saved ~{_n(saved['tokens'])} tokens "
               f"({saved['percent']}%); nothing was deleted from the log")
    counts = report["problem_counts"]
    for d in report["damage"]:
        at = f" at byte {d['offset']}" if d["offset"] is not None else ""
        out.result(f"  DAMAGE ({d['kind']}{at}): {d['detail']}")
    for p in report["inconsistencies"]:
        out.say(f"  INCONSISTENT ({p['kind']}): {p['detail']}")
    hidden = sum(counts.values()) - sum(1 for d in report["damage"] if d["kind"] in DAMAGE_KINDS) \
        - len(report["inconsistencies"])
    if hidden > 0:
        out.say(f"  … and {hidden} more problem(s) not listed ({', '.join(f'{k}: {v}' for k, v in counts.items())})")
    verdict = "whole" if report["whole"] else "DAMAGED: what could be read is reported above"
    out.result(f"  log: {verdict}")
