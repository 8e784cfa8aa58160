"""What one feature offers another, as interfaces: features never import each other, and
`engine.py` hands each the other's object (the layer test enforces this)."""

from __future__ import annotations

from enum import Enum
from typing import AsyncContextManager, Iterable, Protocol, Sequence

from turn_memory.bridge.port import HostPort
from turn_memory.config import ThoughtHintsConfig
from turn_memory.host.reasoning import Hint
from turn_memory.runtime.mirror import MirroredSession


class HintSource(Protocol):
    """Thought hints for a turn's compression (`hints.HintService`; read by `turns`)."""

    async def take(self, session: MirroredSession, turn: int, port: HostPort,
                   config: ThoughtHintsConfig) -> list[Hint]: ...

    def forget(self, session_id: str, turn: int) -> None: ...


class LandingOutcome(Enum):
    """How a turn compression's landing ended."""

    #: not landed yet (it waits for a landing point, or nothing was ever landable)
    WAITING = "waiting"
    LANDED = "landed"
    #: refused for good: the turn stays raw (and pending: a restart redoes it)
    REFUSED = "refused"
    #: a session checkpoint took the turn and folded the compressed nodes: nothing left to land
    FOLDED = "folded"


class TurnLanding(Protocol):
    """A turn compression's progress (`turns.TurnJob`; read by `continuation`)."""

    @property
    def compressed(self) -> bool:
        """A validated rewrite exists (landed or not)."""

    @property
    def done(self) -> bool:
        """Nothing is left to land."""

    @property
    def landing(self) -> LandingOutcome: ...

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait (bounded) until it is ready to land or done; False on timeout."""

    def landable_in_next_turn(self) -> bool: ...

    def landable_in_step(self, open_turn: int, step: int) -> bool: ...


class TurnJobs(Protocol):
    """The turn service's live jobs (`turns.TurnService`; read by `continuation`)."""

    def job(self, session_id: str, turn: int) -> TurnLanding | None: ...

    def deferred(self, session_id: str, turn: int) -> set[int]:
        """The turns the first pre-step of `turn` left to land at its request (0.2)."""


#: a finished, not yet landed turn compression: (the turn's surface positions, its nodes as (role, text))
ReadyTurn = tuple[tuple[int, ...], list[tuple[str, str]]]


class TurnRewrites(Protocol):
    """What session compaction needs of the turn rewrites (`turns.TurnService`; read by
    `compaction`): two writers never rewrite one span, and a compression that is finished but
    not landed is folded in its compressed form rather than wasted."""

    def rewrite_barrier(self, session: MirroredSession, open_turn: int | None,
                        timeout: float) -> AsyncContextManager[None]:
        """While inside, no queued turn starts compressing and no pending marker starts
        landing. On entry it waits (bounded) for the markers landing and the compressions in
        flight, then lands what is ready into `open_turn` (None: lands nothing)."""

    def busy_turns(self, session: MirroredSession) -> set[int]:
        """Turns whose own compression may still land (marked, compressing or ready): a
        checkpoint folded in the background stops before them."""

    def ready_within(self, session: MirroredSession, seqs: Sequence[int]) -> dict[int, ReadyTurn]:
        """Finished compressions not landed yet whose whole turn lies in `seqs`."""

    def folded(self, session: MirroredSession, turns: Iterable[int], checkpoint_seq: int) -> None:
        """A checkpoint folded these turns' compressed form: nothing of theirs lands any more."""
