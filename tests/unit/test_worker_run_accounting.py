"""What a worker that did not end normally counts against its job and the session's breaker
(both found by bench/soak.py, each opening a healthy session's breaker for the rest of it):

- one the host had no child slot for (DSH 0.2's `ACTIVATION_LIMIT_REACHED`: split turns'
  workers filled its 8 slots) never ran: it is not an attempt, costs no request and waits for
  a slot; it was charged its whole allowance (24), so two refusals opened the breaker;
- one whose run timed out (the shim could not say how many requests it made) counts the
  requests its tool calls prove, plus the one in flight, not its whole allowance: three slow
  parallel workers timing out were charged 72 requests."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

from turn_memory.bridge.protocol import WorkerRunResult
from turn_memory.runtime import worker_run
from turn_memory.runtime.fork_cost import ForkCost
from turn_memory.runtime.worker_slots import WorkerSlots
from turn_memory.runtime.worker_run import RunSpec, WorkerRun
from turn_memory.turns.breaker import Breaker

BUSY = ("ACTIVATION_LIMIT_REACHED: subagent limit reached (active child limit: 8); wait for an existing child "
        "to finish or complete this work with the current agents")


class Task:
    where, label, finish = "session s turn 4", "turn 4", "finish"

    def prompt(self, mode: str) -> str:
        return f"task ({mode})"

    def shape(self) -> Any:
        return "raw"

    def call(self, name: str, args: Any) -> str:
        return "finished"


class SlowPort:
    """Each worker makes `calls` tool calls, then its run times out without a count."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.run: WorkerRun | None = None

    async def run_worker(self, params: Any, timeout: float) -> WorkerRunResult:
        assert self.run is not None
        for k in range(self.calls):
            self.run.tool_call(params.workerId, "edit", {"k": k})
        raise TimeoutError("shim did not answer worker.run within 15s")


class BusyPort:
    """The host refuses `busy` starts, then the worker finishes in one request."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.modes: list[str] = []
        self.run: WorkerRun | None = None

    async def run_worker(self, params: Any, timeout: float) -> WorkerRunResult:
        self.modes.append(params.mode)
        if self.busy:
            self.busy -= 1
            raise RuntimeError(BUSY)
        assert self.run is not None
        self.run.tool_call(params.workerId, "finish", {})
        return WorkerRunResult(stop="concluded", requests=1)


def session() -> Any:
    return SimpleNamespace(id="s", log=[], forks=ForkCost(), worker_slots=WorkerSlots())


def spec() -> RunSpec:
    bounds = SimpleNamespace(workerAttempts=3, maxWorkers=8, maxWorkerRequests=24, maxJobRequests=96,
                             jobTimeoutS=60.0, workerTimeoutS=30.0)
    return RunSpec(section="turns", job_noun="job", worker_prefix="w", bounds=bounds, persona="p", tools=[],
                   log=logging.getLogger("test"))


def test_a_worker_the_host_has_no_slot_for_waits_and_is_neither_an_attempt_nor_a_spent_request(monkeypatch):
    monkeypatch.setattr(worker_run, "HOST_BUSY_POLL_S", 0.01)
    port, breaker = BusyPort(busy=5), Breaker(max_requests=40, max_failed_jobs=3)
    run = WorkerRun.start(session(), port, "j1", spec(), allowance=breaker)  # type: ignore[arg-type]
    port.run = run
    gave_up = asyncio.run(run.until_finished(Task()))
    # five refusals (more than workerAttempts), then the worker ran: it is the job's first
    assert gave_up is None
    assert port.modes == ["spawn"] * 6 and run.modes == ["spawn"] and len(run.workers) == 1
    assert run.requests == 1 and breaker.spent == 1 and breaker.held == 0 and not breaker.open


def test_a_host_that_never_frees_a_slot_ends_the_job_at_its_deadline_having_spent_nothing(monkeypatch):
    monkeypatch.setattr(worker_run, "HOST_BUSY_POLL_S", 0.01)
    port, breaker = BusyPort(busy=10**6), Breaker(max_requests=40, max_failed_jobs=3)
    run = WorkerRun.start(session(), port, "j1", spec(), allowance=breaker)  # type: ignore[arg-type]
    run.deadline = time.monotonic() + 0.2
    gave_up = asyncio.run(run.until_finished(Task()))
    assert gave_up is not None and gave_up.bound is worker_run.Bound.DEADLINE
    assert run.requests == 0 and breaker.spent == 0 and not breaker.open and run.workers == []


def test_a_worker_whose_run_timed_out_counts_the_requests_its_calls_prove_not_its_whole_allowance():
    port, breaker = SlowPort(calls=2), Breaker(max_requests=40, max_failed_jobs=3)
    breaker.finished()  # a proven session: each worker is granted its whole 24
    run = WorkerRun.start(session(), port, "j1", spec(), allowance=breaker)  # type: ignore[arg-type]
    port.run = run
    gave_up = asyncio.run(run.until_finished(Task()))
    # three workers without progress (the shape never changes), each charged 2 calls + 1 in flight
    assert gave_up is not None and gave_up.bound is worker_run.Bound.NO_PROGRESS
    assert len(run.workers) == 3 and run.requests == 9 and breaker.spent == 9 and not breaker.open
