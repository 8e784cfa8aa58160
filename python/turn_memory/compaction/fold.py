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
from typing import NoReturn

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import CompactionResult
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.failures import CompactionFailed, Failure
from turn_memory.compaction.scope import CompactionScope
from turn_memory.compaction.segmented import SegmentedJob, SegmentFailed, image_markers
from turn_memory.compaction.selection import Selection
from turn_memory.compaction.summarize import SummaryFailed, summarize, summary_request
from turn_memory.host.images import missing_markers
from turn_memory.host.routes import NoRoute, route
from turn_memory.prompts import PromptError, read_prompt, render_prompt
from turn_memory.runtime.interfaces import ReadyTurn
from turn_memory.runtime.land import LandingError, PartialLanding, Plan, PlanKind, SpanMoved, land
from turn_memory.runtime.mirror import MirroredSession

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


async def produce_checkpoint(scope: CompactionScope, selection: Selection,
                             ready: dict[int, ReadyTurn] | None = None) -> tx_.Summary:
    """The checkpoint's content: segmented workers (default) or one summary request; `ready`
    turns are read in their compressed form."""
    session, config = scope.session, scope.config
    if config.compaction.method == "summary":
        instruction = render_prompt("compact-summary", {})
        request = summary_request(session.log, selection, scope.agent, instruction, config.compaction.maxTokens, ready)
        summary = await summarize(scope.port, session.id, request, config.compaction.llmTimeoutS)
        # the summarizer saw the images themselves, not markers: the host adds the ones it left out
        missing = missing_markers(image_markers(session.log, selection.shadowed), [summary.text])
        if missing:
            summary = dataclasses.replace(summary, blocks=[*summary.blocks, {"type": "text",
                                                                             "text": "\n\nImages: " + " ".join(missing)}])
        return summary
    provider, model = route(session.log, scope.agent)
    job = SegmentedJob(session, scope.port, config.compaction, selection, ready or {})
    scope.workers.add(job.job_id, job)
    try:
        text = await job.run()
    finally:
        scope.workers.remove(job.job_id)
    block = {"type": "text", "text": text}
    return tx_.Summary(blocks=[block], raw_output=[block], provider=provider, model=model)


class _Stage(Exception):
    """A stage after compaction/start failed: the bracket closes with `failure`, the surface unchanged."""

    def __init__(self, failure: Failure, error: str, not_smaller: str = "") -> None:
        super().__init__(error)
        self.failure, self.error, self.not_smaller = failure, error, not_smaller


async def run_transaction(scope: CompactionScope, selection: Selection, *, source_command_id: str | None = None,
                          turn: int | None = None, made: tx_.Summary | None = None) -> CompactionResult:
    """One transaction over `selection` (`turn`: the open turn that owns an automatic one;
    `made`: the checkpoint a background fold produced already, committed without model work);
    raises `CompactionFailed`, or `TooSmallToFold` (after closing the bracket) when the
    checkpoint came out no smaller than what it would replace."""
    session, port = scope.session, scope.port
    tx = tx_.Transaction.new(source_command_id, turn)
    where = f"session {session.id} compaction {tx.compaction_id}"
    try:
        await _close_abandoned(session, port)
        (start_seq,) = await land(session, port, lambda _log: tx_.start_plan(tx))
    except LandingError as exc:
        raise CompactionFailed(Failure.BUSY, f"could not open the compaction: {exc}") from exc
    compressed = scope.ready_within(selection.shadowed)
    log.info("%s: folding %d surface nodes (seqs %d..%d)%s", where, len(selection.shadowed), selection.start,
             selection.end, f"; turn(s) {', '.join(map(str, sorted(compressed)))} in their finished compressed form"
             if compressed else "")
    try:
        summary, shadowed, seqs = await _commit(scope, selection, tx, start_seq, compressed, where, made)
    except _Stage as stage:
        await _close_failed(scope, tx, stage, where)
    try:
        await port.flush(session.id)
    except Exception as exc:
        raise CompactionFailed(Failure.PERSISTENCE,
                               f"compaction committed but the session could not be saved: {exc}") from exc
    out = tx_.result(tx, seqs, start_seq, selection, summary, shadowed)
    log.info("%s: committed; %d nodes (~%d tokens) -> checkpoint at seq %d", where, len(selection.shadowed),
             shadowed, seqs[1])
    if compressed:
        scope.folded(compressed, seqs[1])
    return out


async def _commit(scope: CompactionScope, selection: Selection, tx: tx_.Transaction, start_seq: int,
                  compressed: dict[int, ReadyTurn], where: str,
                  made: tx_.Summary | None = None) -> tuple[tx_.Summary, int, list[int]]:
    """Produce the checkpoint and commit it: (summary, shadowed tokens, the commit's seqs);
    any failure but a partial commit is a `_Stage`."""
    session = scope.session
    failure = Failure.SUMMARY
    try:
        summary = made if made is not None else await produce_checkpoint(scope, selection, compressed)
        shadowed = tx_.shadowed_tokens(session.log, selection)
        message = tx_.checkpoint_message(session.dialect, tx, summary, read_prompt("checkpoint"))
        tx_.check_smaller(message, shadowed)
        failure = Failure.COMMIT
        seqs = await land(session, scope.port,
                          lambda log_: tx_.commit_plan(log_, tx, start_seq, selection, summary, message, shadowed))
        return summary, shadowed, seqs
    except asyncio.CancelledError:
        raise _Stage(Failure.CANCELLED, "cancelled") from None
    except SpanMoved as exc:
        raise _Stage(Failure.CHANGED, f"the selected history changed: {exc}") from exc
    except PartialLanding as exc:
        log.error("%s: PARTIAL COMMIT (%d events appended): %s", where, exc.appended, exc)
        raise CompactionFailed(Failure.COMMIT, f"compaction did not commit cleanly: {exc}") from exc
    except tx_.NotSmaller as exc:
        raise _Stage(Failure.SUMMARY, str(exc), f"the older history ({tx_.describe(session.log, selection)}) is too "
                                                f"small to fold: its checkpoint came out at ~{exc.framed} tokens") from exc
    except (SummaryFailed, NoRoute, SegmentFailed, PromptError) as exc:
        raise _Stage(Failure.SUMMARY, str(exc)) from exc
    except LandingError as exc:
        raise _Stage(failure, str(exc)) from exc
    except Exception as exc:  # anything else still closes the bracket: an open start would lock compaction for good
        log.exception("%s: failed unexpectedly", where)
        raise _Stage(failure, f"internal error: {exc!r}") from exc


async def _close_failed(scope: CompactionScope, tx: tx_.Transaction, stage: _Stage, where: str) -> NoReturn:
    """Close the bracket with the stage's error, then raise what the caller reports."""
    log.warning("%s failed (%s): %s; the surface is unchanged", where, stage.failure.value, stage.error)
    try:
        await land(scope.session, scope.port, lambda _log: tx_.failure_plan(tx, f"{stage.failure.value}: {stage.error}"))
        await scope.port.flush(scope.session.id)
    except Exception as exc:  # the open start stays visible as the busy signal
        raise CompactionFailed(Failure.COMMIT, f"{stage.error}; closing the compaction also failed: {exc}") from exc
    if stage.failure is Failure.CANCELLED:
        raise CompactionFailed(Failure.CANCELLED, "manual compaction was cancelled; the conversation is unchanged")
    if stage.not_smaller:
        raise TooSmallToFold(stage.not_smaller)
    raise CompactionFailed(stage.failure, f"{stage.error}; the conversation is unchanged")
