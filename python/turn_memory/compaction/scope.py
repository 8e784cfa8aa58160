"""What one compaction runs with, as one object: the session, the way to the host, the config,
DSH's agent options, the worker registry and the turn rewrites. The engine builds it once per
request and hands it down, instead of the same six parameters through every call."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import AsyncContextManager, Iterable, Sequence

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions
from turn_memory.config import EngineConfig
from turn_memory.runtime.interfaces import ReadyTurn, TurnRewrites
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import WorkerRegistry


@dataclass(frozen=True)
class CompactionScope:
    session: MirroredSession
    port: HostPort
    config: EngineConfig
    agent: AgentOptions
    workers: WorkerRegistry
    #: the turn service (None: turn compression is off, or a test without it)
    turns: TurnRewrites | None = None

    def barrier(self, land_into: int | None) -> AsyncContextManager[None]:
        """The turn-rewrite barrier (docs/decisions.md#session-compaction-is-one-checkpoint-in-the-hosts-own-transaction):
        no turn rewrite starts while inside; on entry the ready ones land into `land_into`
        (None: nothing lands, the range must not move)."""
        if self.turns is None:
            return nullcontext()
        return self.turns.rewrite_barrier(self.session, land_into, self.config.compaction.rewriteWaitS)

    def busy_turns(self) -> set[int]:
        return self.turns.busy_turns(self.session) if self.turns is not None else set()

    def ready_within(self, seqs: Sequence[int]) -> dict[int, ReadyTurn]:
        return self.turns.ready_within(self.session, seqs) if self.turns is not None else {}

    def folded(self, turns: Iterable[int], checkpoint_seq: int) -> None:
        if self.turns is not None:
            self.turns.folded(self.session, turns, checkpoint_seq)
