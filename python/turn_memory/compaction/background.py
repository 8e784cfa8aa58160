"""Checkpoints folded while the agent works (docs/decisions.md#a-checkpoint-is-folded-in-the-background-when-it-pays).

At most one background fold per session: its segment workers produce the checkpoint's
content while the agent's steps go on; nothing is appended until it is done. A later
pre-step then commits it as one ordinary transaction (compaction/start, summary,
replacement, end, with no model work between them), provided its span is still on the
surface as it was read; if anything moved it, the result is dropped and nothing was
appended. While a turn's rewrite is in flight the commit waits for the pre-step where it
lands, for one cache break instead of two, but never past the next turn (`commits_now`). A step waits for a fold in flight only when the session reaches the compaction
threshold before it is ready (`CompactionService`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.scope import CompactionScope
from turn_memory.compaction.selection import Selection

log = logging.getLogger("turn_memory.compaction")


@dataclass
class BackgroundFold:
    selection: Selection
    #: the turn open when it started (for the log)
    turn: int
    task: "asyncio.Task[tx_.Summary]"
    started: float = field(default_factory=time.monotonic)
    #: the turn whose pre-step first found it ready (None: not yet)
    ready_turn: int | None = None

    @property
    def ready(self) -> bool:
        return self.task.done()


class BackgroundFolds:
    """Every session's background fold, in flight or ready to commit."""

    def __init__(self) -> None:
        self._folds: dict[str, BackgroundFold] = {}

    def get(self, session_id: str) -> BackgroundFold | None:
        return self._folds.get(session_id)

    def start(self, scope: CompactionScope, selection: Selection, turn: int) -> BackgroundFold:
        # imported on first use, as the transaction is: the engine's start-up competes with DSH's boot
        from turn_memory.compaction.fold import produce_checkpoint

        task = asyncio.get_running_loop().create_task(produce_checkpoint(scope, selection),
                                                      name=f"background fold {scope.session.id}")
        fold = self._folds[scope.session.id] = BackgroundFold(selection, turn, task)
        return fold

    def commits_now(self, session_id: str, turn: int, rewrites_in_flight: Callable[[], bool]) -> bool:
        """Whether the session's finished fold commits at this pre-step of `turn`: when no turn
        rewrite is in flight (at the pre-step where the last one landed, the next request
        re-reads what follows the checkpoint once for both), else from the turn after the one
        it was ready in."""
        fold = self._folds.get(session_id)
        if fold is None or not fold.ready:
            return False
        if fold.ready_turn is None:
            fold.ready_turn = turn
        return turn > fold.ready_turn or not rewrites_in_flight()

    def take(self, session_id: str) -> tuple[BackgroundFold, tx_.Summary] | None:
        """The session's finished fold and its checkpoint, removed; None while none is ready. A
        fold that failed is removed and logged."""
        fold = self._folds.get(session_id)
        if fold is None or not fold.ready:
            return None
        del self._folds[session_id]
        if fold.task.cancelled():
            return None
        error = fold.task.exception()
        if error is not None:
            log.warning("session %s: the background fold started in turn %d failed: %s; the surface is unchanged",
                        session_id, fold.turn, error)
            return None
        return fold, fold.task.result()

    async def wait(self, session_id: str, timeout: float) -> bool:
        """Wait (bounded) for the session's fold in flight; True when it is done."""
        fold = self._folds.get(session_id)
        if fold is None:
            return False
        done, _ = await asyncio.wait({fold.task}, timeout=timeout)
        return bool(done)

    def drop(self, session_id: str, why: str) -> None:
        fold = self._folds.pop(session_id, None)
        if fold is not None and not fold.task.done():
            log.info("session %s: background fold cancelled: %s", session_id, why)
            fold.task.cancel()

    def close(self) -> list["asyncio.Task[tx_.Summary]"]:
        tasks = [f.task for f in self._folds.values()]
        for task in tasks:
            task.cancel()
        self._folds.clear()
        return tasks
