"""Per-turn compression for every mirrored user session: triggers, queues, pre-step landing.

Triggers: a live `turn/end` in a user session (not subagents; user lineage forks count,
D-015), and on every full resync (agent/created, reconnect) the recovery scan. The next
turn's first pre-step waits (bounded) for the previous turn's job and lands it there, so
the next request already carries the compressed turn.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from turn_memory.config import EngineConfig
from turn_memory.hints.service import HintService
from turn_memory.host.mirror import MirroredSession
from turn_memory.landing.port import HostPort
from turn_memory.turns.job import TurnJob
from turn_memory.turns.queue import TurnQueue
from turn_memory.turns.recovery import turns_to_recover
from turn_memory.workers import WorkerRegistry

log = logging.getLogger("turn_memory.turns")


class TurnService:
    def __init__(self, workers: WorkerRegistry, hints: HintService | None = None) -> None:
        self.queues: dict[str, TurnQueue] = {}
        self.hints = hints
        #: queued and running jobs: (session, turn) -> job
        self.jobs: dict[tuple[str, int], TurnJob] = {}
        self._workers = workers

    def on_events(self, session: MirroredSession, events: list[dict[str, Any]], reset: bool,
                  port: Callable[[], HostPort], config: EngineConfig) -> None:
        if not config.turns.enabled or not session.is_user_session:
            return
        if reset:
            live_from = session.meta.liveFrom if session.meta is not None else None
            for turn in turns_to_recover(session.log, live_from):
                if self._enqueue(session, turn, port, config):
                    log.info("session %s turn %d: recovering (pending or stale marker)", session.id, turn)
            return
        for event in events:
            if event["type"] == "turn/end":
                self._enqueue(session, event["data"]["turn"], port, config)

    def _enqueue(self, session: MirroredSession, turn: int, port: Callable[[], HostPort], config: EngineConfig) -> bool:
        queue = self.queues.get(session.id)
        if queue is None:
            queue = self.queues[session.id] = TurnQueue(session.id, lambda t: self._run(session.id, t))
        existing = self.jobs.get((session.id, turn))
        if existing is not None and not existing.done:
            return False
        job = TurnJob(session, port(), config.turns, turn)
        if self.hints is not None and config.thoughtHints.enabled:
            hints, job_port = self.hints, job.port
            job.take_hints = lambda: hints.take(session, turn, job_port, config.thoughtHints)
        if not queue.enqueue(turn):
            return False
        self.jobs[(session.id, turn)] = job
        self._workers.add(job.job_id, job)
        return True

    async def _run(self, session_id: str, turn: int) -> None:
        job = self.jobs[(session_id, turn)]
        try:
            await job.run()
        finally:
            self._workers.remove(job.job_id)
            self.jobs.pop((session_id, turn), None)
            if self.hints is not None:
                self.hints.forget(session_id, turn)  # a job that never took them (skipped, no-op)
            if not job.finished:
                self.queues[session_id].forget(turn)  # a later recovery may retry it

    async def pre_step(self, session: MirroredSession, turn: int, step: int, config: EngineConfig) -> None:
        """Before a step of `turn` starts: land earlier turns whose compression is ready.

        The first step waits (bounded) for the previous turn, queued or running, so the
        request about to be made already carries it compressed.
        """
        previous = self.jobs.get((session.id, turn - 1))
        if step == 1 and previous is not None and not previous.ready.is_set():
            try:
                await asyncio.wait_for(previous.ready.wait(), config.turns.landingWaitS)
            except asyncio.TimeoutError:
                log.info("session %s turn %d: not ready after %.0fs; turn %d proceeds with it raw", session.id,
                         previous.turn, config.turns.landingWaitS, turn)
        for (sid, t), job in sorted(self.jobs.items()):
            if sid == session.id and t < turn and job.ready.is_set() and job.finished and not job.landed.is_set():
                await job.land_in_prestep(turn)

    async def barrier(self, session_id: str, timeout: float | None = None) -> bool:
        queue = self.queues.get(session_id)
        return True if queue is None else await queue.barrier(timeout)
