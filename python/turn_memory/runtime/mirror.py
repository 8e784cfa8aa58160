"""Per-session mirror of the host's log: the events the shim forwarded and their surface.

The shim sends committed events in log order; a reset carries the whole log. The mirror
folds them through the surface model, so the engine always plans against exactly what the
host holds, and it reports loudly when a committed log would not reload. Each event is
folded once: the log keeps its per-turn index (`host.turn_index`) and the session its
hand-off ledger as they grow, so nothing downstream rescans the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from turn_memory.bridge.protocol import SessionEventsParams, SessionMeta
from turn_memory.host.dialect import Dialect
from turn_memory.host.continuations import ContinuationLedger
from turn_memory.host.surface import SessionLog, SurfaceError
from turn_memory.runtime.fork_cost import ForkCost
from turn_memory.runtime.worker_slots import WorkerSlots

log = logging.getLogger("turn_memory.mirror")


@dataclass
class MirroredSession:
    id: str
    dialect: Dialect
    peer: Any
    log: SessionLog
    meta: SessionMeta | None = None
    #: hand-off requests and their follow-ups, kept as the log grows (the log's own
    #: `index` keeps its per-turn facts)
    continuations: ContinuationLedger = field(default_factory=ContinuationLedger)
    #: the mirror saw a gap; plans are refused until the shim resends the log
    desynced: bool = False
    #: one job (compaction, turn rewrite) at a time per session
    job_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: what starting a worker as a fork of the agent costs this session's host
    forks: ForkCost = field(default_factory=ForkCost)
    #: its workers running now, within `maxActiveWorkers`
    worker_slots: WorkerSlots = field(default_factory=WorkerSlots)
    _grew: asyncio.Event = field(default_factory=asyncio.Event)
    #: the newest request/header's `header` (its tool schemas: ~23 KB of JSON on 0.2)
    _header: dict[str, Any] | None = None

    def retained(self, event: Any) -> Any:
        """`event` as the mirror keeps it: a request/header identical to the one before it shares
        that one's `header` object. DSH 0.2 writes the whole header again at most of a session's
        turns, unchanged: kept apart, those copies were half of a long session's log and most of
        the engine's growth (bench/soak.py: 484 identical headers, 11.5 of 21 MB, in 300 turns)."""
        data = event.get("data") if isinstance(event, dict) and event.get("type") == "request/header" else None
        if not isinstance(data, dict) or not isinstance(header := data.get("header"), dict):
            return event
        if header == self._header:
            return {**event, "data": {**data, "header": self._header}}
        self._header = header
        return event

    @property
    def is_user_session(self) -> bool:
        """User sessions and user lineage forks; not subagents
        (docs/decisions.md#user-sessions-are-known-by-their-origin)."""
        meta = self.meta
        return meta is None or (meta.origin != "subagent" and not (meta.delegationDepth or 0) > 0)

    async def wait_for_length(self, length: int, timeout: float = 5.0) -> None:
        """Wait until the mirror holds at least `length` events (they are in flight)."""
        async def grow() -> None:
            while len(self.log) < length or self.desynced:
                self._grew.clear()
                await self._grew.wait()

        await asyncio.wait_for(grow(), timeout)


class SessionMirror:
    def __init__(self) -> None:
        self.sessions: dict[str, MirroredSession] = {}

    def get(self, session_id: str) -> MirroredSession | None:
        return self.sessions.get(session_id)

    def receive(self, peer: Any, dialect: Dialect, params: SessionEventsParams,
                payload: bytes | None) -> list[dict[str, Any]] | None:
        """Fold one batch; returns its events, or None on a gap (the caller asks for a resync)."""
        events: list[dict[str, Any]] = json.loads(payload) if payload else []
        if len(events) != params.count:
            log.error("session %s: batch says %d events, payload has %d", params.sessionId, params.count, len(events))
            return None
        state = self.sessions.get(params.sessionId)
        if params.reset or state is None:
            if not params.reset:
                log.warning("session %s: events before a reset; asking for the whole log", params.sessionId)
                return None
            if state is None:
                state = self.sessions[params.sessionId] = MirroredSession(params.sessionId, dialect, peer, SessionLog(dialect))
            # reset in place: running jobs keep their reference and read the fresh log
            state.log, state.meta, state.dialect = SessionLog(dialect), params.meta, dialect
            state.continuations = ContinuationLedger()
            state._header = None
        elif params.start != len(state.log):
            log.error("session %s: gap in the mirror (have %d events, batch starts at %d); resyncing",
                      params.sessionId, len(state.log), params.start)
            state.desynced = True
            return None
        state.peer = peer
        for event in events:
            try:
                problems = state.log.append(state.retained(event))
            except SurfaceError as exc:
                log.error("session %s: event %s broke the surface model (%s); resyncing", state.id, event.get("seq"), exc)
                state.desynced = True
                return None
            state.continuations.feed(event)
            for problem in problems:
                log.error("session %s: committed event %s would not reload: %s", state.id, event.get("seq"), problem)
        state.desynced = False
        state._grew.set()
        return events

    def close(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)
