"""A session's workers share its part of the host's child slots (`maxActiveWorkers`): DSH 0.2
starts ours and the agent's own subagents from one pool of 8, and refuses the agent's once
ours fill it."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from turn_memory.bridge.protocol import WorkerRunResult
from turn_memory.config import EngineConfig
from turn_memory.runtime.worker_run import Bound, WorkerRun
from turn_memory.runtime.worker_slots import WorkerSlots

from test_worker_run_accounting import Task, session, spec


class ConcurrentPort:
    """Each worker takes `seconds`, then finishes; counts how many ran at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.running = self.peak = 0
        self.runs: dict[str, WorkerRun] = {}

    async def run_worker(self, params: Any, timeout: float) -> WorkerRunResult:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.running -= 1
        self.runs[params.jobId].tool_call(params.workerId, "finish", {})
        return WorkerRunResult(stop="concluded", requests=1)


def test_a_sessions_workers_never_run_more_at_once_than_its_share_of_the_hosts_slots(caplog):
    assert EngineConfig().maxActiveWorkers == 6  # of DSH 0.2's default pool of 8: two stay the agent's
    shared = session()
    shared.worker_slots.limit = 2
    port = ConcurrentPort(0.02)

    async def five_jobs() -> list[Any]:
        for k in range(5):
            port.runs[f"j{k}"] = WorkerRun.start(shared, port, f"j{k}", spec())  # type: ignore[arg-type]
        return await asyncio.gather(*(run.until_finished(Task()) for run in port.runs.values()))

    with caplog.at_level(logging.INFO, logger="test"):
        assert asyncio.run(five_jobs()) == [None] * 5  # every job finished, two at a time
    assert port.peak == 2 and shared.worker_slots.running == 0
    waited = [r.getMessage() for r in caplog.records if "maxActiveWorkers" in r.getMessage()]
    assert waited == ["session s turn 4: 2 workers of the session are running (maxActiveWorkers); waiting for one "
                      "to end"] * 3


def test_a_job_that_waits_past_its_deadline_for_a_slot_gives_up_and_starts_no_worker():
    shared = session()
    shared.worker_slots.limit = 1
    port = ConcurrentPort(0.5)
    short = replace(spec(), bounds=SimpleNamespace(**{**vars(spec().bounds), "jobTimeoutS": 0.1}))

    async def two_jobs() -> list[Any]:
        port.runs["long"] = WorkerRun.start(shared, port, "long", spec())  # type: ignore[arg-type]
        port.runs["short"] = WorkerRun.start(shared, port, "short", short)  # type: ignore[arg-type]
        return await asyncio.gather(*(run.until_finished(Task()) for run in port.runs.values()))

    finished, gave_up = asyncio.run(two_jobs())
    assert finished is None and gave_up.bound is Bound.DEADLINE
    assert gave_up.reason == ("0s, the job's wall-clock budget (turns.jobTimeoutS), waiting for a free worker slot "
                              "(maxActiveWorkers)")
    assert port.runs["short"].workers == [] and port.peak == 1 and shared.worker_slots.running == 0


def test_a_turns_worker_takes_the_next_free_slot_before_a_checkpoints_worker_that_waited_longer():
    """A turn rewrite is due at the next turns; a checkpoint only once the window fills."""
    slots = WorkerSlots(limit=1)
    order: list[str] = []

    async def take(name: str, yields: bool, timeout: float = 1.0) -> None:
        if await slots.acquire(timeout, yields):
            order.append(name)
            await asyncio.sleep(0.01)
            await slots.release()
        else:
            order.append(f"{name} gave up")

    async def scenario() -> None:
        await slots.acquire(1.0)  # a worker runs
        fold = asyncio.create_task(take("fold", yields=True))
        await asyncio.sleep(0.01)
        turn = asyncio.create_task(take("turn", yields=False))
        short = asyncio.create_task(take("late turn", yields=False, timeout=0.01))
        await asyncio.sleep(0.05)
        assert order == ["late turn gave up"]  # no slot came free in its time; the fold still waits
        await slots.release()
        await asyncio.gather(fold, turn, short)

    asyncio.run(asyncio.wait_for(scenario(), 5))
    assert order == ["late turn gave up", "turn", "fold"] and slots.running == 0


def test_a_checkpoints_worker_takes_a_free_slot_when_no_turn_worker_waits():
    slots = WorkerSlots(limit=2)

    async def scenario() -> bool:
        return await slots.acquire(0.0, yields=True)

    assert asyncio.run(scenario()) and slots.running == 1
