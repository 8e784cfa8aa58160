"""One completed turn's compression: mark pending, prepare, run workers, land (D-007, D-008, D-015).

The pending marker lands at `turn/end` (`mark`, started by the turn service as soon as the
turn is queued), not when the job's turn comes: a turn that ends while an earlier one
compresses is recoverable at once. `run()` (the queue calls it, oldest turn first) then
compresses and ends once the landing is ready; the turn service lands it at a later turn's
landing point. The session is only touched twice: the pending marker, and that landing.

Workers: the first is a one-shot fork of the parent (it inherits the turn in context); any
end without an accepted finish disposes it and continues with a fresh spawn that starts
from the editor's current catalog. The budget counts consecutive workers without progress:
a worker progressed only when it left the working surface in a shape never seen at a
worker boundary before and not one a finish was refused on (restating the same nodes, or
repeating a refused rewrite, is no progress). The whole job is bounded too, besides each
worker's own request and time bounds: `turns.maxJobRequests` model requests and
`turns.jobTimeoutS` seconds, all workers together. One log line reports each job: its
workers, model requests, time and outcome.

A finished job's validated working surface is kept in a sidecar file (`turns.results`) until
it lands, so a restart lands it without running workers again.

A turn no worker may rewrite (the model said nothing in it) gets the no-op marker at turn/end
instead, and no job work; every other turn is marked pending and then held until the
compression policy dispatches it (`turns.eligibility`, scheduled by `turns.queue`). A job may
carry a batch: turns dispatched together (held small turns with a later one, or turns that
waited for a worker slot). Its workers edit every turn that needs one, each in its own
editor (ids prefixed with the turn); each turn keeps its own pending marker, sidecar,
landing and report line, exactly as if it had had its own worker. A turn restored from its
sidecar never joins the batch's worker. The job's bounds and progress are the worker run's
as a whole: requests and time over all its workers, and a worker progressed only when the
combined shape of all the batch's editors is new and not one a finish was refused on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import ToolResult
from turn_memory.config import TurnConfig
from turn_memory.host.markers import marker_of
from turn_memory.host.reasoning import Hint
from turn_memory.host.surface import SessionLog
from turn_memory.prompts import PromptError
from turn_memory.runtime.land import LandingError, LogKeptMoving, Plan, land, validate
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import run_worker
from turn_memory.turns import eligibility, landing as landing_, prompt as worker_prompt
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.nodes import OriginalNode, original_nodes
from turn_memory.turns.recovery import turn_nodes
from turn_memory.turns.results import ResultStore, make_record, stale_reason
from turn_memory.turns.tools import FINISH, BatchTools, ToolError, WorkerTools

log = logging.getLogger("turn_memory.turns")
_worker_ids = itertools.count(1)


class _Ahead:
    """A log as it will be once `count` more non-surface events are appended (for planning
    ahead of them: only the length differs)."""

    def __init__(self, log_: SessionLog, count: int) -> None:
        self._log = log_
        self._count = count

    def __len__(self) -> int:
        return len(self._log) + self._count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


@dataclass
class TurnJob:
    session: MirroredSession
    port: HostPort
    config: TurnConfig
    turn: int
    job_id: str = ""
    #: where a finished compression waits to land across restarts (None: nowhere)
    results: ResultStore | None = None
    editor: TurnNodeEditor | None = None
    positions: list[int] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    worker_modes: list[str] = field(default_factory=list)
    current_worker: str | None = None
    finished: bool = False
    #: model requests all workers made (as the shim counted them; a worker that did not say: its bound)
    requests: int = 0
    #: why the job stopped compressing ("" while it runs)
    outcome: str = ""
    #: the landing's end: "landed", "refused: …", "" while it waits
    landing: str = ""
    #: set when the job stops compressing: a validated landing waits for a pre-step, or
    #: there is nothing left to land (then `landed` is set too)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    landed: asyncio.Event = field(default_factory=asyncio.Event)
    #: takes the turn's thought hints (bounded wait); None: hints are off
    take_hints: Callable[[], Awaitable[list[Hint]]] | None = None
    #: navigation for every worker's prompt (D-014); empty when none came back in time
    hints: list[Hint] = field(default_factory=list)
    #: the pending-marker task started when the turn was queued
    marking: "asyncio.Task[None] | None" = None
    #: DSH's token estimate of the turn's surface nodes when it was marked
    tokens: int = 0
    #: pending and waiting for the policy to find it worth a worker (it blocks no landing)
    held: bool = False
    #: set once the policy decided about the turn (held or dispatched), or it stopped
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    _tools: WorkerTools | BatchTools | None = None
    #: the turns this job's workers compress: its own and any batched ones that need one
    _todo: list["TurnJob"] = field(default_factory=list)
    #: the turns of the batch this job's turn was compressed with (empty: on its own)
    batch_turns: list[int] = field(default_factory=list)
    #: a worker of this job's run had its finish accepted
    _worker_finished: bool = False
    #: (combined) working-surface shapes a finish was refused on: restating one is no progress
    _refused: set[Any] = field(default_factory=set)
    #: the worker run this job leads (for the turns in `_todo`), kept apart from this job's own
    #: workers: a leader restored from its sidecar lands with its own provenance while it runs
    _run_workers: list[str] = field(default_factory=list)
    _run_modes: list[str] = field(default_factory=list)
    _run_requests: int = 0
    _started: float = 0.0

    def __post_init__(self) -> None:
        self.job_id = self.job_id or f"{self.session.id}#turn{self.turn}"

    @property
    def done(self) -> bool:
        return self.landed.is_set()

    @property
    def where(self) -> str:
        return f"session {self.session.id} turn {self.turn}"

    def _stop(self, outcome: str) -> None:
        """Nothing will land (skipped, no-op landed at once, gave up)."""
        self.outcome = self.outcome or outcome
        self.landed.set()
        self.ready.set()
        self.decided.set()

    async def ready_unless_held(self, timeout: float) -> bool:
        """Wait (bounded) until the compression is ready; False at once when the policy holds
        the turn (no worker is coming for it now), or after `timeout`."""
        deadline = time.monotonic() + timeout
        try:
            await asyncio.wait_for(self.decided.wait(), timeout)
            if self.held:
                return False
            await asyncio.wait_for(self.ready.wait(), max(0.0, deadline - time.monotonic()))
            return True
        except asyncio.TimeoutError:
            return False

    # -- turn/end: the pending marker --------------------------------------------------
    async def mark(self) -> None:
        """Mark the turn pending now (or land its no-op), before it waits for its worker turn."""
        try:
            await self._mark()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: marking the turn failed; it stays raw", self.where)
            self._stop("failed to mark")

    async def _mark(self) -> None:
        positions = self._prepare()
        if positions is None:
            self._stop("skipped")
            return
        originals = original_nodes(self.session.log, positions)
        self.tokens = self.session.log.tokens(positions)
        problem = eligibility.transcript_problem(originals)
        if problem is not None:
            # no worker could rewrite it into a user -> assistant turn without inventing one
            # (D-008): recorded "seen" with a content-identical marker, the model's requests
            # do not change at all
            log.info("%s: %s; no-op marker, no worker", self.where, problem)
            try:
                await land(self.session, self.port, lambda log_: landing_.noop_plan(log_, positions[0], self._context(None, 0)))
                self.landing = "landed"
            except LandingError as exc:
                log.warning("%s: marker landing refused: %s", self.where, exc)
                self.landing = f"refused: {exc}"
            self._stop(f"no-op ({problem})")
            return
        if marker_of(self.session.log.events[positions[0]]) is None:
            try:
                await land(self.session, self.port, lambda log_: landing_.pending_plan(log_, positions[0], self.turn))
            except LandingError as exc:  # the compression can still land; a restart just will not know
                log.warning("%s: pending marker refused (%s); compressing anyway", self.where, exc)

    # -- the whole job -----------------------------------------------------------------
    async def run(self, batch: Sequence["TurnJob"] = ()) -> None:
        """Compress this turn and the `batch` of later queued turns (the turn service claimed
        them off the queue) with one worker run.

        The workers run on behalf of every turn that needs one (this job's own turn may be
        a no-op, skipped or restored); each turn keeps its own editor, pending marker,
        sidecar, landing and report line."""
        group = [self, *batch]
        started = time.monotonic()
        for job in group:
            job._started = started
        try:
            for job in group:  # the pending markers (or no-ops), started at turn/end
                if job.marking is not None:
                    await job.marking
                else:
                    await job.mark()
            await self._run(group)
        finally:
            for job in group:
                if not job.ready.is_set():  # gave up, or crashed: nothing will land
                    job._stop("stopped")
                job._report()

    def _report(self) -> None:
        modes = f" ({', '.join(self.worker_modes)})" if self.worker_modes else ""
        batch = (f" (one worker run for turns {', '.join(map(str, self.batch_turns))}: workers, requests and time "
                 "are the batch's)" if len(self.batch_turns) > 1 else "")
        log.info("%s: job %s: %d worker(s)%s, %d model request(s), %.1fs%s", self.where, self.outcome,
                 len(self.workers), modes, self.requests, time.monotonic() - self._started, batch)

    async def _run(self, group: list["TurnJob"]) -> None:
        todo = [job for job in group if not job.ready.is_set() and await job._setup()]
        if not todo:
            return
        if len(todo) > 1:
            # one worker, several turns: ids carry their turn so no call can mix them up
            for job in todo:
                job.editor = TurnNodeEditor(job.turn, job.editor.originals, id_prefix=f"t{job.turn}.")  # type: ignore[union-attr]
            self._tools = BatchTools({job.turn: WorkerTools(job.editor, self.config.readLimitChars) for job in todo})  # type: ignore[arg-type]
        else:
            self._tools = WorkerTools(todo[0].editor, self.config.readLimitChars)  # type: ignore[arg-type]
        self._todo = todo
        turns = [job.turn for job in todo]
        try:
            why = await self._work()
        finally:
            # the worker run was on behalf of `todo`: its workers and requests are theirs (this
            # job's own turn, when it needed none, ran no worker)
            workers, modes, requests = self._run_workers, self._run_modes, self._run_requests
            for job in todo:
                job.workers, job.worker_modes, job.requests = list(workers), list(modes), requests
                job.batch_turns = turns if len(todo) > 1 else []
        if why is not None:
            for job in todo:
                job.outcome = f"gave up: {why}; the turn stays raw (pending, retried on the next start)"
                log.warning("%s: %s", job.where, job.outcome)
                job._stop(job.outcome)
            return
        for job in todo:
            job.finished = True
            log.info("%s: finished by worker %d (%s)%s; %d -> %d nodes; landing at the next pre-step", job.where,
                     len(workers), ", ".join(modes),
                     f" with turns {', '.join(map(str, turns))}" if len(todo) > 1 else "",
                     len(job.positions), len(job.editor.nodes))  # type: ignore[union-attr]
            job.outcome = "finished; landing at the next landing point"
            job._save()
            job.ready.set()

    async def _setup(self) -> bool:
        """Make this turn ready for a worker (editor, hints); False when it needs none: skipped,
        or its compression restored from the sidecar (then it is ready to land)."""
        positions = self._prepare()
        if positions is None:
            self._stop("skipped")
            return False
        originals = original_nodes(self.session.log, positions)
        self.positions = positions
        if self._restore(originals):
            self.finished = True
            self.outcome = "restored its finished compression from the sidecar file (no worker); landing at the next " \
                           "landing point"
            self.ready.set()
            return False
        self.editor = TurnNodeEditor(self.turn, originals)
        self.hints = await self._take_hints()
        return True

    def _prepare(self) -> list[int] | None:
        """Re-read the current surface: the turn's nodes, or None (logged) when it cannot be compressed."""
        log_ = self.session.log
        nodes = turn_nodes(log_, self.turn)
        if not nodes:
            log.info("%s: skipped: no current surface nodes (shadowed by a checkpoint?)", self.where)
            return None
        at = log_.index_of(nodes[0])
        if log_.nodes[at:at + len(nodes)] != nodes:
            log.warning("%s: skipped: the turn's nodes are not contiguous on the surface", self.where)
            return None
        if log_.events[nodes[0]]["type"] != "user/message":
            log.warning("%s: skipped: the turn does not start with a user node", self.where)
            return None
        return nodes

    async def _take_hints(self) -> list[Hint]:
        """The turn's hints, after the pending marker (a restart redoes the turn either way)."""
        if self.take_hints is None:
            return []
        try:
            hints = await self.take_hints()
        except Exception as exc:  # hints are optional: never a reason not to compress
            log.warning("%s: thought hints unavailable: %s", self.where, exc)
            return []
        if hints:
            log.info("%s: %d thought hint(s) go into the worker prompt", self.where, len(hints))
        return hints

    # -- the sidecar -------------------------------------------------------------------
    def _save(self) -> None:
        if self.results is None or self.editor is None:
            return
        record = make_record(self.session.log, self.session.id, self.turn, self.positions, self.editor.dump(),
                             len(self.workers), self.worker_modes, self.requests)
        self.results.save(self.session.id, self.turn, record)

    def _restore(self, originals: list[OriginalNode]) -> bool:
        """Rebuild a finished compression a previous process kept; drop it when it no longer stands."""
        if self.results is None:
            return False
        record = self.results.load(self.session.id, self.turn)
        if record is None:
            return False
        why = stale_reason(self.session.log, record, self.positions)
        editor = None
        if why is None:
            try:
                editor = TurnNodeEditor.restore(self.turn, originals, record.get("nodes") or [])
            except ValueError as exc:
                why = f"its working nodes do not fit the turn ({exc})"
            else:
                if problems := editor.final_problems():
                    why = "it is not a final working surface: " + "; ".join(problems)
        if why is not None or editor is None:
            self.results.delete(self.session.id, self.turn, f"stale: {why}")
            return False
        self.editor = editor
        self.workers = [f"saved{k + 1}" for k in range(int(record.get("workers") or 0))]
        self.worker_modes = [str(m) for m in record.get("workerModes") or []]
        log.info("%s: restored the compression a previous process finished (%d -> %d nodes, %s model request(s) "
                 "then); no worker runs", self.where, len(self.positions), len(editor.nodes), record.get("requests"))
        return True

    def _forget_result(self, why: str | None) -> None:
        if self.results is not None:
            self.results.delete(self.session.id, self.turn, why)

    # -- workers -----------------------------------------------------------------------
    def _shape(self) -> tuple[Any, ...]:
        """The combined working surface of every turn the workers edit."""
        return tuple(job.editor.shape() for job in self._todo)  # type: ignore[union-attr]

    def _revision(self) -> int:
        return sum(job.editor.revision for job in self._todo)  # type: ignore[union-attr]

    @property
    def _run_where(self) -> str:
        """Where the worker run's own log lines point: its turn, or every turn of its batch."""
        turns = [job.turn for job in self._todo]
        if len(turns) == 1:
            return self._todo[0].where
        return f"session {self.session.id} turns {', '.join(map(str, turns))}"

    async def _work(self) -> str | None:
        """Run workers until one finishes (None) or a bound is reached (why it gave up). The
        bounds are the whole run's, over every turn of the batch."""
        assert self._todo
        cfg = self.config
        where = self._run_where
        turns = [job.turn for job in self._todo]
        label = f"turn-memory turn {turns[0]}" if len(turns) == 1 else f"turn-memory turns {turns[0]}-{turns[-1]}"
        seen = {self._shape()}
        no_progress = 0
        deadline = time.monotonic() + cfg.jobTimeoutS
        while True:
            if no_progress >= cfg.workerAttempts:
                return f"{no_progress} consecutive worker(s) without progress"
            if len(self._run_workers) >= cfg.maxWorkers:
                return f"{len(self._run_workers)} workers, the cap (turns.maxWorkers)"
            budget = cfg.maxJobRequests - self._run_requests
            if budget <= 0:
                return f"{self._run_requests} model requests, the job's budget (turns.maxJobRequests)"
            left = deadline - time.monotonic()
            if left <= 0:
                return f"{cfg.jobTimeoutS:.0f}s, the job's wall-clock budget (turns.jobTimeoutS)"
            mode = "fork" if not self._run_workers else "spawn"
            worker_id = f"w{next(_worker_ids)}"
            self._run_workers.append(worker_id)
            self._run_modes.append(mode)
            try:
                prompt = self._prompt(mode)
            except PromptError as exc:
                log.error("%s: prompt failed: %s", where, exc)
                return f"the prompt failed: {exc}"
            self.current_worker = worker_id
            try:
                outcome, used = await run_worker(self.port, self.session.id, {
                    "jobId": self.job_id, "workerId": worker_id, "mode": mode, "prompt": prompt,
                    "persona": worker_prompt.persona(), "tools": worker_prompt.worker_tool_specs(),
                    "maxRequests": min(cfg.maxWorkerRequests, budget), "label": label,
                }, min(cfg.workerTimeoutS, left))
            finally:
                self.current_worker = None
            self._run_requests += used
            if self._worker_finished:
                return None
            shape = self._shape()
            progressed = shape not in seen and shape not in self._refused
            seen.add(shape)
            no_progress = 0 if progressed else no_progress + 1
            stop = outcome.get("stop") if isinstance(outcome, dict) else outcome
            if isinstance(outcome, dict) and outcome.get("detail"):
                stop = f"{stop}: {outcome['detail']}"
            log.info("%s: worker %s (%s) ended without a finish (%s); %s", where, worker_id, mode, stop,
                     "it made progress, continuing" if progressed else
                     f"no progress ({no_progress}/{cfg.workerAttempts})")

    def _prompt(self, mode: str) -> str:
        todo = self._todo
        return worker_prompt.task([job.editor for job in todo], [h for job in todo for h in job.hints],  # type: ignore[misc]
                           spawn=mode == "spawn", continuing=self._revision() > 0)

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        """A worker's tool call, routed here by the engine."""
        if self._tools is None or worker_id != self.current_worker or self._worker_finished:
            return ToolResult("this worker is no longer active; stop now", is_error=True, conclude=True)
        try:
            text = self._tools.call(name, args)
        except ToolError as exc:
            if name == FINISH and self._todo:
                self._refused.add(self._shape())
            return ToolResult(str(exc), is_error=True)
        if name == FINISH:
            self._worker_finished = True
            return ToolResult(text, conclude=True)
        return ToolResult(text)

    # -- landing -----------------------------------------------------------------------
    def _context(self, open_turn: int | None, workers: int | None = None,
                 open_step: int | None = None) -> landing_.LandingContext:
        return landing_.LandingContext(self.turn, open_turn, len(self.workers) if workers is None else workers,
                                       tuple(self.worker_modes), open_step=open_step)

    def _plan(self, log_: SessionLog, open_turn: int, open_step: int | None) -> Plan:
        # rebuilt on every attempt: the landing must belong to the turn (and step) still open
        editor = self.editor
        assert editor is not None
        if log_.index.open_turn != open_turn:
            raise landing_.LandingImpossible(f"turn {open_turn} is no longer open", transient=True)
        if open_step is not None and log_.index.open_step != (open_turn, open_step):
            raise landing_.LandingImpossible(f"step {open_step} of turn {open_turn} is no longer open", transient=True)
        return landing_.plan_landing(log_, editor, self.positions, self._context(open_turn, open_step=open_step))

    def _landable_after(self, opening: list[dict[str, Any]], open_turn: int, open_step: int | None) -> str | None:
        """Why the landing would be refused once `opening` (turn/step events) is appended, or None."""
        log_ = self.session.log
        try:
            plan = landing_.plan_landing(_Ahead(log_, len(opening)), self.editor, self.positions,  # type: ignore[arg-type]
                                         self._context(open_turn, open_step=open_step))
            validate(log_, Plan([*opening, *plan.events], spans=plan.spans, label=plan.label, kind=plan.kind))
            return None
        except (LandingError, landing_.LandingImpossible) as exc:
            return str(exc)

    def landable_in_step(self, open_turn: int, step: int) -> bool:
        """Whether the landing would be accepted inside the loop's step `step` of `open_turn`,
        which has not started yet (0.2: the pre-step defers the landing to the step's request)."""
        why = self._landable_after([{"type": "step/start", "data": {"turn": open_turn, "step": step}}], open_turn, step)
        if why is not None:
            log.warning("%s: would not land inside step %d of turn %d: %s", self.where, step, open_turn, why)
        return why is None

    def landable_in_next_turn(self) -> bool:
        """Whether the landing would be accepted at the next turn's landing point (its first
        pre-step; 0.2: its first step's request), were that turn to start now."""
        if self.landed.is_set() or not self.finished:
            return self.landing == "landed"
        turn = (self.session.log.index.latest_turn or self.turn) + 1
        opening: list[dict[str, Any]] = [{"type": "turn/start", "data": {"turn": turn}}]
        step = None
        if not self.session.log.dialect.plugin_steps:
            opening.append({"type": "step/start", "data": {"turn": turn, "step": 1}})
            step = 1
        why = self._landable_after(opening, turn, step)
        if why is not None:
            log.warning("%s: its landing would be refused in turn %d: %s", self.where, turn, why)
        return why is None

    async def land_into(self, open_turn: int, open_step: int | None = None) -> bool:
        """Land the finished turn while `open_turn` is open: in its pre-step (no step open), or
        inside the loop's own step `open_step` before that step commits anything (0.2).

        Returns False when it could not land now but may at a later landing point (the turn
        or step it was asked to land in is no longer open, the log kept moving); the job then
        stays ready. Otherwise the job is done: landed, or refused for good (the turn stays
        raw and pending: a restart redoes it).
        """
        assert self.editor is not None
        try:
            await land(self.session, self.port, lambda log_: self._plan(log_, open_turn, open_step))
        except (landing_.LandingImpossible, LogKeptMoving) as exc:
            if isinstance(exc, LogKeptMoving) or exc.transient:
                log.info("%s: not landed now (%s); retrying at the next landing point", self.where, exc)
                return False
            self._refused_landing(str(exc))
            return True
        except LandingError as exc:  # incl. SpanMoved: a checkpoint took the turn, its nodes changed
            self._refused_landing(str(exc))
            return True
        self.landing = "landed"
        self._forget_result(None)
        log.info("%s: landed (%d -> %d nodes, %d worker(s), %d model request(s))", self.where, len(self.positions),
                 len(self.editor.nodes), len(self.workers), self.requests)
        self.landed.set()
        return True

    def fold_into(self, checkpoint_seq: int) -> None:
        """A session checkpoint took the turn and folded this finished compression's nodes: it
        was not wasted, and it never lands (its span is gone from the surface)."""
        log.info("%s: the checkpoint at seq %d folded this compressed turn (%d -> %d nodes); nothing left to land",
                 self.where, checkpoint_seq, len(self.positions), len(self.editor.nodes) if self.editor else 0)
        self.landing = f"folded into the checkpoint at seq {checkpoint_seq}"
        self._forget_result("a checkpoint folded it")
        self.landed.set()

    def _refused_landing(self, why: str) -> None:
        log.warning("%s: landing refused, the turn stays raw: %s", self.where, why)
        self.landing = f"refused: {why}"
        self._forget_result("its landing was refused")  # the same plan would be refused again
        self.landed.set()

    def rebind(self, session: MirroredSession, port: HostPort, results: ResultStore | None) -> None:
        """The session was reopened (a new mirror entry, maybe a new shim connection): read that."""
        self.session, self.port = session, port
        if results is not None:
            self.results = results
