"""The phases a completed turn goes through, and the only moves between them. Pure.

A turn's state lives here and nowhere else: the job (`turns.job`), the queue
(`turns.queue`) and the service (`turns.service`) read a turn's phase and move it, each move
with its reason; what they used to keep as flags (held, finished, done, landed) is read off
the phase. `inspect` and recovery name what the log alone shows with the same phases
(`durable_phase`). The moves are `TRANSITIONS`; docs/architecture.md draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping


class Phase(Enum):
    #: turn/end (or recovery) queued it; it has not been read yet
    ARRIVED = "arrived"
    #: read, and pending (it owes its pending marker until that or its rewrite lands);
    #: the compression policy has not looked at it yet
    PENDING = "pending"
    #: the policy holds it raw (pending) until a later turn makes a worker pay
    HELD = "held"
    #: the policy gave it a worker; it waits for a free slot
    DISPATCHED = "dispatched"
    #: a worker run rewrites it
    COMPRESSING = "compressing"
    #: a validated rewrite waits for a landing point
    READY = "ready"
    #: the rewrite landed: the turn is compressed on the surface
    LANDED = "landed"
    #: its rewrite was refused for good: the turn stays raw and pending
    REFUSED = "refused"
    #: no worker may rewrite it: it owes (or carries) its content-identical no-op marker
    NO_OP = "no-op"
    #: a session checkpoint took the turn (raw, or in its ready compressed form): nothing lands
    FOLDED = "folded"
    #: nothing will land in this process (nothing to compress, the worker run gave up or
    #: crashed): the turn stays raw and pending, and a later start redoes it
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        return not TRANSITIONS[self]

    @property
    def decided(self) -> bool:
        """The policy has looked at it (or it never needed the policy)."""
        return self not in (Phase.ARRIVED, Phase.PENDING)

    @property
    def held(self) -> bool:
        """The policy holds it raw: no worker is coming for it now (it blocks no landing).
        Not PENDING: a turn the policy has not looked at yet may still get one at once."""
        return self is Phase.HELD

    @property
    def settled(self) -> bool:
        """No longer compressing or waiting to: ready to land, or nothing left to do."""
        return self is Phase.READY or self.terminal


#: phase -> the phases it may move to; a terminal phase moves nowhere
TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.ARRIVED: frozenset({Phase.PENDING, Phase.NO_OP, Phase.STOPPED}),
    Phase.PENDING: frozenset({Phase.HELD, Phase.DISPATCHED, Phase.FOLDED, Phase.STOPPED}),
    Phase.HELD: frozenset({Phase.DISPATCHED, Phase.FOLDED, Phase.STOPPED}),
    Phase.DISPATCHED: frozenset({Phase.COMPRESSING, Phase.STOPPED}),
    Phase.COMPRESSING: frozenset({Phase.READY, Phase.STOPPED}),
    Phase.READY: frozenset({Phase.LANDED, Phase.REFUSED, Phase.FOLDED}),
    Phase.LANDED: frozenset(),
    Phase.REFUSED: frozenset(),
    Phase.NO_OP: frozenset(),
    Phase.FOLDED: frozenset(),
    Phase.STOPPED: frozenset(),
}


class IllegalTransition(Exception):
    """A move the lifecycle does not allow: a bug in the caller, never a host condition."""


@dataclass(frozen=True)
class Transition:
    before: Phase
    after: Phase
    reason: str


@dataclass
class Lifecycle:
    """One turn's phase and how it got there."""

    phase: Phase = Phase.ARRIVED
    history: list[Transition] = field(default_factory=list)

    def move(self, to: Phase, reason: str) -> Transition:
        if to not in TRANSITIONS[self.phase]:
            raise IllegalTransition(f"{self.phase.value} -> {to.value} ({reason})")
        step = Transition(self.phase, to, reason)
        self.history.append(step)
        self.phase = to
        return step

    @property
    def reason(self) -> str:
        """Why it is in its phase ("" before the first move)."""
        return self.history[-1].reason if self.history else ""

    def reached(self, phase: Phase) -> bool:
        """Whether the turn was ever in `phase` (READY: a validated rewrite exists)."""
        return self.phase is phase or any(t.after is phase for t in self.history)


def durable_phase(complete: bool, marker_kinds: list[str]) -> Phase | None:
    """What the log alone says of a turn, in the lifecycle's words (`inspect`, and
    `turns.recovery`'s rule): PENDING (its pending marker and no landing after it: held,
    compressing or ready when the process ended; a start redoes it), LANDED or NO_OP (its last
    landing). None: the turn is open, or carries no marker of ours (untouched)."""
    if not complete or not marker_kinds:
        return None
    last = next((k for k in reversed(marker_kinds) if k != "pending"), None)
    if last is None:
        return Phase.PENDING
    return Phase.NO_OP if last == "no-op" else Phase.LANDED
