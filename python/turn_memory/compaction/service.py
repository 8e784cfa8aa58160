"""Automatic session compaction: pressure in the pre-step, one-shot overflow recovery
(docs/decisions.md#a-context-overflow-is-compacted-and-replayed-once).

Pressure runs before a step of a user session's open turn, after the ready turn landings,
on the surface as it is: it never waits for turn compressions. A cheap estimate (the last
provider usage plus what was appended since) gates the full measure, which comes from DSH's
own token meter; if the meter refuses an assistant node a turn-memory landing wrote (its
"no matching step/start" for a post-turn replacement), the engine prices the canonical
surface with the same heuristic instead
(docs/decisions.md#pricing-falls-back-only-where-the-meter-cannot-price-our-own-landing). Any other meter failure is not papered over: that
step makes no pressure decision. Only when a compaction will actually run does it enter the
turn-rewrite barrier (bounded wait for the rewrite in flight, ready landings first,
no new one starting), measuring again if that changed the surface. Passes repeat while
still over the threshold, bounded; a result that does not shrink is never committed.

Background (`compaction.background`): after pressure, once per turn, a fold that pays for
itself (`compaction.fold_value`) starts in the background; once it is done, it commits at the
pre-step where no turn rewrite is in flight any more (one cache break for a landing and the
checkpoint), or at the latest in the next turn (`BackgroundFolds.commits_now`). A step waits for it only when the threshold is reached first
(docs/decisions.md#a-checkpoint-is-folded-in-the-background-when-it-pays).

Overflow: the first CONTEXT_WINDOW_EXCEEDED of a turn runs one compaction (inside the same
barrier) and asks DSH to replay the request once, only if the surface actually changed; a
second overflow in the same turn keeps the provider error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from typing import Awaitable, Callable

from turn_memory.bridge.protocol import CompactionResult, MeasureResult
from turn_memory.bridge.server import RemoteError
from turn_memory.compaction.policy import (
    RETRY_GROWTH,
    CHEAP_MARGIN,
    LastMeasure,
    Measure,
    Pressure,
    cheap_estimate,
    context_window,
    refused_landing_seq,
    select_pressure_range,
    surface_measure,
    surface_prices,
)
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.background import BackgroundFolds
from turn_memory.compaction.fold_value import FoldFacts, background_span, carrying, judge, segments_of, shared_tail
from turn_memory.compaction.scope import CompactionScope
from turn_memory.compaction.selection import Selection
from turn_memory.host.prices import expected_requests
from turn_memory.host.tokens import estimate_text
from turn_memory.prompts import read_prompt
from turn_memory.runtime.land import SpanMoved, check_spans
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import WorkerRegistry

log = logging.getLogger("turn_memory.compaction")

#: DSH's token meter over a session (the port's `measure`)
Measurer = Callable[[str], Awaitable[MeasureResult]]


class CompactionService:
    def __init__(self, workers: WorkerRegistry) -> None:
        #: the registry the engine's compaction scopes carry (read by tests and the bench)
        self.workers = workers
        #: (session, turn) pairs whose one overflow recovery was used
        self._overflowed: set[tuple[str, int]] = set()
        self._last: dict[str, LastMeasure] = {}
        #: session -> measured tokens when pressure last could not be relieved
        self._floor: dict[str, int] = {}
        #: session -> (log length scanned, window): request/context is rare, so never rescan
        self._windows: dict[str, tuple[int, int | None]] = {}
        #: every session's checkpoint folded in the background
        self.folds = BackgroundFolds()
        #: session -> the turn whose pre-step last asked whether a background fold pays
        self._considered: dict[str, int] = {}
        #: session -> the share of its span the session's latest checkpoint kept
        self._fold_ratio: dict[str, float] = {}

    def close(self) -> list["asyncio.Task[tx_.Summary]"]:
        return self.folds.close()

    def window(self, session: MirroredSession) -> int | None:
        scanned, known = self._windows.get(session.id, (0, None))
        if scanned > len(session.log):  # the mirror was reset to a shorter log
            scanned, known = 0, None
        window = context_window(session.log, scanned, known)
        self._windows[session.id] = (len(session.log), window)
        return window

    async def measure(self, session: MirroredSession, measurer: Measurer) -> Measure | None:
        """DSH's token meter over the session; the canonical surface priced here only when the
        meter refuses an assistant node a turn-memory landing wrote; None (logged)
        on any other meter failure: no pressure decision this step."""
        length, generation = len(session.log), session.log.replace_generation
        try:
            result = await measurer(session.id)
        except Exception as exc:
            result = MeasureResult(error=str(exc))
        if result.error is None and result.totalTokens is not None:
            measured = Measure(result.totalTokens, {n.seq: n.tokens for n in result.nodes}, "meter")
        elif (seq := refused_landing_seq(session.log, result.error)) is not None:
            log.warning("session %s: the token meter refuses turn-memory's landed assistant node at seq %d (%s); "
                        "pricing the canonical surface", session.id, seq, result.error)
            measured = surface_measure(session.log)
        else:
            log.warning("session %s: token meter failed (%s); no pressure measure this step", session.id,
                        result.error or "no measurement")
            return None
        self._last[session.id] = LastMeasure(length, measured.tokens, generation)
        return measured

    async def _over(self, session: MirroredSession, measurer: Measurer, window: int, ratio: float) -> Measure | None:
        """The session's measure when it is at or over the threshold; None when the meter failed
        (logged), or when it is under: pressure is relieved, so the retry floor goes too."""
        measured = await self.measure(session, measurer)
        if measured is None:
            return None
        if not Pressure(measured.tokens, window, ratio).over:
            self._floor.pop(session.id, None)
            return None
        return measured

    async def _over_in_barrier(self, scope: CompactionScope, measurer: Measurer, window: int, turn: int,
                               measured: Measure, barrier: AsyncExitStack) -> Measure | None:
        """A compaction is due: now (and only now) wait for the rewrite in flight and land what
        is ready before reading the range; the barrier stays held until the caller is done, so
        no queued turn starts rewriting under it. The measure again if landings shrank the
        surface (None: no longer over)."""
        generation = scope.session.log.replace_generation
        await barrier.enter_async_context(scope.barrier(turn))
        if scope.session.log.replace_generation == generation:
            return measured
        return await self._over(scope.session, measurer, window, scope.config.compaction.thresholdRatio)

    async def pre_step(self, scope: CompactionScope, turn: int, measurer: Measurer) -> None:
        session, cfg = scope.session, scope.config.compaction
        if not cfg.auto or not session.is_user_session or session.job_lock.locked():
            return
        window = self.window(session)
        if not window:
            return  # no routed request yet: nothing to measure against
        # asked only of a finished fold: the turn service's scan stays off every other pre-step
        if self.folds.commits_now(session.id, turn, lambda: bool(scope.busy_turns())):
            await self._land_background(scope, turn)
        async with AsyncExitStack() as barrier:
            await self._pressure(scope, turn, measurer, window, barrier)
        if cfg.background and not session.job_lock.locked():
            self._consider_background(scope, turn, window)

    async def _land_background(self, scope: CompactionScope, turn: int) -> bool:
        """Commit the session's finished background fold, if its span is still as it read it;
        True when it committed. Nothing is appended otherwise."""
        session = scope.session
        taken = self.folds.take(session.id)
        if taken is None:
            return False
        fold, summary = taken
        try:
            check_spans(session.log, [fold.selection.shadowed])
        except SpanMoved as exc:
            log.info("session %s turn %d: the background fold from turn %d is dropped: its history changed since (%s); "
                     "nothing was appended", session.id, turn, fold.turn, exc)
            return False
        result = await self._compact(scope, fold.selection, turn, summary)
        if result is None:
            return False
        checkpoint = estimate_text(summary.text)
        self._fold_ratio[session.id] = checkpoint / max(1, result.shadowedTokenCount)
        log.info("session %s turn %d: background fold from turn %d committed after %.1fs (~%d tokens -> ~%d)",
                 session.id, turn, fold.turn, time.monotonic() - fold.started, result.shadowedTokenCount, checkpoint)
        return True

    def _consider_background(self, scope: CompactionScope, turn: int, window: int) -> None:
        """Once per turn: start a background fold when folding the older history now pays."""
        session, cfg = scope.session, scope.config.compaction
        if self.folds.get(session.id) is not None or self._considered.get(session.id) == turn:
            return
        self._considered[session.id] = turn
        log_ = session.log
        prices = surface_prices(log_)
        busy = scope.busy_turns()
        selection = background_span(log_, prices, int(window * cfg.backgroundRetainRatio), busy)
        if selection is None:
            return
        span = sum(prices.get(s, 0) for s in selection.shadowed)
        requests = expected_requests(log_.index.completed_steps(), log_.index.tool_results > 0,
                                     scope.config.turns.horizonRequests, len(log_.index.turn_ends),
                                     scope.config.turns.horizonTurns)
        held, carried = carrying(log_, prices, selection.shadowed)
        facts = FoldFacts(span=span, tail=sum(prices.values()) - span, requests=requests,
                          segments=segments_of(span, cfg.segmentTokens),
                          framing=tx_.framing_tokens(log_.dialect, read_prompt("checkpoint")),
                          fold_ratio=self._fold_ratio.get(session.id), held=held, carried=carried,
                          shared=shared_tail(log_, prices, selection.shadowed, busy))
        verdict = judge(facts)
        numbers = (f"{tx_.describe(log_, selection)}: saves ~{verdict.saving:,.0f} over the {facts.requests} requests "
                   f"the session is expected to make yet, costs ~{verdict.cost:,.0f}; its turns have been carried for "
                   f"~{held:,.0f}, a fold's fixed part is ~{verdict.fixed:,.0f} (cached-token units)")
        if not verdict.starts:
            log.debug("session %s turn %d: no background fold: %s", session.id, turn, numbers)
            return
        log.info("session %s turn %d: folding in the background: %s", session.id, turn, numbers)
        self.folds.start(scope, selection, turn)

    async def _pressure(self, scope: CompactionScope, turn: int, measurer: Measurer, window: int,
                        barrier: AsyncExitStack) -> None:
        session, cfg = scope.session, scope.config.compaction
        threshold = int(window * cfg.thresholdRatio)
        floor = self._floor.get(session.id)
        held = False
        for attempt in range(cfg.maxPasses):
            cheap = cheap_estimate(session.log, self._last.get(session.id))
            if cheap is not None and cheap < CHEAP_MARGIN * threshold:
                return
            measured = await self._over(session, measurer, window, cfg.thresholdRatio)
            if measured is None:
                return
            if floor is not None and measured.tokens < floor + RETRY_GROWTH * window:
                return  # relieving failed at about this size already; wait for real growth
            if self.folds.get(session.id) is not None and await self._await_background(scope, turn, measured):
                continue
            if not held:
                held = True
                measured = await self._over_in_barrier(scope, measurer, window, turn, measured, barrier)
                if measured is None:
                    return
            selection = select_pressure_range(session.log, measured.nodes, int(window * cfg.retainRatio))
            if selection is None:
                log.warning("session %s turn %d: at %d/%d tokens but nothing compactable outside the retained tail",
                            session.id, turn, measured.tokens, window)
                self._floor[session.id] = measured.tokens
                return
            log.info("session %s turn %d: pressure %d/%d tokens (%s) >= %.0f%%; compacting %d nodes (pass %d)",
                     session.id, turn, measured.tokens, window, measured.source, cfg.thresholdRatio * 100,
                     len(selection.shadowed), attempt + 1)
            if await self._compact(scope, selection, turn) is None:
                self._floor[session.id] = measured.tokens
                return
        measured = await self._over(session, measurer, window, cfg.thresholdRatio)
        if measured is not None:
            log.warning("session %s turn %d: still at %d/%d tokens after %d passes (the retained tail and request "
                        "envelope alone are too large); retrying after further growth", session.id, turn,
                        measured.tokens, window, cfg.maxPasses)
            self._floor[session.id] = measured.tokens

    async def _await_background(self, scope: CompactionScope, turn: int, measured: Measure) -> bool:
        """The threshold came before the background fold was ready: the step waits for it
        (bounded by `compaction.workerTimeoutS`), then commits it; True when it committed. A
        fold still running then is cancelled: the pressure compaction takes over."""
        session, cfg = scope.session, scope.config.compaction
        started = time.monotonic()
        done = await self.folds.wait(session.id, cfg.workerTimeoutS)
        log.info("session %s turn %d: at %d tokens before the background fold was ready; the step waited %d ms",
                 session.id, turn, measured.tokens, (time.monotonic() - started) * 1000)
        if not done:
            self.folds.drop(session.id, "the compaction threshold was reached first")
            return False
        return await self._land_background(scope, turn)

    async def overflow(self, scope: CompactionScope, turn: int) -> bool:
        """Recover from a provider overflow once per turn; True when the request should be replayed."""
        session = scope.session
        key = (session.id, turn)
        if key in self._overflowed:
            log.warning("session %s turn %d: second context overflow; keeping the provider error", session.id, turn)
            return False
        self._overflowed.add(key)
        if not session.is_user_session or session.job_lock.locked():
            return False
        generation = session.log.replace_generation
        async with scope.barrier(turn):
            selection = select_pressure_range(session.log, surface_prices(session.log), 0)
            if selection is None:
                log.warning("session %s turn %d: context overflow but nothing to compact", session.id, turn)
                return session.log.replace_generation > generation  # ready landings alone may fit it
            log.info("session %s turn %d: context overflow; compacting %d nodes, then replaying once", session.id,
                     turn, len(selection.shadowed))
            await self._compact(scope, selection, turn)
        return session.log.replace_generation > generation

    async def _compact(self, scope: CompactionScope, selection: Selection, turn: int,
                       made: tx_.Summary | None = None) -> CompactionResult | None:
        """One automatic transaction owned by the open `turn` (`made`: a background fold's
        checkpoint); its result, or None."""
        session = scope.session
        if session.log.index.open_turn != turn:
            return None
        # imported on first use: the engine's start-up imports compete with DSH's boot
        from turn_memory.compaction.failures import CompactionFailed
        from turn_memory.compaction.fold import TooSmallToFold, run_transaction
        from turn_memory.compaction.transaction import too_small

        small = too_small(session.log, selection, read_prompt("checkpoint"))
        if small is not None:
            log.info("session %s turn %d: no automatic compaction: %s", session.id, turn, small)
            return None
        try:
            async with session.job_lock:
                return await run_transaction(scope, selection, turn=turn, made=made)
        except TooSmallToFold as exc:
            log.info("session %s turn %d: no automatic compaction: %s", session.id, turn, exc)
            return None
        except CompactionFailed as exc:  # closed cleanly with the error; the turn goes on
            log.warning("session %s turn %d: automatic compaction failed: %s", session.id, turn, exc.message)
            return None
        except RemoteError as exc:  # the shim refused a host call (opening the compaction)
            log.warning("session %s turn %d: automatic compaction failed: %s", session.id, turn, exc.info.message)
            return None

    async def if_needed(self, scope: CompactionScope, trigger: str, measurer: Measurer) -> CompactionResult | None:
        """DSH's compactIfNeeded seam: one pass of the same policy, returning its result."""
        session = scope.session
        turn = session.log.index.open_turn
        if turn is None or not session.is_user_session or session.job_lock.locked():
            return None
        if trigger == "context-overflow":
            async with scope.barrier(turn):
                selection = select_pressure_range(session.log, surface_prices(session.log), 0)
                return None if selection is None else await self._compact(scope, selection, turn)
        window = self.window(session)
        measured = await self._over(session, measurer, window, scope.config.compaction.thresholdRatio) \
            if window else None
        if not window or measured is None:
            return None
        async with AsyncExitStack() as barrier:
            measured = await self._over_in_barrier(scope, measurer, window, turn, measured, barrier)
            if measured is None:
                return None
            selection = select_pressure_range(session.log, measured.nodes,
                                              int(window * scope.config.compaction.retainRatio))
            return None if selection is None else await self._compact(scope, selection, turn)
