"""Issue 21: workers for different turns run at the same time, while landings stay serial and in
turn order whatever order the workers finish in; turns that arrive while every slot is busy
become one batch. The queue alone (turns/queue.py), then the engine's pre-step over it."""

from __future__ import annotations

import asyncio

from test_rewrite_barrier import OPEN, HostEngine, Workers, backlog_host, end_turns_and_open_the_next, marks
from turn_memory.config import EngineConfig
from turn_memory.host.surface import SessionLog
from turn_memory.turns.lifecycle import Lifecycle, Phase
from turn_memory.turns.queue import TurnQueue


class Jobs:
    """Plays the queue's `TurnWork`: every admitted turn is chosen; each job waits for its gate."""

    def __init__(self, slots: int, batch: int, held: frozenset[int] = frozenset()) -> None:
        self.gates: dict[int, asyncio.Event] = {}
        self.started: list[list[int]] = []
        self.finished: list[list[int]] = []
        self.running_at_start: list[int] = []
        self.held = set(held)
        self.lifecycles: dict[int, Lifecycle] = {}
        self._slots, self._batch = slots, batch
        self.queue = TurnQueue("s", self)

    def enqueue(self, turn: int) -> None:
        self.lifecycles[turn] = Lifecycle()
        self.queue.enqueue(turn)

    def phase(self, turn: int) -> Phase | None:
        return self.lifecycles[turn].phase if turn in self.lifecycles else None

    async def admit(self, turn: int) -> None:
        self.lifecycles[turn].move(Phase.PENDING, "marked")

    def choose(self, turns: list[int]) -> None:
        for turn in turns:
            lifecycle = self.lifecycles[turn]
            if turn not in self.held:
                lifecycle.move(Phase.DISPATCHED, "chosen")
            elif lifecycle.phase is Phase.PENDING:
                lifecycle.move(Phase.HELD, "held")

    async def compress(self, turns: list[int]) -> None:
        for turn in turns:
            self.lifecycles[turn].move(Phase.COMPRESSING, "started")
        self.started.append(turns)
        self.running_at_start.append(len(self.queue.running))
        gate = self.gates.setdefault(turns[0], asyncio.Event())
        await gate.wait()
        for turn in turns:
            self.lifecycles[turn].move(Phase.READY, "finished")
        self.finished.append(turns)

    def stop(self, turn: int, reason: str) -> None:
        self.lifecycles[turn].move(Phase.STOPPED, reason)

    def slots(self) -> int:
        return self._slots

    def batch(self, turns: list[int]) -> int:
        return min(self._batch, len(turns))

    def release(self, turn: int) -> None:
        self.gates.setdefault(turn, asyncio.Event()).set()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_up_to_the_slots_jobs_run_at_once_and_a_freed_slot_takes_the_next_turn():
    async def scenario():
        jobs = Jobs(slots=2, batch=1)
        for turn in (1, 2, 3):
            jobs.enqueue(turn)
            await asyncio.sleep(0.01)  # one turn ends at a time
        assert jobs.started == [[1], [2]] and jobs.queue.running == [1, 2] and jobs.queue.pending == [3]
        jobs.release(2)  # the later worker finishes first: its slot goes to turn 3
        await asyncio.sleep(0.01)
        assert jobs.started == [[1], [2], [3]] and jobs.queue.running == [1, 3]
        assert not await jobs.queue.drained(0.05)
        jobs.release(1)
        jobs.release(3)
        assert await jobs.queue.drained(1)
        assert jobs.finished == [[2], [1], [3]] and max(jobs.running_at_start) == 2

    run(scenario())


def test_turns_that_end_while_every_slot_is_busy_become_one_batch():
    async def scenario():
        jobs = Jobs(slots=1, batch=3)
        jobs.enqueue(1)
        await asyncio.sleep(0.01)
        for turn in (2, 3, 4, 5):
            jobs.enqueue(turn)
        await asyncio.sleep(0.01)
        assert jobs.started == [[1]] and jobs.queue.pending == [2, 3, 4, 5]
        jobs.release(1)
        await asyncio.sleep(0.01)
        jobs.release(2)
        await asyncio.sleep(0.01)
        jobs.release(5)
        assert await jobs.queue.drained(1)
        assert jobs.started == [[1], [2, 3, 4], [5]]

    run(scenario())


def test_held_turns_wait_for_the_next_choice_and_do_not_keep_the_queue_busy():
    async def scenario():
        jobs = Jobs(slots=2, batch=4, held={1, 2})
        jobs.enqueue(1)
        jobs.enqueue(2)
        assert await jobs.queue.drained(1)  # held turns are no work in flight
        assert jobs.started == [] and jobs.queue.held_turns == [1, 2]
        jobs.held.clear()  # the next turn makes them worth a worker: one batch, oldest first
        jobs.enqueue(3)
        await asyncio.sleep(0.01)
        assert jobs.started == [[1, 2, 3]] and jobs.queue.held_turns == []
        jobs.release(1)
        assert await jobs.queue.drained(1)

    run(scenario())


def test_a_compaction_holding_the_queue_starts_no_job_until_it_lets_go():
    async def scenario():
        jobs = Jobs(slots=2, batch=1)
        with jobs.queue.held():
            jobs.enqueue(1)
            await asyncio.sleep(0.01)
            assert jobs.started == [] and jobs.queue.pending == [1]
        await asyncio.sleep(0.01)
        assert jobs.started == [[1]]
        jobs.release(1)
        assert await jobs.queue.drained(1)

    run(scenario())


def test_workers_run_in_parallel_and_landings_stay_serial_and_in_turn_order():
    """Three turns compress at once; the workers finish 3, then 2, then 1; nothing lands past a
    turn that is not ready, and then one pre-step lands all three, oldest first."""
    host = backlog_host(pressure=False)
    cfg = EngineConfig.model_validate({"turns": {"minTurnTokens": 0, "batchTurns": 1, "concurrentJobs": 3, "maxParts": 1}})
    engine = HostEngine(host, cfg)
    workers = Workers(host, engine, gated={1, 2, 3})

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        await asyncio.sleep(0.05)
        assert workers.turns_started() == ["turn 1", "turn 2", "turn 3"]  # all three in flight at once
        for turn, step in ((3, 1), (2, 2)):
            workers.gates[turn].set()
            await asyncio.sleep(0.05)
            assert engine.turns.job(host.session.id, turn).phase is Phase.READY
            await engine.pre_step(OPEN, step)
            assert marks(host, "compression") == []  # turn 1 is not ready: nothing may land past it
        workers.gates[1].set()
        assert await engine.turns.drained(host.session.id, 5)
        await engine.pre_step(OPEN, 3)

    run(scenario())
    landed = marks(host, "compression")
    assert [turn for turn, _ in landed] == [1, 2, 3]  # one pre-step, oldest first
    assert [seq for _, seq in landed] == sorted(seq for _, seq in landed)
    assert SessionLog(host.dialect, host.log.events).reload_problems == []
