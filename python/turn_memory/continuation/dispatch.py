"""The automatic follow-up turn after a hand-off (design D-013).

For each continuation request in the log that still awaits its follow-up (checked on every
`turn/end` and on every full resync, so after any restart too), once:
1. wait for the request turn's compression job to be ready; no follow-up if it gave up
   (or, with no job in this process, if the log holds no landing marker for the turn);
2. flush the session, then queue one plugin-sourced user message with `Agent.followup`,
   its source naming the request, so the log itself deduplicates it across restarts.

On rc8 a compressed turn can only land inside a later open turn (its landing step belongs
to that turn), so a ready landing is carried by the follow-up's own turn: its first
pre-step lands it before that turn's first model request, and the follow-up message is
appended after the landing. A no-op landing is already in the log before the follow-up.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable

from turn_memory.config import EngineConfig
from turn_memory.continuation import state, texts
from turn_memory.continuation.reminder import enabled
from turn_memory.host.dialect import Dialect
from turn_memory.host.mirror import MirroredSession
from turn_memory.landing.port import HostPort
from turn_memory.turns.markers import PLUGIN
from turn_memory.turns.recovery import scan_marks
from turn_memory.turns.service import TurnService

log = logging.getLogger("turn_memory.continuation")


def followup_source(dialect: Dialect, request_id: str) -> dict[str, str]:
    return dialect.plugin_source(PLUGIN, **{state.SOURCE_KEY: request_id})


class FollowupDispatcher:
    def __init__(self, turns: TurnService) -> None:
        self._turns = turns
        #: (session, request id) being waited on or delivered by this process
        self._claimed: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def on_events(self, session: MirroredSession, events: list[dict], reset: bool,
                  port: Callable[[], HostPort], config: EngineConfig) -> None:
        """Call after the turn service saw the same events (it owns the compression jobs)."""
        if not enabled(config) or not session.is_user_session:
            return
        if not reset and not any(e["type"] == "turn/end" for e in events):
            return
        for request in state.awaiting_followup(session.log.events):
            key = (session.id, request.id)
            if key in self._claimed:
                continue
            self._claimed.add(key)
            task = asyncio.get_running_loop().create_task(self._deliver(session, request, port))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, session: MirroredSession, request: state.ContinuationRequest,
                       port: Callable[[], HostPort]) -> None:
        where = f"session {session.id} turn {request.turn}"
        delivered = False
        try:
            job = self._turns.jobs.get((session.id, request.turn))
            if job is not None:
                await job.ready.wait()
            ready = (job is not None and job.finished) or request.turn in scan_marks(session.log.events).landed
            if not ready:
                log.info("%s: compression did not succeed; no automatic continuation", where)
                return
            if request.id not in {r.id for r in state.awaiting_followup(session.log.events)}:
                log.info("%s: continuation %s no longer awaited (delivered or superseded)", where, request.id)
                return
            host = port()
            await host.flush(session.id)
            await host.followup(session.id, f"turn-memory-continuation-{uuid.uuid4()}",
                                [{"type": "text", "text": texts.followup(request.handoff)}],
                                followup_source(session.dialect, request.id))
            delivered = True
            log.info("%s: automatic continuation queued for hand-off %s", where, request.id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no live agent, transport: a later resync may retry
            log.warning("%s: automatic continuation not queued: %s", where, exc)
        finally:
            if not delivered:
                self._claimed.discard((session.id, request.id))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
