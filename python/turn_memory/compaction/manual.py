"""`/compact` (compactNow) and compactRegion: one checkpoint transaction, end to end.

Nothing replaces the surface unless the summary exists, is strictly smaller than what it
shadows, the selected span is unchanged and the whole commit validated; every failure
after compaction/start closes the bracket with an error and leaves the surface as it was.

Older history too small to fold (`transaction.too_small`, checked before any worker runs, or
a checkpoint that came out no smaller) is a result, not an error: `/compact` answers
`{"skipped": reason}` (the shim logs the reason and tells DSH there was nothing to compact).
A turn whose compression is finished but not landed when the range is read (`/compact`
lands nothing: no turn is open) is folded in its compressed form, so its worker is not
wasted (`ReadyRewrites`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from contextlib import nullcontext
from typing import Any, AsyncContextManager, Callable

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions, ErrorInfo
from turn_memory.bridge.server import RemoteError
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.segmented import SegmentedJob, SegmentFailed, image_markers
from turn_memory.compaction.selection import Selection, select_manual_range
from turn_memory.compaction.summarize import SummaryFailed, summarize, summary_request
from turn_memory.config import EngineConfig
from turn_memory.host.images import missing_markers
from turn_memory.host.routes import NoRoute, route
from turn_memory.prompts import PromptError, read_prompt, render_prompt
from turn_memory.runtime.interfaces import ReadyRewrites, ReadyTurn
from turn_memory.runtime.land import LandingError, PartialLanding, Plan, SpanMoved, land
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import WorkerRegistry

log = logging.getLogger("turn_memory.compaction")

#: enters the session's turn-rewrite barrier (D-005): no turn rewrite starts while inside
Rewrites = Callable[[], AsyncContextManager[Any]]


def manual_error(code: str, message: str) -> RemoteError:
    return RemoteError(ErrorInfo(code=f"compaction-{code}", message=message, manual=code))  # type: ignore[arg-type]


class TooSmallToFold(Exception):
    """The checkpoint came out no smaller than the history it would replace (nothing changed)."""


async def _close_abandoned(session: MirroredSession, port: HostPort) -> None:
    """A compaction/start nobody will close: its job died (a previous engine process, or one
    that failed without closing it). Called with the session's job lock held, so no
    compaction of this engine is running: an open start can only be abandoned."""
    state = session.log.index.lifecycle
    start = state.unmatched_compaction
    if not state.compaction_locked or start is None:
        return
    log.warning("session %s: closing compaction %s (%s), abandoned by the job that opened it", session.id,
                start["data"].get("compactionId"), "automatic" if start["data"].get("turn") is not None else "manual")
    data = {**start["data"], "error": "abandoned: the compaction's job ended without closing it"}
    await land(session, port, lambda _log: Plan([{"type": "compaction/end", "data": data}], label="close abandoned"))


async def compact_now(session: MirroredSession, port: HostPort, config: EngineConfig, agent: AgentOptions,
                      source_command_id: str | None, workers: WorkerRegistry,
                      rewrites: Rewrites | None = None, ready: ReadyRewrites | None = None) -> dict[str, Any] | None:
    """The result, None when there is no history to fold, or `{"skipped": why}` when it is too small."""
    if session.job_lock.locked():
        raise manual_error("busy", "turn-memory is already compacting this session")
    async with session.job_lock:
        if session.log.index.open_turn is not None:
            raise manual_error("busy", "manual compaction: the session already has an open turn")
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
        raise RemoteError(ErrorInfo(code="no-open-turn",
                                    message="compactRegion: automatic compaction events must be enclosed in a turn"))
    async with session.job_lock, (rewrites() if rewrites is not None else nullcontext()):
        nodes = session.log.nodes
        try:
            i, j = nodes.index(start), nodes.index(end)
        except ValueError:
            raise RemoteError(ErrorInfo(code="bad-range", message=f"compactRegion: {start}..{end} is not on the surface")) from None
        span = nodes[i:j + 1]
        if not span or not (session.log.balanced_before(span[0]) and session.log.balanced_after(span[-1])):
            raise RemoteError(ErrorInfo(code="bad-range", message=f"compactRegion: {start}..{end} splits a tool call/result pair"))
        try:
            return await run_transaction(session, port, config, agent, Selection(list(span)), None, open_turn,
                                         workers, ready)
        except TooSmallToFold as exc:  # DSH chose the range: it gets the error it expects
            raise manual_error("summary", f"{exc}; the conversation is unchanged") from exc


async def produce_checkpoint(session: MirroredSession, port: HostPort, config: EngineConfig, agent: AgentOptions,
                             selection: Selection, workers: WorkerRegistry,
                             ready: dict[int, ReadyTurn] | None = None) -> tx_.Summary:
    """The checkpoint's content: segmented workers (default) or one summary request; `ready`
    turns are read in their compressed form."""
    if config.compaction.method == "summary":
        instruction = render_prompt("compact-summary", {})
        request = summary_request(session.log, selection, agent, instruction, config.compaction.maxTokens, ready)
        summary = await summarize(port, session.id, request, config.compaction.llmTimeoutS)
        # the summarizer saw the images themselves, not markers: the host adds the ones it left out
        missing = missing_markers(image_markers(session.log, selection.shadowed), [summary.text])
        if missing:
            summary = dataclasses.replace(summary, blocks=[*summary.blocks, {"type": "text",
                                                                             "text": "\n\nImages: " + " ".join(missing)}])
        return summary
    provider, model = route(session.log, agent)
    job = SegmentedJob(session, port, config.compaction, selection, ready or {})
    workers.add(job.job_id, job)
    try:
        text = await job.run()
    finally:
        workers.remove(job.job_id)
    block = {"type": "text", "text": text}
    return tx_.Summary(blocks=[block], raw_output=[block], provider=provider, model=model)


async def run_transaction(session: MirroredSession, port: HostPort, config: EngineConfig, agent: AgentOptions,
                          selection: Selection, source_command_id: str | None, turn: int | None,
                          workers: WorkerRegistry, ready: ReadyRewrites | None = None) -> dict[str, Any]:
    """One transaction over `selection`; raises `TooSmallToFold` (after closing the bracket)
    when the checkpoint came out no smaller than what it would replace."""
    tx = tx_.Transaction.new(source_command_id, turn)
    where = f"session {session.id} compaction {tx.compaction_id}"
    try:
        await _close_abandoned(session, port)
        (start_seq,) = await land(session, port, lambda _log: tx_.start_plan(tx))
    except LandingError as exc:
        raise manual_error("busy", f"could not open the compaction: {exc}") from exc
    compressed = ready.ready_within(session, selection.shadowed) if ready is not None else {}
    log.info("%s: folding %d surface nodes (seqs %d..%d)%s", where, len(selection.shadowed), selection.start,
             selection.end, f"; turn(s) {', '.join(map(str, sorted(compressed)))} in their finished compressed form"
             if compressed else "")
    code, stage_error, not_smaller = "summary", None, ""
    try:
        summary = await produce_checkpoint(session, port, config, agent, selection, workers, compressed)
        shadowed = tx_.shadowed_tokens(session.log, selection)
        message = tx_.checkpoint_message(session.dialect, tx, summary, read_prompt("checkpoint"))
        tx_.check_smaller(message, shadowed)
        code = "commit"
        seqs = await land(session, port, lambda log_: tx_.commit_plan(log_, tx, start_seq, selection, summary, message, shadowed))
    except asyncio.CancelledError:
        code, stage_error = "cancelled", "cancelled"
    except SpanMoved as exc:
        code, stage_error = "changed", f"the selected history changed: {exc}"
    except PartialLanding as exc:
        log.error("%s: PARTIAL COMMIT (%d events appended): %s", where, exc.appended, exc)
        raise manual_error("commit", f"compaction did not commit cleanly: {exc}") from exc
    except tx_.NotSmaller as exc:
        code, stage_error = "summary", str(exc)
        not_smaller = (f"the older history ({tx_.describe(session.log, selection)}) is too small to fold: its "
                       f"checkpoint came out at ~{exc.framed} tokens")
    except (SummaryFailed, NoRoute, SegmentFailed, PromptError) as exc:
        code, stage_error = "summary", str(exc)
    except LandingError as exc:
        code, stage_error = ("summary" if code == "summary" else "commit"), str(exc)
    except Exception as exc:  # anything else still closes the bracket: an open start would lock compaction for good
        log.exception("%s: failed unexpectedly", where)
        code, stage_error = ("summary" if code == "summary" else "commit"), f"internal error: {exc!r}"
    if stage_error is not None:
        log.warning("%s failed (%s): %s; the surface is unchanged", where, code, stage_error)
        try:
            await land(session, port, lambda _log: tx_.failure_plan(tx, f"{code}: {stage_error}"))
            await port.flush(session.id)
        except Exception as exc:  # the open start stays visible as the busy signal
            raise manual_error("commit", f"{stage_error}; closing the compaction also failed: {exc}") from exc
        if code == "cancelled":
            raise manual_error("cancelled", "manual compaction was cancelled; the conversation is unchanged")
        if not_smaller:
            raise TooSmallToFold(not_smaller)
        raise manual_error(code, f"{stage_error}; the conversation is unchanged")
    try:
        await port.flush(session.id)
    except Exception as exc:
        raise manual_error("persistence", f"compaction committed but the session could not be saved: {exc}") from exc
    out = tx_.result(tx, seqs, start_seq, selection, summary, shadowed)
    log.info("%s: committed; %d nodes (~%d tokens) -> checkpoint at seq %d", where, len(selection.shadowed),
             shadowed, seqs[1])
    if compressed and ready is not None:
        ready.folded(session, compressed, seqs[1])
    return out
