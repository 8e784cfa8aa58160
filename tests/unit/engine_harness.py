"""The engine's services over a `FakeHost`, wired and fed as `engine.py` wires and feeds them.

One fixture instead of a copy per test module: `EngineHarness` builds the services with one
worker registry (hints feed turn jobs, follow-ups read them, compaction shares the registry),
and `forward` does what the shim's mirror and the engine's `session.events` handler do with a
batch. `fake_host.attach_workers` routes scripted workers' tool calls through a service's
registry, as the shim's `worker.tool` does.
"""

from __future__ import annotations

import json
from typing import Any

from fake_host import SESSION, FakeHost

from turn_memory.bridge.protocol import SessionEventsParams
from turn_memory.compaction.service import CompactionService
from turn_memory.config import EngineConfig
from turn_memory.continuation.dispatch import FollowupDispatcher
from turn_memory.runtime.workers import WorkerRegistry
from turn_memory.turns.results import ResultStore
from turn_memory.turns.service import TurnService


class EngineHarness:
    def __init__(self, hints: Any = None) -> None:
        self.workers = WorkerRegistry()
        self.hints = hints
        self.turns = TurnService(self.workers, hints)
        self.followups = FollowupDispatcher(self.turns)
        self.compaction = CompactionService(self.workers)

    def forward(self, host: FakeHost, config: EngineConfig, *, reset: bool = False,
                results: ResultStore | None = None) -> list[dict[str, Any]]:
        services = [s for s in (self.hints, self.turns, self.followups) if s is not None]
        return forward(host, config, *services, reset=reset, results=results)


def forward(host: FakeHost, config: EngineConfig, *services: Any, reset: bool = False,
            results: ResultStore | None = None) -> list[dict[str, Any]]:
    """Send the events the engine has not seen (the whole log on a reset, as the shim does),
    then hand the batch to each service in the order given (the engine's: hints, turns,
    follow-ups; the turn service also gets the result store)."""
    start = 0 if reset else host._sent
    new = host.log.events[start:]
    params = SessionEventsParams(sessionId=SESSION, start=start, count=len(new), reset=reset)
    events = host.mirror.receive(None, host.dialect, params, json.dumps(new).encode())
    assert events is not None, "the mirror refused the batch"
    host._sent = len(host.log)
    for service in services:
        if isinstance(service, TurnService):
            service.on_events(host.session, events, reset, lambda: host, config, results)
        else:
            service.on_events(host.session, events, reset, lambda: host, config)
    return events
