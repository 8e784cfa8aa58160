"""One bounded worker run, shared by turn compression and session compaction.

A job (a turn, or a batch of turns; a session compaction) owns one `WorkerRun`. The run
works toward one finish at a time (`until_finished`: a turn batch's rewrite, or one segment
of a checkpoint): workers start one after another, each a fresh spawn that starts from the
working surface; with `turns.workerStart=fork` (`RunSpec.forks`) a turn's first is a fork of
the parent agent (it has the history in context) until the session's log makes a fork's
start stall the agent (`runtime.fork_cost`). At most `maxActiveWorkers` of a session's
workers run at once (`runtime.worker_slots`). A worker progressed only when it left the
working surface in a shape never seen at a worker boundary of this finish before and not one
a finish was refused on (restating the same nodes, or repeating a refused rewrite, is no
progress). A finish is given up after
`workerAttempts` consecutive workers without progress, or `maxWorkers` workers; the whole job
is bounded by `maxJobRequests` model requests and `jobTimeoutS` seconds over all its workers,
besides each worker's own request and time bounds.

The features differ only in data (`RunSpec`: the config section that bounds them, the
workers' persona and tools, how they are named and logged) and in what they work on
(`WorkerTask`: the prompt, the working surface's shape, the tools and the finishing one).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Hashable, Literal, Protocol

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import ToolResult, WorkerRunParams, WorkerRunResult
from turn_memory.host.tools import ToolError
from turn_memory.prompts import PromptError
from turn_memory.runtime.fork_cost import STALL_BUDGET_MS
from turn_memory.runtime.mirror import MirroredSession

#: how a worker starts: a fork inherits the parent's conversation, a spawn only its prompt
Mode = Literal["fork", "spawn"]

_worker_ids = itertools.count(1)


class Bounds(Protocol):
    """The bounds a feature's config section holds (`turns.*`, `compaction.*`: the same keys)."""

    workerAttempts: int
    maxWorkers: int
    maxWorkerRequests: int
    maxJobRequests: int
    jobTimeoutS: float
    workerTimeoutS: float


@dataclass(frozen=True)
class RunSpec:
    """What differs between the features' worker runs, as data."""

    #: the config section the bounds come from: every give-up reason names its key
    section: Literal["turns", "compaction"]
    #: what a give-up reason calls the whole job ("the job's budget", "the compaction's budget")
    job_noun: str
    #: worker ids are this prefix and a process-wide number ("w12", "c3")
    worker_prefix: str
    bounds: Bounds
    #: the workers' fixed persona and tool specs (the same for every worker of the feature)
    persona: str
    tools: list[dict[str, Any]]
    #: the feature's logger: a run's lines read as the feature's own
    log: logging.Logger
    #: whether a job's first worker may fork the agent (`turns.workerStart`); a spawn's task
    #: carries the text it works on, a turn's or a segment's
    forks: bool = False
    #: whether its workers let other waiting workers take a free slot first (`runtime.worker_slots`)
    yields: bool = False


class Bound(Enum):
    """Which bound a run gave up at."""

    NO_PROGRESS = "no-progress"
    WORKER_CAP = "worker-cap"
    REQUESTS = "requests"
    DEADLINE = "deadline"
    PROMPT = "prompt"
    #: the session's allowance for workers that do not finish is spent (`turns.breaker`)
    SESSION = "session"


class Allowance(Protocol):
    """What the session lets a starting worker spend (`turns.breaker.Breaker`)."""

    def grant(self, want: int) -> int | None:
        """Requests the worker may make; 0: none; None: ask again once a running worker ended."""
        ...

    def used(self, granted: int, requests: int) -> None:
        """The worker ended after `requests` of its `granted`."""
        ...


#: the same call with the same answer this many times in one worker is no progress: it is stopped
REPEATS = 3
#: how often a worker waiting for the session's allowance asks again
ALLOWANCE_POLL_S = 0.2
#: the error code of a host that refused to start a child because all its child slots are taken
#: (DSH 0.2's subagent pool, `maxActiveSubagents`, 8 by default): the worker never ran
HOST_BUSY = "ACTIVATION_LIMIT_REACHED"
#: how often a worker the host had no slot for asks again
HOST_BUSY_POLL_S = 0.5


@dataclass(frozen=True)
class GaveUp:
    bound: Bound
    #: in plain words, naming the config key that set the bound
    reason: str

    def __str__(self) -> str:
        return self.reason


class WorkerTask(Protocol):
    """What one finish is about: a turn batch's rewrite, one segment of a checkpoint."""

    @property
    def where(self) -> str:
        """Where the run's log lines point ("session s turn 4", "session s compaction job 2 S1")."""
        ...

    @property
    def label(self) -> str:
        """The worker's label in DSH."""
        ...

    #: the tool whose accepted call finishes the task
    finish: str

    def prompt(self, mode: Mode) -> str:
        """The worker's task prompt; raises PromptError."""
        ...

    def shape(self) -> Hashable:
        """The working surface, comparable across workers (the progress check)."""
        ...

    def call(self, name: str, args: Any) -> str:
        """A worker's tool call; raises ToolError and then changes nothing."""
        ...


async def run_worker(port: HostPort, params: WorkerRunParams, timeout: float) -> tuple[WorkerRunResult, int]:
    """Run one worker through the port. Returns how it ended (a transport error, timeout or host
    refusal is an "error" stop) and the model requests it counts against its job: what it
    reports, at most its `maxRequests`, which it counts as when it does not say."""
    bound = params.maxRequests
    try:
        outcome = await port.run_worker(params, timeout)
    except Exception as exc:  # a failed worker, never a failed job
        outcome = WorkerRunResult(stop="error", detail=str(exc))
    used = outcome.requests
    return outcome, min(used, bound) if used is not None and used >= 0 else bound


def host_busy(outcome: WorkerRunResult) -> bool:
    """The host refused to start the worker for want of a free child slot: it made no request."""
    return outcome.stop == "error" and HOST_BUSY in (outcome.detail or "")


def _stop(outcome: WorkerRunResult) -> str:
    return f"{outcome.stop}: {outcome.detail}" if outcome.detail else str(outcome.stop)


@dataclass
class WorkerRun:
    """A job's workers, one finish after another, within the job's bounds."""

    session: MirroredSession
    port: HostPort
    job_id: str
    spec: RunSpec
    #: monotonic time by which every worker of the job must have ended
    deadline: float
    #: every worker the job started (ids) and how each started, in order
    workers: list[str] = field(default_factory=list)
    modes: list[Mode] = field(default_factory=list)
    #: model requests all workers made (as the shim counted them; a worker that did not say: its bound)
    requests: int = 0
    #: the worker whose tool calls are answered now (None between workers)
    current: str | None = None
    _task: WorkerTask | None = None
    _finished: bool = False
    #: working-surface shapes a finish was refused on: restating one is no progress
    _refused: set[Hashable] = field(default_factory=set)
    #: the session's allowance for its workers (None: only the job's own bounds)
    allowance: Allowance | None = None
    #: the current worker's calls and answers, counted: a worker repeating one is stopped
    _calls: dict[tuple[str, str, str], int] = field(default_factory=dict)

    @classmethod
    def start(cls, session: MirroredSession, port: HostPort, job_id: str, spec: RunSpec,
              allowance: Allowance | None = None) -> "WorkerRun":
        """The job's run, its wall-clock bound starting now."""
        return cls(session, port, job_id, spec, time.monotonic() + spec.bounds.jobTimeoutS, allowance=allowance)

    async def until_finished(self, task: WorkerTask) -> GaveUp | None:
        """Run workers on `task` until one's finish is accepted (None) or a bound is reached."""
        spec, bounds = self.spec, self.spec.bounds
        self._task, self._finished = task, False
        seen = {task.shape()}
        no_progress = started = 0
        waited_for_slot = said_full = False
        while True:
            if no_progress >= bounds.workerAttempts:
                return GaveUp(Bound.NO_PROGRESS, f"{no_progress} consecutive workers made no progress")
            if started >= bounds.maxWorkers:
                return GaveUp(Bound.WORKER_CAP, f"{started} workers, the cap ({spec.section}.maxWorkers)")
            budget = bounds.maxJobRequests - self.requests
            if budget <= 0:
                return GaveUp(Bound.REQUESTS, f"{self.requests} model requests, the {spec.job_noun}'s budget "
                                              f"({spec.section}.maxJobRequests)")
            left = self.deadline - time.monotonic()
            if left <= 0:
                return GaveUp(Bound.DEADLINE, f"{bounds.jobTimeoutS:.0f}s, the {spec.job_noun}'s wall-clock budget "
                                              f"({spec.section}.jobTimeoutS)")
            want = min(bounds.maxWorkerRequests, budget)
            granted = await self._granted(want)
            if granted <= 0:
                return GaveUp(Bound.SESSION, "the session stopped compressing: its workers keep failing "
                                             f"({spec.section}.failingRequests, {spec.section}.failingJobs)")
            # the session's share of the host's child slots (`maxActiveWorkers`): wait for one
            slots = self.session.worker_slots
            if slots.running >= slots.limit and not said_full:
                said_full = True
                spec.log.info("%s: %d workers of the session are running (maxActiveWorkers); waiting for one to end",
                              task.where, slots.running)
            if not await slots.acquire(left, spec.yields):
                if self.allowance is not None:
                    self.allowance.used(granted, 0)
                return GaveUp(Bound.DEADLINE, f"{bounds.jobTimeoutS:.0f}s, the {spec.job_noun}'s wall-clock budget "
                                              f"({spec.section}.jobTimeoutS), waiting for a free worker slot "
                                              "(maxActiveWorkers)")
            left = self.deadline - time.monotonic()
            events = len(self.session.log)
            mode: Mode = "fork" if started == 0 and spec.forks and self._may_fork(events) else "spawn"
            started += 1
            worker_id = f"{spec.worker_prefix}{next(_worker_ids)}"
            self.workers.append(worker_id)
            self.modes.append(mode)
            try:
                prompt = task.prompt(mode)
            except PromptError as exc:
                spec.log.error("%s: prompt failed: %s", task.where, exc)
                await self.session.worker_slots.release()
                return GaveUp(Bound.PROMPT, f"the prompt failed: {exc}")
            self.current, self._calls = worker_id, {}
            used = granted  # a worker whose run was cancelled counts as its whole allowance
            try:
                outcome, used = await run_worker(self.port, WorkerRunParams(
                    sessionId=self.session.id, jobId=self.job_id, workerId=worker_id, mode=mode, prompt=prompt,
                    persona=spec.persona, tools=spec.tools, maxRequests=granted,
                    label=task.label), min(bounds.workerTimeoutS, left))
                busy = not self._finished and host_busy(outcome)
                if mode == "fork":
                    self.session.forks.observed(outcome.startMs, events)
                if busy:
                    used = 0  # it never started
                elif outcome.requests is None:
                    # the shim could not say (the run timed out, the transport failed): every request
                    # but a worker's last one ends in tool calls, each of which reached this run
                    used = min(used, sum(self._calls.values()) + 1)
            finally:
                self.current = None
                await self.session.worker_slots.release()
                if self.allowance is not None:
                    self.allowance.used(granted, used)
            if busy:
                # no slot for a child (other workers, the agent's own subagents): the worker never
                # started, so it is neither an attempt nor a spent request; wait for a slot, within
                # the job's deadline, and start it again (as a fork if it was to be one)
                self.workers.pop()
                self.modes.pop()
                started -= 1
                if not waited_for_slot:
                    waited_for_slot = True
                    spec.log.info("%s: the host has no free slot for another worker (%s); waiting for one",
                                  task.where, _stop(outcome))
                await asyncio.sleep(min(HOST_BUSY_POLL_S, max(0.0, self.deadline - time.monotonic())))
                continue
            self.requests += used
            if self._finished:
                return None
            shape = task.shape()
            progressed = shape not in seen and shape not in self._refused
            seen.add(shape)
            no_progress = 0 if progressed else no_progress + 1
            spec.log.info("%s: worker %s (%s) ended without a finish (%s); %s", task.where, worker_id, mode,
                          _stop(outcome), "it made progress, continuing" if progressed else
                          f"no progress ({no_progress}/{bounds.workerAttempts})")

    def _may_fork(self, events: int) -> bool:
        forks = self.session.forks
        if forks.may_fork(events):
            return True
        if not forks.said:
            forks.said = True
            self.spec.log.info("session %s: workers now start fresh instead of as forks: a fork's start would hold "
                               "the agent about %.0f ms copying the %d-event log (over %.0f ms)", self.session.id,
                               forks.predicted_ms(events) or 0, events, STALL_BUDGET_MS)
        return False

    async def _granted(self, want: int) -> int:
        """What the session's allowance lets the next worker make, waiting (polled, within the
        job's deadline) while its running workers hold all of it."""
        if self.allowance is None:
            return want
        while (granted := self.allowance.grant(want)) is None:
            if time.monotonic() >= self.deadline:
                return 0
            await asyncio.sleep(ALLOWANCE_POLL_S)
        return granted

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        """A worker's tool call: answered only for the worker running now, until its finish."""
        task = self._task
        if task is None or worker_id != self.current or self._finished:
            return ToolResult("this worker is no longer active; stop now", is_error=True, conclude=True)
        try:
            text = task.call(name, args)
        except ToolError as exc:
            if name == task.finish:
                self._refused.add(task.shape())
            return self._unless_repeated(name, args, ToolResult(str(exc), is_error=True))
        if name == task.finish:
            self._finished = True
            return ToolResult(text, conclude=True)
        return self._unless_repeated(name, args, ToolResult(text))

    def _unless_repeated(self, name: str, args: Any, result: ToolResult) -> ToolResult:
        """`result`, unless the worker made this call and got this answer `REPEATS` times: then
        it is stopped (no progress: the next worker starts from the working surface as it is)."""
        key = (name, json.dumps(args, sort_keys=True, default=str), result.text)
        self._calls[key] = count = self._calls.get(key, 0) + 1
        if count < REPEATS:
            return result
        self.spec.log.info("%s: worker %s repeated %s with the same answer %d times; stopped", self.job_id,
                           self.current, name, count)
        # not an error: the host ends a worker's turn only on an accepted answer that concludes
        return ToolResult(f"You made this same call {count} times and got the same answer; it will not change. "
                          "This worker stops here.", conclude=True)
