"""Fold a selection into one checkpoint: the standard compaction transaction, end to end.

Shared by `/compact`, compactRegion (`compaction.manual`) and automatic compaction
(`compaction.service`). compaction/start lands before any model work; then the checkpoint's
content is produced (segmented workers, or one summary request); nothing replaces the surface
unless the summary exists, is strictly smaller than what it shadows, the selected span is
unchanged and the whole commit validated. Every failure after compaction/start closes the
bracket with the error and leaves the surface as it was. A turn whose compression is finished
but not landed when the range is read is folded in its compressed form, so its worker is not
wasted (`ReadyRewrites`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.failures import CompactionFailed, Failure
from turn_memory.compaction.segmented import SegmentedJob, SegmentFailed, image_markers
from turn_memory.compaction.selection import Selection
from turn_memory.compaction.summarize import SummaryFailed, summarize, summary_request
from turn_memory.config import EngineConfig
from turn_memory.host.images import missing_markers
from turn_memory.host.routes import NoRoute, route
from turn_memory.prompts import PromptError, read_prompt, render_prompt
from turn_memory.runtime.interfaces import ReadyRewrites, ReadyTurn
from turn_memory.runtime.land import LandingError, PartialLanding, Plan, PlanKind, SpanMoved, land
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import WorkerRegistry

log = logging.getLogger("turn_memory.compaction")


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
    await land(session, port, lambda _log: Plan([{"type": "compaction/end", "data": data}], label="close abandoned",
                                                kind=PlanKind.COMPACTION))


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
    """One transaction over `selection`; raises `CompactionFailed`, or `TooSmallToFold` (after
    closing the bracket) when the checkpoint came out no smaller than what it would replace."""
    tx = tx_.Transaction.new(source_command_id, turn)
    where = f"session {session.id} compaction {tx.compaction_id}"
    try:
        await _close_abandoned(session, port)
        (start_seq,) = await land(session, port, lambda _log: tx_.start_plan(tx))
    except LandingError as exc:
        raise CompactionFailed(Failure.BUSY, f"could not open the compaction: {exc}") from exc
    compressed = ready.ready_within(session, selection.shadowed) if ready is not None else {}
    log.info("%s: folding %d surface nodes (seqs %d..%d)%s", where, len(selection.shadowed), selection.start,
             selection.end, f"; turn(s) {', '.join(map(str, sorted(compressed)))} in their finished compressed form"
             if compressed else "")
    failure, stage_error, not_smaller = Failure.SUMMARY, None, ""
    try:
        summary = await produce_checkpoint(session, port, config, agent, selection, workers, compressed)
        shadowed = tx_.shadowed_tokens(session.log, selection)
        message = tx_.checkpoint_message(session.dialect, tx, summary, read_prompt("checkpoint"))
        tx_.check_smaller(message, shadowed)
        failure = Failure.COMMIT
        seqs = await land(session, port, lambda log_: tx_.commit_plan(log_, tx, start_seq, selection, summary, message, shadowed))
    except asyncio.CancelledError:
        failure, stage_error = Failure.CANCELLED, "cancelled"
    except SpanMoved as exc:
        failure, stage_error = Failure.CHANGED, f"the selected history changed: {exc}"
    except PartialLanding as exc:
        log.error("%s: PARTIAL COMMIT (%d events appended): %s", where, exc.appended, exc)
        raise CompactionFailed(Failure.COMMIT, f"compaction did not commit cleanly: {exc}") from exc
    except tx_.NotSmaller as exc:
        failure, stage_error = Failure.SUMMARY, str(exc)
        not_smaller = (f"the older history ({tx_.describe(session.log, selection)}) is too small to fold: its "
                       f"checkpoint came out at ~{exc.framed} tokens")
    except (SummaryFailed, NoRoute, SegmentFailed, PromptError) as exc:
        failure, stage_error = Failure.SUMMARY, str(exc)
    except LandingError as exc:
        stage_error = str(exc)
    except Exception as exc:  # anything else still closes the bracket: an open start would lock compaction for good
        log.exception("%s: failed unexpectedly", where)
        stage_error = f"internal error: {exc!r}"
    if stage_error is not None:
        log.warning("%s failed (%s): %s; the surface is unchanged", where, failure.value, stage_error)
        try:
            await land(session, port, lambda _log: tx_.failure_plan(tx, f"{failure.value}: {stage_error}"))
            await port.flush(session.id)
        except Exception as exc:  # the open start stays visible as the busy signal
            raise CompactionFailed(Failure.COMMIT, f"{stage_error}; closing the compaction also failed: {exc}") from exc
        if failure is Failure.CANCELLED:
            raise CompactionFailed(Failure.CANCELLED, "manual compaction was cancelled; the conversation is unchanged")
        if not_smaller:
            raise TooSmallToFold(not_smaller)
        raise CompactionFailed(failure, f"{stage_error}; the conversation is unchanged")
    try:
        await port.flush(session.id)
    except Exception as exc:
        raise CompactionFailed(Failure.PERSISTENCE,
                               f"compaction committed but the session could not be saved: {exc}") from exc
    out = tx_.result(tx, seqs, start_seq, selection, summary, shadowed)
    log.info("%s: committed; %d nodes (~%d tokens) -> checkpoint at seq %d", where, len(selection.shadowed),
             shadowed, seqs[1])
    if compressed and ready is not None:
        ready.folded(session, compressed, seqs[1])
    return out
