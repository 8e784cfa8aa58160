"""Per-session scheduling of completed turns to compress.

A turn arrives once per process (turn/end, or recovery) and is *admitted* oldest first: it is
read (a no-op needs nothing more). Each round of admissions
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

The queue keeps no turn state of its own: which turns are arrived, held, dispatched or
compressing is each turn's phase (`turns.lifecycle`), read through `TurnWork`, the narrow
interface the turn service gives it; the queue only remembers which turns it was given (once
per process) and which turns each running job took.

Session compaction coordinates through `held()` (no new job starts, no owed marker starts
landing, while it reads and replaces the surface), `markers_landed()` (the markers that
started landing before it held the queue have landed) and `settled()` (no job is compressing).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import contextmanager
from typing import Iterator, Protocol

from turn_memory.turns.lifecycle import Phase

log = logging.getLogger("turn_memory.turns")


class TurnWork(Protocol):
    """What the queue asks of one session's turns (`turns.service.SessionTurns`)."""

    def phase(self, turn: int) -> Phase | None:
        """The turn's phase; None once the service forgot it (nothing left to do)."""

    async def admit(self, turn: int) -> None:
        """Wait until the turn is read: ARRIVED -> PENDING, or a phase that needs no worker."""

    def choose(self, turns: list[int]) -> None:
        """The compression policy over the held turns (oldest first): each moves to HELD or DISPATCHED."""

    async def compress(self, turns: list[int]) -> None:
        """One job over dispatched turns: returns when each is ready (not when it landed) or stopped."""

    def stop(self, turn: int, reason: str) -> None:
        """Something crashed on the turn's way: nothing will land in this process."""

    def slots(self) -> int:
        """Jobs that may run at once (read at every start)."""

    def batch(self, turns: list[int]) -> int:
        """How many of the waiting turns (oldest first) the next job takes (at least 1)."""


async def _wait(event: asyncio.Event, timeout: float | None) -> bool:
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return False


class TurnQueue:
    def __init__(self, session_id: str, work: TurnWork):
        self.session_id = session_id
        self._work = work
        #: every turn given to the queue in this process (a turn is queued once)
        self._seen: set[int] = set()
        #: the given turns the queue still has work for (neither ready nor done)
        self._live: set[int] = set()
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
        #: owed markers land one landing point at a time, and never while a compaction holds the queue
        self.marking = asyncio.Lock()
        #: no pending marker is landing right now (`landing_marker`)
        self._markers_landed = asyncio.Event()
        self._markers_landed.set()
        self._markers = 0
        self._closed = False

    # -- arrivals ----------------------------------------------------------------------
    def enqueue(self, turn: int) -> bool:
        """Queue a turn once per process (its phase ARRIVED); returns False when it was already seen."""
        if turn in self._seen or self._closed:
            return False
        self._seen.add(turn)
        self._live.add(turn)
        self._idle.clear()
        self._wake()
        return True

    def forget(self, turn: int) -> None:
        """Allow a turn to be queued again (its job stopped; a later recovery may retry)."""
        self._seen.discard(turn)
        self._live.discard(turn)

    def _in(self, *phases: Phase) -> list[int]:
        """The live turns in one of `phases`, oldest first; turns settled or forgotten leave."""
        out = []
        for turn in sorted(self._live):
            phase = self._work.phase(turn)
            if phase is None or (phase.settled and not self.is_running(turn)):
                self._live.discard(turn)
            elif phase in phases:
                out.append(turn)
        return out

    def is_running(self, turn: int) -> bool:
        """A running job compresses the turn."""
        return any(turn in turns for turns in self._running.values())

    @property
    def pending(self) -> list[int]:
        """Turns arrived or chosen that no job has taken yet."""
        return [t for t in self._in(Phase.ARRIVED, Phase.DISPATCHED) if not self.is_running(t)]

    @property
    def held_turns(self) -> list[int]:
        return self._in(Phase.PENDING, Phase.HELD)

    @property
    def running(self) -> list[int]:
        """Every turn a running job compresses, in order."""
        return sorted(t for turns in self._running.values() for t in turns)

    def _waiting(self) -> list[int]:
        return [t for t in self._in(Phase.DISPATCHED) if not self.is_running(t)]

    # -- the scheduler -----------------------------------------------------------------
    def _wake(self) -> None:
        self._kick.set()
        if not self._closed and (self._scheduler is None or self._scheduler.done()):
            self._scheduler = asyncio.get_running_loop().create_task(self._schedule())

    async def _schedule(self) -> None:
        try:
            while True:
                self._kick.clear()
                if self._in(Phase.ARRIVED):
                    await self._admit_arrivals()
                    continue  # more may have arrived meanwhile: admit them before any job starts
                if self._waiting() and self._released.is_set():
                    self._start_jobs()
                if not self._waiting() and not self._running:
                    break
                await self._kick.wait()
        except asyncio.CancelledError:
            self._closed = True  # the engine is shutting down: never restart
            raise
        finally:
            if self._in(Phase.ARRIVED) and not self._closed:  # work arrived while exiting: keep going
                self._scheduler = asyncio.get_running_loop().create_task(self._schedule())
            elif not self._waiting() and not self._running:
                self._idle.set()

    async def _admit_arrivals(self) -> None:
        admitted = False
        while arrived := self._in(Phase.ARRIVED):
            turn = arrived[0]
            try:
                await self._work.admit(turn)
            except Exception:
                log.exception("session %s turn %d: marking the turn crashed; it stays raw", self.session_id, turn)
            if self._work.phase(turn) is Phase.ARRIVED:  # never admitted (it crashed): it must not come back
                self._work.stop(turn, "marking the turn crashed")
            admitted = admitted or self._work.phase(turn) is Phase.PENDING
        held = self._in(Phase.PENDING, Phase.HELD)
        if admitted or held:
            self._work.choose(held)

    def _start_jobs(self) -> None:
        while (waiting := self._waiting()) and len(self._running) < max(1, self._work.slots()):
            turns = waiting[:max(1, self._work.batch(waiting))]
            self._running[turns[0]] = turns
            self._quiet.clear()
            task = asyncio.get_running_loop().create_task(self._job(turns))
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)

    async def _job(self, turns: list[int]) -> None:
        try:
            await self._work.compress(turns)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s turns %s: compression job crashed; the turns stay raw", self.session_id,
                          ", ".join(map(str, turns)))
            for turn in turns:
                self._work.stop(turn, "its compression job crashed")
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
                if self._waiting() and not self._closed:
                    self._wake()

    async def released(self) -> None:
        """Wait until no compaction holds the queue."""
        while not self._released.is_set():
            await self._released.wait()

    @contextmanager
    def landing_marker(self) -> Iterator[None]:
        """Around a pending marker's landing, entered right after `released()` with no await
        between: a compaction that holds the queue from then on waits for it (`markers_landed`),
        since the marker replaces its turn's first user node."""
        self._markers += 1
        self._markers_landed.clear()
        try:
            yield
        finally:
            self._markers -= 1
            if not self._markers:
                self._markers_landed.set()

    async def markers_landed(self, timeout: float | None = None) -> bool:
        """Wait until no pending marker is landing; False on timeout."""
        return await _wait(self._markers_landed, timeout)

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
