"""Whether a session's next first worker may start as a fork of its agent, where
`turns.workerStart=fork` asks for forks at all (pure).

DSH starts a fork by copying the parent's whole session log into the child on the thread the
agent runs on (0.2.1: `completedTurnPrefix`, then `Session.fromRestore` deep-copies and freezes
every event and the child's persistence serializes them all; rc.8 copies too). Nothing is ever
deleted from the log, so that copy grows with the session, and any agent step that coincides
with a worker's start waits for it (bench/soak.py on 0.2.1: steps held 1-2.7 s from turn ~130
of 300). A spawn starts from its task alone, at the same cost whatever the log's length.

So the shim times each fork's start, and once a fork's measured cost per event, applied to the
log as it stands, would hold the agent longer than `STALL_BUDGET_MS`, a job's first worker
spawns instead (its task then carries the turn's text, so it needs no extra read)."""

from __future__ import annotations

from dataclasses import dataclass

#: below this many events a fork always starts: its copy is short, and a slow start there is the
#: host warming up (its first child), not the copy
MEASURE_FROM_EVENTS = 1000
#: the longest a fork's start is expected to hold the agent's thread: measured starts vary 2-3x
#: with the machine's load and garbage collection, and DSH's own step and the engine's hooks
#: share the same 1 s a step may stall
STALL_BUDGET_MS = 150.0


@dataclass
class ForkCost:
    """A session's measured fork starts."""

    #: milliseconds a fork's start took per event of the log it copied (the latest measured)
    ms_per_event: float | None = None
    #: the switch to spawns was logged
    said: bool = False

    def observed(self, start_ms: float | None, events: int) -> None:
        """A fork started in `start_ms` (None: the shim did not say) from a log of `events`."""
        if start_ms is not None and events >= MEASURE_FROM_EVENTS:
            self.ms_per_event = start_ms / events

    def predicted_ms(self, events: int) -> float | None:
        """How long a fork from a log of `events` is expected to hold the agent (None: unmeasured)."""
        return None if self.ms_per_event is None else self.ms_per_event * events

    def may_fork(self, events: int) -> bool:
        predicted = self.predicted_ms(events)
        return events < MEASURE_FROM_EVENTS or predicted is None or predicted <= STALL_BUDGET_MS
