"""The automatic follow-up turn after a hand-off.

For each continuation request in the log that still awaits its follow-up (checked on every
`turn/end` and on every full resync, so after any restart too), once:
1. wait for the request turn's compression job to be ready; no follow-up if it gave up, its
   landing was refused, or its landing would be refused in the turn the follow-up opens (the
   plan is checked as if that turn had started); with no job in this process, none if the log
   holds no landing marker for the turn;
2. flush the session, then queue one plugin-sourced user message with `Agent.followup`,
   its source naming the request, so the log itself deduplicates it across restarts.

A compressed turn can only land inside a later open turn (rc8: its landing step belongs to
that turn; 0.2: structured, only inside a step the loop opened), so a ready landing is
carried by the follow-up's own turn: its first pre-step lands it (0.2: its first step's
request) before that turn's first model request, and the follow-up message is appended
after the landing. A no-op landing is already in the log before the follow-up. The
follow-up only ever runs on the landed turn: its first pre-step waits (bounded) for a
hand-off turn still compressing, and if the turn is then still raw — the landing refused,
or (0.2) one that would be refused inside the step — the pre-step withholds the follow-up
message, so the turn takes nothing in and ends before any request (`withheld`). On 0.2 a
landing the host refuses at the step's request itself withholds it there: the shim drops
it from the step's input and, with nothing else to take in, cancels the step before its
model request.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable

from turn_memory.bridge.port import HostPort
from turn_memory.config import EngineConfig
from turn_memory.continuation import texts
from turn_memory.continuation.reminder import enabled
from turn_memory.host import continuations
from turn_memory.host.dialect import OUR_PLUGIN, Dialect
from turn_memory.host.markers import CONTINUATION_KEY
from turn_memory.runtime.interfaces import LandingOutcome, TurnJobs
from turn_memory.runtime.mirror import MirroredSession

log = logging.getLogger("turn_memory.continuation")


def followup_source(dialect: Dialect, request_id: str) -> dict[str, str]:
    return dialect.plugin_source(OUR_PLUGIN, **{CONTINUATION_KEY: request_id})


class FollowupDispatcher:
    def __init__(self, turns: TurnJobs) -> None:
        self._turns = turns
        #: (session, request id) being waited on or delivered by this process
        self._claimed: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: session -> follow-up message id -> (request id, hand-off turn): queued by this process
        self._queued: dict[str, dict[str, tuple[str, int]]] = {}
        #: (session, follow-up message id) already withheld once
        self._withheld: set[tuple[str, str]] = set()

    def on_events(self, session: MirroredSession, events: list[dict], reset: bool,
                  port: Callable[[], HostPort], config: EngineConfig) -> None:
        """Call after the turn service saw the same events (it owns the compression jobs)."""
        if not enabled(config) or not session.is_user_session:
            return
        if not reset and not any(e["type"] == "turn/end" for e in events):
            return
        for request in session.continuations.awaiting():
            key = (session.id, request.id)
            if key in self._claimed:
                continue
            self._claimed.add(key)
            task = asyncio.get_running_loop().create_task(self._deliver(session, request, port))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, session: MirroredSession, request: continuations.ContinuationRequest,
                       port: Callable[[], HostPort]) -> None:
        where = f"session {session.id} turn {request.turn}"
        delivered = False
        try:
            job = self._turns.job(session.id, request.turn)
            if job is not None:
                await job.settled()
                # the follow-up's own turn carries the landing: never queue one it would refuse
                ready = job.compressed and job.landing is not LandingOutcome.REFUSED and job.landable_in_next_turn()
            else:
                ready = request.turn in session.log.index.landed
            if not ready:
                log.info("%s: compression did not succeed; no automatic continuation", where)
                return
            if request.id not in {r.id for r in session.continuations.awaiting()}:
                log.info("%s: continuation %s no longer awaited (delivered or superseded)", where, request.id)
                return
            host = port()
            await host.flush(session.id)
            message_id = f"turn-memory-continuation-{uuid.uuid4()}"
            # known before the call returns: the follow-up's turn may start (and ask) at once
            queued = self._queued.setdefault(session.id, {})
            queued[message_id] = (request.id, request.turn)
            try:
                await host.followup(session.id, message_id, [{"type": "text", "text": texts.followup(request.handoff)}],
                                    followup_source(session.dialect, request.id))
            except BaseException:
                queued.pop(message_id, None)
                raise
            delivered = True
            log.info("%s: automatic continuation queued for hand-off %s", where, request.id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no live agent, transport: a later resync may retry
            log.warning("%s: automatic continuation not queued: %s", where, exc)
        finally:
            if not delivered:
                self._claimed.discard((session.id, request.id))

    # -- the follow-up's own turn ------------------------------------------------------------
    def _in_flight(self, session: MirroredSession) -> dict[str, tuple[str, int]]:
        """Follow-ups queued (by this process, or by an earlier one as the log shows) that no
        step has taken in yet: message id -> (request id, hand-off turn)."""
        ledger = session.continuations
        mine = self._queued.get(session.id, {})
        for message_id in [m for m, q in mine.items() if q[0] in ledger.claimed or (session.id, m) in self._withheld]:
            del mine[message_id]  # taken in, or withheld: no longer in flight
        out = dict(mine)
        turn_of = {r.id: r.turn for r in ledger.requests.values()}
        for message_id, request_id in ledger.in_flight().items():
            if request_id in turn_of:
                out.setdefault(message_id, (request_id, turn_of[request_id]))
        return {m: q for m, q in out.items() if (session.id, m) not in self._withheld}

    async def before_step(self, session: MirroredSession, turn: int, step: int, config: EngineConfig) -> None:
        """A turn's first pre-step, before its landings: if a follow-up may be taken in now
        and its hand-off turn is still compressing, wait (bounded) for that compression."""
        if step != 1 or not enabled(config):
            return
        for _, request_turn in self._in_flight(session).values():
            job = self._turns.job(session.id, request_turn)
            if request_turn < turn and job is not None:
                if not await job.settled(config.turns.landingWaitS):
                    log.info("session %s turn %d: hand-off turn %d still compressing after %.0fs", session.id, turn,
                             request_turn, config.turns.landingWaitS)

    def withheld(self, session: MirroredSession, turn: int, step: int, deferred: bool) -> list[str]:
        """After a first pre-step's landings: the follow-ups this step must not take in, because
        their hand-off turn is still raw on the surface (`deferred`: the turns that reach the
        surface tail land at this step's request instead, 0.2)."""
        if step != 1:
            return []
        out = []
        for message_id, (_, request_turn) in self._in_flight(session).items():
            if request_turn >= turn or self._carried(session, request_turn, turn, deferred):
                continue
            log.warning("session %s turn %d: hand-off turn %d did not land compressed; its automatic continuation "
                        "is withheld (no follow-up on the raw turn)", session.id, turn, request_turn)
            self._withheld.add((session.id, message_id))
            out.append(message_id)
        return out

    def _carried(self, session: MirroredSession, request_turn: int, turn: int, deferred: bool) -> bool:
        """Whether the step about to run sees the hand-off turn compressed (or in a checkpoint)."""
        index = session.log.index
        if not index.turn_nodes(request_turn):
            return True  # a checkpoint holds it: not the raw turn
        job = self._turns.job(session.id, request_turn)
        if job is not None:
            if job.landing is LandingOutcome.LANDED:
                return True
            if deferred and request_turn in self._turns.deferred(session.id, turn) and job.compressed \
                    and not job.done:
                return job.landable_in_step(turn, 1)
            return False
        return request_turn in index.landed and not index.has_raw_reasoning(request_turn)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
