"""`/compact` (compactNow) and compactRegion: DSH asks, one checkpoint transaction answers.

Both run `compaction.fold`'s transaction under the session's job lock, inside the turn
service's rewrite barrier. Older history too small to fold (`transaction.too_small`, checked
before any worker runs, or a checkpoint that came out no smaller) is a result, not an error:
`/compact` answers `{"skipped": reason}` (the shim logs the reason and tells DSH there was
nothing to compact). A turn whose compression is finished but not landed when the range is
read (`/compact` lands nothing: no turn is open) is folded in its compressed form. Failures
raise `CompactionFailed` (`compaction.failures`: its code and the wire error).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.failures import CompactionFailed, Failure
from turn_memory.compaction.fold import TooSmallToFold, run_transaction
from turn_memory.compaction.selection import Selection, select_manual_range
from turn_memory.config import EngineConfig
from turn_memory.prompts import read_prompt
from turn_memory.runtime.interfaces import ReadyRewrites, Rewrites
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import WorkerRegistry

log = logging.getLogger("turn_memory.compaction")


async def compact_now(session: MirroredSession, port: HostPort, config: EngineConfig, agent: AgentOptions,
                      source_command_id: str | None, workers: WorkerRegistry,
                      rewrites: Rewrites | None = None, ready: ReadyRewrites | None = None) -> dict[str, Any] | None:
    """The result, None when there is no history to fold, or `{"skipped": why}` when it is too small."""
    if session.job_lock.locked():
        raise CompactionFailed(Failure.BUSY, "turn-memory is already compacting this session")
    async with session.job_lock:
        if session.log.index.open_turn is not None:
            raise CompactionFailed(Failure.BUSY, "manual compaction: the session already has an open turn")
        # the range is read inside the barrier: the turn rewrite in flight is done (bounded)
        async with rewrites() if rewrites is not None else nullcontext():
            selection = select_manual_range(session.log, config.compaction.retainTurns)
            if selection is None:
                log.info("session %s: /compact found no compactable history", session.id)
                return None
            small = tx_.too_small(session.log, selection, read_prompt("checkpoint"))
            if small is None:
                try:
                    return await run_transaction(session, port, config, agent, selection, source_command_id, None,
                                                 workers, ready)
                except TooSmallToFold as exc:
                    small = str(exc)
            log.info("session %s: /compact: %s; nothing changed", session.id, small)
            return {"skipped": small}


async def compact_region(session: MirroredSession, port: HostPort, config: EngineConfig, agent: AgentOptions,
                         start: int, end: int, workers: WorkerRegistry,
                         rewrites: Rewrites | None = None, ready: ReadyRewrites | None = None) -> dict[str, Any]:
    open_turn = session.log.index.open_turn
    if open_turn is None:
        raise CompactionFailed(Failure.NO_OPEN_TURN, "compactRegion: automatic compaction events must be enclosed in a turn")
    async with session.job_lock, (rewrites() if rewrites is not None else nullcontext()):
        nodes = session.log.nodes
        try:
            i, j = nodes.index(start), nodes.index(end)
        except ValueError:
            raise CompactionFailed(Failure.BAD_RANGE, f"compactRegion: {start}..{end} is not on the surface") from None
        span = nodes[i:j + 1]
        if not span or not (session.log.balanced_before(span[0]) and session.log.balanced_after(span[-1])):
            raise CompactionFailed(Failure.BAD_RANGE, f"compactRegion: {start}..{end} splits a tool call/result pair")
        try:
            return await run_transaction(session, port, config, agent, Selection(list(span)), None, open_turn,
                                         workers, ready)
        except TooSmallToFold as exc:  # DSH chose the range: it gets the error it expects
            raise CompactionFailed(Failure.SUMMARY, f"{exc}; the conversation is unchanged") from exc
