"""Per-session serial queue of completed turns to compress (design D-005, D-008).

Oldest turn first, one job compressing per session. A job holds the queue only while it
compresses: once it is ready (its landing validated and waiting for a pre-step, or nothing
to land) the next turn's worker may start, so a backlog clears at worker speed while the
landings themselves stay in turn order (the turn service lands them). The drain restarts if
work arrives exactly as it exits, so a turn can never be stranded.

Session compaction coordinates through `held()` (no new job starts while it reads and
replaces the surface) and `settled()` (the job in flight, if any, is ready).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import contextmanager
from typing import Awaitable, Callable, Iterator

log = logging.getLogger("turn_memory.turns")

#: runs one turn's job until it is ready (not until it has landed)
Runner = Callable[[int], Awaitable[None]]


async def _wait(event: asyncio.Event, timeout: float | None) -> bool:
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return False


class TurnQueue:
    def __init__(self, session_id: str, run: Runner):
        self.session_id = session_id
        self._run = run
        self._pending: list[int] = []
        self._seen: set[int] = set()
        self._drain: asyncio.Task[None] | None = None
        #: nothing queued and nothing compressing
        self._idle = asyncio.Event()
        self._idle.set()
        #: no job compressing right now (between jobs, or idle)
        self._quiet = asyncio.Event()
        self._quiet.set()
        #: no compaction holds the queue
        self._released = asyncio.Event()
        self._released.set()
        self._holds = 0
        #: pending markers land one at a time, and never while a compaction holds the queue
        self.marking = asyncio.Lock()
        self._closed = False
        #: the turn whose job is compressing (the rewrite in flight), if any
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

    def claim_following(self, turn: int, limit: int) -> list[int]:
        """Take up to `limit` queued turns directly after `turn` (turn+1, turn+2, …) out of the
        queue: the job of `turn`, starting now, compresses them with its one worker."""
        claimed: list[int] = []
        while len(claimed) < limit and self._pending and self._pending[0] == (claimed[-1] if claimed else turn) + 1:
            claimed.append(self._pending.pop(0))
        return claimed

    async def _drain_all(self) -> None:
        try:
            while self._pending:
                await self._released.wait()  # a compaction is reading the surface: start nothing
                turn = self._pending.pop(0)
                self.active = turn
                self._quiet.clear()
                try:
                    await self._run(turn)
                except Exception:
                    log.exception("session %s turn %d: compression job crashed; the turn stays raw", self.session_id, turn)
                finally:
                    self.active = None
                    self._quiet.set()
        except asyncio.CancelledError:
            self._closed = True  # the engine is shutting down: never restart
            raise
        finally:
            if self._pending and not self._closed:  # work arrived while exiting: keep going
                self._drain = asyncio.get_running_loop().create_task(self._drain_all())
            else:
                self._idle.set()

    @contextmanager
    def held(self) -> Iterator[None]:
        """While inside, no queued job starts (the one in flight, if any, goes on)."""
        self._holds += 1
        self._released.clear()
        try:
            yield
        finally:
            self._holds -= 1
            if not self._holds:
                self._released.set()

    async def released(self) -> None:
        """Wait until no compaction holds the queue."""
        while not self._released.is_set():
            await self._released.wait()

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until no job is compressing (queued ones may remain); False on timeout."""
        return await _wait(self._quiet, timeout)

    async def drained(self, timeout: float | None = None) -> bool:
        """Wait until no turn is queued or compressing; False on timeout."""
        return await _wait(self._idle, timeout)

    def cancel(self) -> "asyncio.Task[None] | None":
        """Cancel the drain for good; returns it so the caller can await its end."""
        self._closed = True
        if self._drain is not None and not self._drain.done():
            self._drain.cancel()
            return self._drain
        return None
