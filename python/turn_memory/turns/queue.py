"""Per-session serial queue of completed turns to compress (design D-008).

Oldest turn first, one active job per session. The drain restarts if work arrives exactly
as it exits, so a turn can never be stranded. `barrier()` resolves when the queue is
empty and nothing runs: session compaction waits on it before it reads the surface.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

log = logging.getLogger("turn_memory.turns")

Runner = Callable[[int], Awaitable[None]]


class TurnQueue:
    def __init__(self, session_id: str, run: Runner):
        self.session_id = session_id
        self._run = run
        self._pending: list[int] = []
        self._seen: set[int] = set()
        self._drain: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.active: int | None = None

    def enqueue(self, turn: int) -> bool:
        """Queue a turn once per process; returns False when it was already seen."""
        if turn in self._seen:
            return False
        self._seen.add(turn)
        self._pending.append(turn)
        self._pending.sort()
        self._idle.clear()
        if self._drain is None or self._drain.done():
            self._drain = asyncio.get_running_loop().create_task(self._drain_all())
        return True

    def forget(self, turn: int) -> None:
        """Allow a turn to be queued again (its job gave up; a later recovery may retry)."""
        self._seen.discard(turn)

    @property
    def pending(self) -> list[int]:
        return list(self._pending)

    async def _drain_all(self) -> None:
        try:
            while self._pending:
                turn = self._pending.pop(0)
                self.active = turn
                try:
                    await self._run(turn)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("session %s turn %d: compression job crashed; the turn stays raw", self.session_id, turn)
                finally:
                    self.active = None
        finally:
            if self._pending:  # work arrived while exiting: keep going
                self._drain = asyncio.get_running_loop().create_task(self._drain_all())
            else:
                self._idle.set()

    async def barrier(self, timeout: float | None = None) -> bool:
        """Wait until no turn is queued or being compressed; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def cancel(self) -> "asyncio.Task[None] | None":
        """Cancel the drain; returns it so the caller can await its end."""
        if self._drain is not None and not self._drain.done():
            self._drain.cancel()
            return self._drain
        return None
