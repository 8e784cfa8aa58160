"""A finished compression kept across restarts: saved when its job finishes, restored instead
of running workers again while the surface it replaces is exactly as it was (`turns.results`
holds the files and the staleness rules)."""

from __future__ import annotations

import logging

from turn_memory.host.surface import SessionLog
from turn_memory.turns.compression import Compression
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.nodes import OriginalNode
from turn_memory.turns.results import ResultStore, make_record, stale_reason

log = logging.getLogger("turn_memory.turns")


def save(results: ResultStore, log_: SessionLog, session_id: str, turn: int, compression: Compression) -> None:
    record = make_record(log_, session_id, turn, compression.positions, compression.editor.dump(),
                         len(compression.workers), compression.modes, compression.requests)
    results.save(session_id, turn, record)


def restore(results: ResultStore, log_: SessionLog, session_id: str, turn: int, positions: list[int],
            originals: list[OriginalNode], where: str, *, keep_assistants: bool = False) -> Compression | None:
    """Rebuild a finished compression a previous process kept; drop it when it no longer stands."""
    record = results.load(session_id, turn)
    if record is None:
        return None
    why = stale_reason(log_, record, positions)
    editor = None
    if why is None:
        try:
            editor = TurnNodeEditor.restore(turn, originals, record.get("nodes") or [], keep_assistants=keep_assistants)
        except ValueError as exc:
            why = f"its working nodes do not fit the turn ({exc})"
        else:
            if problems := editor.final_problems():
                why = "it is not a final working surface: " + "; ".join(problems)
    if why is not None or editor is None:
        results.delete(session_id, turn, f"stale: {why}")
        return None
    log.info("%s: restored the compression a previous process finished (%d -> %d nodes, %s model request(s) "
             "then); no worker runs", where, len(positions), len(editor.nodes), record.get("requests"))
    return Compression(positions, editor, workers=[f"saved{k + 1}" for k in range(int(record.get("workers") or 0))],
                       modes=[str(m) for m in record.get("workerModes") or []])
