"""Automatic session compaction: pressure in the pre-step, one-shot overflow recovery (D-005, D-011).

Pressure runs before a step of a user session's open turn, after the ready turn landings,
on the surface as it is: it never waits for turn compressions. A cheap estimate (the last
provider usage plus what was appended since) gates the full measure, which comes from DSH's
own token meter; if the meter refuses an assistant node a turn-memory landing wrote (its
"no matching step/start" for a post-turn replacement, D-005), the engine prices the canonical
surface with the same heuristic instead. Any other meter failure is not papered over: that
step makes no pressure decision. Only when a compaction will actually run does it enter the
turn-rewrite barrier (D-005: bounded wait for the rewrite in flight, ready landings first,
no new one starting), measuring again if that changed the surface. Passes repeat while
still over the threshold, bounded; a result that does not shrink is never committed.

Overflow: the first CONTEXT_WINDOW_EXCEEDED of a turn runs one compaction (inside the same
barrier) and asks DSH to replay the request once, only if the surface actually changed; a
second overflow in the same turn keeps the provider error.
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import AsyncExitStack, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncContextManager, Awaitable, Callable

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions
from turn_memory.bridge.server import RemoteError
from turn_memory.compaction.policy import Pressure, select_pressure_range
from turn_memory.config import EngineConfig
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import js_len
from turn_memory.host.turn_index import LANDING_STEP
from turn_memory.prompts import read_prompt
from turn_memory.runtime.interfaces import ReadyRewrites
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import WorkerRegistry

if TYPE_CHECKING:  # the module itself is imported on first use (see _compact)
    from turn_memory.compaction.manual import Rewrites

log = logging.getLogger("turn_memory.compaction")

#: the cheap estimate (last measure + appended since) must reach this share of the
#: threshold before the O(surface) full measure runs again
CHEAP_MARGIN = 0.9
#: after pressure could not be relieved (a failed job, or passes that stayed over the
#: threshold), wait until the session grows by this share of the window before retrying:
#: never a compaction on every step
RETRY_GROWTH = 0.05


@dataclass(frozen=True)
class Measure:
    tokens: int
    nodes: dict[int, int]
    source: str  # "meter" | "surface"


def context_window(log_: SessionLog, since: int = 0, known: int | None = None) -> int | None:
    """The routed model's window from the latest request/context at or after `since`, else `known`."""
    for event in reversed(log_.events[since:]):
        if event["type"] == "request/context":
            return (event.get("data") or {}).get("contextWindow")
    return known


def _header_tokens(log_: SessionLog) -> int:
    for event in reversed(log_.events):
        if event["type"] == "request/header":
            header = (event.get("data") or {}).get("header") or {}
            system = js_len(header.get("system") or "") // 4 + 4 if header.get("system") else 0
            tools = js_len(json.dumps(header.get("tools"), separators=(",", ":"))) // 4 + 4 if header.get("tools") else 0
            return system + tools
    return 0


def surface_prices(log_: SessionLog) -> dict[int, int]:
    """Every surface node's price; each event is priced once (`SessionLog.price`)."""
    price = log_.price
    return {s: p for s in log_.nodes if (p := price(s)) is not None}


def surface_measure(log_: SessionLog) -> Measure:
    """The canonical surface priced with the meter's heuristic, plus the request envelope."""
    nodes = surface_prices(log_)
    return Measure(sum(nodes.values()) + _header_tokens(log_), nodes, "surface")


@dataclass(frozen=True)
class LastMeasure:
    log_length: int
    tokens: int
    replace_generation: int


def cheap_estimate(log_: SessionLog, last: LastMeasure | None) -> int | None:
    """The last full measure plus what was appended since (no full pass); None without one.

    Replacements since the last measure are ignored: turn landings and checkpoints only
    land when they shrink what they replace, so this stays an upper bound and a landing
    never costs an extra full measure.
    """
    if last is None:
        return None
    added = 0
    for seq in reversed(log_.nodes):
        if seq < last.log_length:
            break
        added += log_.price(seq) or 0
    return last.tokens + added


Measurer = Callable[[str], Awaitable[dict[str, Any]]]

#: what DSH's token meter throws for an assistant/message it cannot tie to a provider step
_NO_MATCHING_STEP = re.compile(r"token meter: assistant/message at seq (\d+) has no matching step/start event")


def refused_landing_seq(log_: SessionLog, error: Any) -> int | None:
    """The seq when `error` is the meter refusing an assistant node turn-memory landed (a
    replacement, one appended in a landing step, or one a landing appended after its head
    inside the loop's step) — the one refusal the canonical-surface fallback stands in for."""
    match = _NO_MATCHING_STEP.search(error) if isinstance(error, str) else None
    if match is None:
        return None
    seq = int(match.group(1))
    if not seq < len(log_):
        return None
    event = log_.events[seq]
    if event["type"] != "assistant/message":
        return None
    data = event.get("data") or {}
    origin = log_.index.origins.get(seq)
    ours = isinstance(event.get("surfaceOp"), dict) or data.get("step") == LANDING_STEP \
        or (origin is not None and origin[0] == "turn" and origin[1] != data.get("turn"))
    return seq if ours else None


def _barrier(rewrites: Rewrites | None) -> AsyncContextManager[Any]:
    return rewrites() if rewrites is not None else nullcontext()


class CompactionService:
    def __init__(self, workers: WorkerRegistry) -> None:
        self.workers = workers
        #: (session, turn) pairs whose one overflow recovery was used
        self._overflowed: set[tuple[str, int]] = set()
        self._last: dict[str, LastMeasure] = {}
        #: session -> measured tokens when pressure last could not be relieved
        self._floor: dict[str, int] = {}
        #: session -> (log length scanned, window): request/context is rare, so never rescan
        self._windows: dict[str, tuple[int, int | None]] = {}

    def window(self, session: MirroredSession) -> int | None:
        scanned, known = self._windows.get(session.id, (0, None))
        if scanned > len(session.log):  # the mirror was reset to a shorter log
            scanned, known = 0, None
        window = context_window(session.log, scanned, known)
        self._windows[session.id] = (len(session.log), window)
        return window

    async def measure(self, session: MirroredSession, measurer: Measurer) -> Measure | None:
        """DSH's token meter over the session; the canonical surface priced here only when the
        meter refuses an assistant node a turn-memory landing wrote (D-005); None (logged)
        on any other meter failure: no pressure decision this step."""
        length, generation = len(session.log), session.log.replace_generation
        try:
            result = await measurer(session.id)
        except Exception as exc:
            result = {"error": str(exc)}
        if result.get("error") is None and "totalTokens" in result:
            measured = Measure(int(result["totalTokens"]), {n["seq"]: n["tokens"] for n in result.get("nodes", [])}, "meter")
        elif (seq := refused_landing_seq(session.log, result.get("error"))) is not None:
            log.warning("session %s: the token meter refuses turn-memory's landed assistant node at seq %d (%s); "
                        "pricing the canonical surface", session.id, seq, result.get("error"))
            measured = surface_measure(session.log)
        else:
            log.warning("session %s: token meter failed (%s); no pressure measure this step", session.id,
                        result.get("error") or "no measurement")
            return None
        self._last[session.id] = LastMeasure(length, measured.tokens, generation)
        return measured

    async def pre_step(self, session: MirroredSession, turn: int, config: EngineConfig, port: HostPort,
                       measurer: Measurer, agent: AgentOptions, rewrites: Rewrites | None = None,
                       ready: ReadyRewrites | None = None) -> None:
        cfg = config.compaction
        if not cfg.auto or not session.is_user_session or session.job_lock.locked():
            return
        window = self.window(session)
        if not window:
            return  # no routed request yet: nothing to measure against
        async with AsyncExitStack() as barrier:
            await self._pressure(session, turn, config, port, measurer, agent, window, barrier, rewrites, ready)

    async def _pressure(self, session: MirroredSession, turn: int, config: EngineConfig, port: HostPort,
                        measurer: Measurer, agent: AgentOptions, window: int, barrier: AsyncExitStack,
                        rewrites: Rewrites | None, ready: ReadyRewrites | None) -> None:
        cfg = config.compaction
        threshold = int(window * cfg.thresholdRatio)
        floor = self._floor.get(session.id)
        held = False
        for attempt in range(cfg.maxPasses):
            cheap = cheap_estimate(session.log, self._last.get(session.id))
            if cheap is not None and cheap < CHEAP_MARGIN * threshold:
                return
            measured = await self.measure(session, measurer)
            if measured is None:
                return
            pressure = Pressure(measured.tokens, window, cfg.thresholdRatio)
            if not pressure.over:
                self._floor.pop(session.id, None)
                return
            if floor is not None and measured.tokens < floor + RETRY_GROWTH * window:
                return  # relieving failed at about this size already; wait for real growth
            if not held:
                # a compaction is due: now (and only now) wait for the rewrite in flight and
                # land what is ready before reading the range; the barrier stays held until
                # the last pass is done, so no queued turn starts rewriting under it
                held = True
                generation = session.log.replace_generation
                await barrier.enter_async_context(_barrier(rewrites))
                if session.log.replace_generation != generation:  # landings shrank the surface
                    measured = await self.measure(session, measurer)
                    if measured is None:
                        return
                    pressure = Pressure(measured.tokens, window, cfg.thresholdRatio)
                    if not pressure.over:
                        self._floor.pop(session.id, None)
                        return
            selection = select_pressure_range(session.log, measured.nodes, int(window * cfg.retainRatio))
            if selection is None:
                log.warning("session %s turn %d: at %d/%d tokens but nothing compactable outside the retained tail",
                            session.id, turn, pressure.tokens, window)
                self._floor[session.id] = measured.tokens
                return
            log.info("session %s turn %d: pressure %d/%d tokens (%s) >= %.0f%%; compacting %d nodes (pass %d)",
                     session.id, turn, pressure.tokens, window, measured.source, cfg.thresholdRatio * 100,
                     len(selection.shadowed), attempt + 1)
            if await self._compact(session, port, config, agent, selection, turn, ready) is None:
                self._floor[session.id] = measured.tokens
                return
        measured = await self.measure(session, measurer)
        if measured is not None and Pressure(measured.tokens, window, cfg.thresholdRatio).over:
            log.warning("session %s turn %d: still at %d/%d tokens after %d passes (the retained tail and request "
                        "envelope alone are too large); retrying after further growth", session.id, turn,
                        measured.tokens, window, cfg.maxPasses)
            self._floor[session.id] = measured.tokens

    async def overflow(self, session: MirroredSession, turn: int, config: EngineConfig, port: HostPort,
                       agent: AgentOptions, rewrites: Rewrites | None = None, ready: ReadyRewrites | None = None) -> bool:
        """Recover from a provider overflow once per turn; True when the request should be replayed."""
        key = (session.id, turn)
        if key in self._overflowed:
            log.warning("session %s turn %d: second context overflow; keeping the provider error", session.id, turn)
            return False
        self._overflowed.add(key)
        if not session.is_user_session or session.job_lock.locked():
            return False
        generation = session.log.replace_generation
        async with _barrier(rewrites):
            selection = select_pressure_range(session.log, surface_prices(session.log), 0)
            if selection is None:
                log.warning("session %s turn %d: context overflow but nothing to compact", session.id, turn)
                return session.log.replace_generation > generation  # ready landings alone may fit it
            log.info("session %s turn %d: context overflow; compacting %d nodes, then replaying once", session.id,
                     turn, len(selection.shadowed))
            await self._compact(session, port, config, agent, selection, turn, ready)
        return session.log.replace_generation > generation

    async def _compact(self, session: MirroredSession, port: HostPort, config: EngineConfig, agent: AgentOptions,
                       selection: Any, turn: int, ready: ReadyRewrites | None = None) -> dict[str, Any] | None:
        """One automatic transaction owned by the open `turn`; its result, or None."""
        if session.log.index.open_turn != turn:
            return None
        # imported on first use: the engine's start-up imports compete with DSH's boot
        from turn_memory.compaction.manual import TooSmallToFold, run_transaction
        from turn_memory.compaction.transaction import too_small

        small = too_small(session.log, selection, read_prompt("checkpoint"))
        if small is not None:
            log.info("session %s turn %d: no automatic compaction: %s", session.id, turn, small)
            return None
        try:
            async with session.job_lock:
                return await run_transaction(session, port, config, agent, selection, None, turn, self.workers, ready)
        except TooSmallToFold as exc:
            log.info("session %s turn %d: no automatic compaction: %s", session.id, turn, exc)
            return None
        except RemoteError as exc:  # closed cleanly with the error; the turn goes on
            log.warning("session %s turn %d: automatic compaction failed: %s", session.id, turn, exc.info.message)
            return None

    async def if_needed(self, session: MirroredSession, trigger: str, config: EngineConfig, port: HostPort,
                        measurer: Measurer, agent: AgentOptions, rewrites: Rewrites | None = None,
                        ready: ReadyRewrites | None = None) -> dict[str, Any] | None:
        """DSH's compactIfNeeded seam: one pass of the same policy, returning its result."""
        turn = session.log.index.open_turn
        if turn is None or not session.is_user_session or session.job_lock.locked():
            return None
        window = self.window(session)
        if trigger != "context-overflow":
            measured = await self.measure(session, measurer) if window else None
            if not window or measured is None or not Pressure(measured.tokens, window, config.compaction.thresholdRatio).over:
                return None
        generation = session.log.replace_generation
        async with _barrier(rewrites):
            if trigger == "context-overflow":
                selection = select_pressure_range(session.log, surface_prices(session.log), 0)
            else:
                assert window and measured is not None
                if session.log.replace_generation != generation:  # landings shrank the surface
                    measured = await self.measure(session, measurer)
                    if measured is None or not Pressure(measured.tokens, window, config.compaction.thresholdRatio).over:
                        return None
                selection = select_pressure_range(session.log, measured.nodes, int(window * config.compaction.retainRatio))
            return None if selection is None else await self._compact(session, port, config, agent, selection, turn,
                                                                      ready)
