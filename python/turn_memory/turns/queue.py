"""Per-session scheduling of completed turns to compress.

A turn arrives once per process (turn/end, or recovery) and is *admitted* oldest first: its
pending marker lands (or its no-op, then it needs nothing more). Each round of admissions
asks the compression policy (`choose`) whether the turns held so far, with the new ones, are
worth a worker now; the chosen turns wait for a worker slot, the rest stay held (raw,
pending) for the next round. Up to `slots` jobs run at once: workers for different turns in
parallel, each job compressing the next batch of waiting turns with one worker. Turns that
arrive together (fast turns, a restart) are all admitted before any job starts, so a
backlog becomes batches.

A job holds its slot only while it compresses: once it is ready (a validated landing waits
for a pre-step, or nothing to land) the slot is free. Landings themselves stay serial and
in turn order: the turn service lands a ready turn only after every earlier dispatched one
(held turns do not block them). The scheduler restarts if work arrives exactly as it exits,
so a turn can never be stranded.

Session compaction coordinates through `held()` (no new job starts while it reads and
replaces the surface) and `settled()` (no job is compressing).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from contextlib import contextmanager
from typing import Awaitable, Callable, Iterator

log = logging.getLogger("turn_memory.turns")

#: marks an arrived turn (pending or no-op); True when it still needs a worker
Admit = Callable[[int], Awaitable[bool]]
#: (held turns, oldest first) -> the turns to compress now
Choose = Callable[[list[int]], list[int]]
#: compresses a batch of turns with one worker, until each is ready (not until it has landed)
Runner = Callable[[list[int]], Awaitable[None]]
#: (slots, batches): jobs that may run at once, and how waiting turns split into jobs (turns per
#: job, oldest first; read at every start)
Limits = Callable[[], tuple[int, Callable[[list[int]], list[int]]]]


async def _wait(event: asyncio.Event, timeout: float | None) -> bool:
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return False


class TurnQueue:
    def __init__(self, session_id: str, admit: Admit, choose: Choose, run: Runner, limits: Limits):
        self.session_id = session_id
        self._admit, self._choose, self._run, self._limits = admit, choose, run, limits
        self._seen: set[int] = set()
        #: arrived, not admitted yet / admitted, not worth a worker yet / chosen, waiting for a slot
        self._arrived: list[int] = []
        self._held: list[int] = []
        self._waiting: list[int] = []
        #: first turn of a running job -> every turn it compresses
        self._running: dict[int, list[int]] = {}
        self._jobs: set[asyncio.Task[None]] = set()
        self._scheduler: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        #: nothing arrived, waiting or compressing (held turns wait for later turns, not for time)
        self._idle = asyncio.Event()
        self._idle.set()
        #: no job compressing right now
        self._quiet = asyncio.Event()
        self._quiet.set()
        #: no compaction holds the queue
        self._released = asyncio.Event()
        self._released.set()
        self._holds = 0
        #: pending markers land one at a time, and never while a compaction holds the queue
        self.marking = asyncio.Lock()
        self._closed = False

    # -- arrivals ----------------------------------------------------------------------
    def enqueue(self, turn: int) -> bool:
        """Queue a turn once per process; returns False when it was already seen."""
        if turn in self._seen or self._closed:
            return False
        self._seen.add(turn)
        bisect.insort(self._arrived, turn)
        self._idle.clear()
        self._wake()
        return True

    def forget(self, turn: int) -> None:
        """Allow a turn to be queued again (its job gave up; a later recovery may retry)."""
        self._seen.discard(turn)

    def drop(self, turn: int) -> None:
        """A held turn leaves the queue for good in this process (a checkpoint took it)."""
        if turn in self._held:
            self._held.remove(turn)

    @property
    def pending(self) -> list[int]:
        """Turns arrived or chosen that no job has taken yet."""
        return sorted(self._arrived + self._waiting)

    @property
    def held_turns(self) -> list[int]:
        return list(self._held)

    @property
    def running(self) -> list[int]:
        """Every turn a running job compresses, in order."""
        return sorted(t for turns in self._running.values() for t in turns)

    # -- the scheduler -----------------------------------------------------------------
    def _wake(self) -> None:
        self._kick.set()
        if not self._closed and (self._scheduler is None or self._scheduler.done()):
            self._scheduler = asyncio.get_running_loop().create_task(self._schedule())

    async def _schedule(self) -> None:
        try:
            while True:
                self._kick.clear()
                if self._arrived:
                    await self._admit_arrivals()
                    continue  # more may have arrived meanwhile: admit them before any job starts
                if self._waiting and self._released.is_set():
                    self._start_jobs()
                if not self._arrived and not self._waiting and not self._running:
                    break
                await self._kick.wait()
        except asyncio.CancelledError:
            self._closed = True  # the engine is shutting down: never restart
            raise
        finally:
            if self._arrived and not self._closed:  # work arrived while exiting: keep going
                self._scheduler = asyncio.get_running_loop().create_task(self._schedule())
            elif not self._waiting and not self._running:
                self._idle.set()

    async def _admit_arrivals(self) -> None:
        admitted = False
        while self._arrived:
            turn = self._arrived.pop(0)
            try:
                keep = await self._admit(turn)
            except Exception:
                log.exception("session %s turn %d: marking the turn crashed; it stays raw", self.session_id, turn)
                keep = False
            if keep:
                bisect.insort(self._held, turn)
                admitted = True
        if admitted or self._held:
            try:
                chosen = set(self._choose(list(self._held)))
            except Exception:
                log.exception("session %s: the compression policy crashed; every held turn gets a worker",
                              self.session_id)
                chosen = set(self._held)
            for turn in [t for t in self._held if t in chosen]:
                self._held.remove(turn)
                bisect.insort(self._waiting, turn)

    def _start_jobs(self) -> None:
        slots, batches = self._limits()
        while self._waiting and len(self._running) < max(1, slots):
            turns = self._waiting[:max(1, batches(list(self._waiting))[0])]
            del self._waiting[:len(turns)]
            self._running[turns[0]] = turns
            self._quiet.clear()
            task = asyncio.get_running_loop().create_task(self._job(turns))
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)

    async def _job(self, turns: list[int]) -> None:
        try:
            await self._run(turns)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s turns %s: compression job crashed; the turns stay raw", self.session_id,
                          ", ".join(map(str, turns)))
        finally:
            self._running.pop(turns[0], None)
            if not self._running:
                self._quiet.set()
            if not self._closed:
                self._wake()
            elif not self._running:
                self._idle.set()

    # -- coordination with session compaction -------------------------------------------
    @contextmanager
    def held(self) -> Iterator[None]:
        """While inside, no job starts (the ones in flight go on)."""
        self._holds += 1
        self._released.clear()
        try:
            yield
        finally:
            self._holds -= 1
            if not self._holds:
                self._released.set()
                if self._waiting and not self._closed:
                    self._wake()

    async def released(self) -> None:
        """Wait until no compaction holds the queue."""
        while not self._released.is_set():
            await self._released.wait()

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait until no job is compressing (queued or held turns may remain); False on timeout."""
        return await _wait(self._quiet, timeout)

    async def drained(self, timeout: float | None = None) -> bool:
        """Wait until no turn is arrived, waiting or compressing (held ones may remain); False on timeout."""
        return await _wait(self._idle, timeout)

    def cancel(self) -> list["asyncio.Task[None]"]:
        """Cancel the scheduler and every running job for good; returns them so the caller can await their end."""
        self._closed = True
        tasks = [t for t in (self._scheduler, *self._jobs) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        return tasks
