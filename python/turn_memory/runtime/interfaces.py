"""What one feature offers another, as interfaces: features never import each other, and
`engine.py` hands each the other's object (the layer test enforces this)."""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import Any, AsyncContextManager, Callable, Iterable, Mapping, Protocol, Sequence

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

    #: set once the compression is ready to land, or nothing will land
    ready: asyncio.Event
    landed: asyncio.Event
    #: the worker finished a validated rewrite
    finished: bool
    landing: LandingOutcome

    def landable_in_next_turn(self) -> bool: ...

    def landable_in_step(self, turn: int, step: int) -> bool: ...


class TurnJobs(Protocol):
    """The turn service's live jobs, (session id, turn) -> job (`turns.TurnService`)."""

    @property
    def jobs(self) -> Mapping[tuple[str, int], TurnLanding]: ...


#: a finished, not yet landed turn compression: (the turn's surface positions, its nodes as (role, text))
ReadyTurn = tuple[tuple[int, ...], list[tuple[str, str]]]


class ReadyRewrites(Protocol):
    """Finished turn compressions that have not landed yet (`turns.TurnService`; read by
    `compaction`, which folds their compressed form instead of the raw turn, issue 21)."""

    def ready_within(self, session: MirroredSession, seqs: Sequence[int]) -> dict[int, ReadyTurn]: ...

    def folded(self, session: MirroredSession, turns: Iterable[int], checkpoint_seq: int) -> None: ...


#: enters the session's turn-rewrite barrier (docs/decisions.md#session-compaction-is-one-checkpoint-in-the-hosts-own-transaction): no turn rewrite starts while inside
#: (`turns.TurnService.rewrite_barrier`, wired by `engine.py`, entered by `compaction`)
Rewrites = Callable[[], AsyncContextManager[Any]]
