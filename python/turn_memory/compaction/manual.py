"""`/compact` (compactNow) and compactRegion: DSH asks, one checkpoint transaction answers.

Both run `compaction.fold`'s transaction under the session's job lock, inside the turn
service's rewrite barrier. Older history too small to fold (`transaction.too_small`, checked
before any worker runs, or a checkpoint that came out no smaller) is a result, not an error:
`/compact` answers `CompactSkipped` (`{"skipped": reason}`: the shim logs the reason and tells DSH there was
nothing to compact). A turn whose compression is finished but not landed when the range is
read (`/compact` lands nothing: no turn is open) is folded in its compressed form. Failures
raise `CompactionFailed` (`compaction.failures`: its code and the wire error).
"""

from __future__ import annotations

import logging

from turn_memory.bridge.protocol import CompactionResult, CompactSkipped
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.failures import CompactionFailed, Failure
from turn_memory.compaction.fold import TooSmallToFold, run_transaction
from turn_memory.compaction.scope import CompactionScope
from turn_memory.compaction.selection import Selection, select_manual_range
from turn_memory.prompts import read_prompt

log = logging.getLogger("turn_memory.compaction")


async def compact_now(scope: CompactionScope, source_command_id: str | None) -> CompactionResult | CompactSkipped | None:
    """The result, None when there is no history to fold, or `CompactSkipped` when it is too small."""
    session = scope.session
    if session.job_lock.locked():
        raise CompactionFailed(Failure.BUSY, "turn-memory is already compacting this session")
    async with session.job_lock:
        if session.log.index.open_turn is not None:
            raise CompactionFailed(Failure.BUSY, "manual compaction: the session already has an open turn")
        # the range is read inside the barrier: the turn rewrite in flight is done (bounded);
        # no turn is open, so nothing lands
        async with scope.barrier(None):
            selection = select_manual_range(session.log, scope.config.compaction.retainTurns)
            if selection is None:
                log.info("session %s: /compact found no compactable history", session.id)
                return None
            small = tx_.too_small(session.log, selection, read_prompt("checkpoint"))
            if small is None:
                try:
                    return await run_transaction(scope, selection, source_command_id=source_command_id)
                except TooSmallToFold as exc:
                    small = str(exc)
            log.info("session %s: /compact: %s; nothing changed", session.id, small)
            return CompactSkipped(skipped=small)


async def compact_region(scope: CompactionScope, start: int, end: int) -> CompactionResult:
    session = scope.session
    open_turn = session.log.index.open_turn
    if open_turn is None:
        raise CompactionFailed(Failure.NO_OPEN_TURN, "compactRegion: automatic compaction events must be enclosed in a turn")
    # DSH chose the range: land nothing that would move it, only wait for the rewrite
    async with session.job_lock, scope.barrier(None):
        nodes = session.log.nodes
        try:
            i, j = nodes.index(start), nodes.index(end)
        except ValueError:
            raise CompactionFailed(Failure.BAD_RANGE, f"compactRegion: {start}..{end} is not on the surface") from None
        span = nodes[i:j + 1]
        if not span or not (session.log.balanced_before(span[0]) and session.log.balanced_after(span[-1])):
            raise CompactionFailed(Failure.BAD_RANGE, f"compactRegion: {start}..{end} splits a tool call/result pair")
        try:
            return await run_transaction(scope, Selection(list(span)), turn=open_turn)
        except TooSmallToFold as exc:  # DSH chose the range: it gets the error it expects
            raise CompactionFailed(Failure.SUMMARY, f"{exc}; the conversation is unchanged") from exc
