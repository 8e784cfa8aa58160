"""One completed turn's compression: prepare, mark pending, run workers, land (D-007, D-008).

Workers: the first is a one-shot fork of the parent (it inherits the turn in context); any
end without an accepted finish disposes it and continues with a fresh spawn that starts
from the editor's current catalog. The budget counts consecutive workers without an
accepted replacement; progress resets it. Each worker is bounded in model requests by the
shim, so no job can spin. The session is only touched twice: the pending marker, and the
final landing — at a later turn's pre-step. `run()` ends once the landing is ready (the
queue moves on to the next turn); the turn service lands it.

A turn the eligibility policy finds not worth a worker gets the no-op marker instead. A job
may carry a batch: later turns that were already queued when it started (a backlog). Its
one worker edits every turn that needs one, each in its own editor (ids prefixed with the
turn), and each turn then lands on its own, exactly as if it had had its own worker.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from turn_memory.config import TurnConfig
from turn_memory.hints.section import hints_text
from turn_memory.hints.service import Hint
from turn_memory.host.mirror import MirroredSession
from turn_memory.host.turns import lifecycle_state, open_step_of
from turn_memory.landing.land import LandingError, land
from turn_memory.landing.port import HostPort
from turn_memory.prompts import PromptError, render_prompt
from turn_memory.turns import eligibility, landing as landing_
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.markers import marker_of
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turn_nodes
from turn_memory.turns.tools import FINISH, BatchTools, ToolError, WorkerTools, catalog, tool_specs
from turn_memory.workers import ToolAnswer

log = logging.getLogger("turn_memory.turns")
_worker_ids = itertools.count(1)


@dataclass
class TurnJob:
    session: MirroredSession
    port: HostPort
    config: TurnConfig
    turn: int
    job_id: str = ""
    editor: TurnNodeEditor | None = None
    positions: list[int] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    worker_modes: list[str] = field(default_factory=list)
    current_worker: str | None = None
    finished: bool = False
    #: set when the job stops compressing: a validated landing waits for a pre-step, or
    #: there is nothing left to land (then `landed` is set too)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    landed: asyncio.Event = field(default_factory=asyncio.Event)
    #: takes the turn's thought hints (bounded wait); None: hints are off
    take_hints: Callable[[], Awaitable[list[Hint]]] | None = None
    #: navigation for every worker's prompt (D-014); empty when none came back in time
    hints: list[Hint] = field(default_factory=list)
    _tools: WorkerTools | BatchTools | None = None
    #: the turns this job's worker compresses: its own and any batched ones that need one
    _todo: list["TurnJob"] = field(default_factory=list)
    _worker_finished: bool = False

    def __post_init__(self) -> None:
        self.job_id = self.job_id or f"{self.session.id}#turn{self.turn}"

    @property
    def done(self) -> bool:
        return self.landed.is_set()

    @property
    def where(self) -> str:
        return f"session {self.session.id} turn {self.turn}"

    # -- the whole job -----------------------------------------------------------------
    async def run(self, batch: Sequence["TurnJob"] = ()) -> None:
        """Compress this turn and the `batch` of later queued turns with one worker.

        The worker runs on behalf of every turn that needs one (this job's turn may itself be
        skipped); each turn keeps its own editor, pending marker and landing."""
        group = [self, *batch]
        try:
            await self._run(group)
        finally:
            for job in group:
                if not job.ready.is_set():  # gave up or skipped: nothing will land
                    job.landed.set()
                    job.ready.set()

    async def _run(self, group: list["TurnJob"]) -> None:
        todo = [job for job in group if await job._setup()]
        if not todo:
            return
        if len(todo) > 1:
            # one worker, several turns: ids carry their turn so no call can mix them up
            for job in todo:
                job.editor = TurnNodeEditor(job.turn, job.editor.originals, id_prefix=f"t{job.turn}.")  # type: ignore[union-attr]
            self._tools = BatchTools({job.turn: WorkerTools(job.editor, self.config.readLimitChars) for job in todo})
        else:
            self._tools = WorkerTools(todo[0].editor, self.config.readLimitChars)  # type: ignore[arg-type]
        self._todo = todo
        if not await self._work():
            for job in todo:
                log.warning("%s: gave up after %d worker(s) without a finish; the turn stays raw (pending, retried on "
                            "the next start)", job.where, len(self.workers))
            return
        for job in todo:
            job.finished = True
            job.workers, job.worker_modes = list(self.workers), list(self.worker_modes)
            log.info("%s: finished by worker %d (%s)%s; %d -> %d nodes; landing at the next pre-step", job.where,
                     len(self.workers), ", ".join(self.worker_modes),
                     f" with turns {', '.join(str(j.turn) for j in todo)}" if len(todo) > 1 else "",
                     len(job.positions), len(job.editor.nodes))  # type: ignore[union-attr]
            job.ready.set()

    async def _setup(self) -> bool:
        """Make this turn ready for a worker (pending marker, editor, hints); False when it needs
        none (skipped, or not worth one: then its no-op marker has landed)."""
        positions = self._prepare()
        if positions is None:
            return False
        originals = original_nodes(self.session.log, positions)
        verdict = eligibility.decide(originals, map(self.session.log.message_of, positions), self.config)
        if not verdict.eligible:
            # a turn not worth a worker (or that no worker could rewrite, D-008) is recorded as
            # seen with a content-identical marker: the model's requests do not change at all
            log.info("%s: %s; no-op marker, no worker", self.where, verdict.reason)
            await self._land_now(lambda log_: landing_.noop_plan(log_, positions[0], self._context(None, 0)))
            return False
        first = self.session.log.events[positions[0]]
        if marker_of(first) is None:
            await land(self.session, self.port, lambda log_: landing_.pending_plan(log_, positions[0], self.turn))
            positions = self._prepare()
            if positions is None:
                return False
            originals = original_nodes(self.session.log, positions)
        self.positions = positions
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

    # -- workers -----------------------------------------------------------------------
    def _revision(self) -> int:
        return sum(job.editor.revision for job in self._todo)  # type: ignore[union-attr]

    async def _work(self) -> bool:
        no_progress = 0
        turns = [job.turn for job in self._todo]
        label = f"turn-memory turn {turns[0]}" if len(turns) == 1 else f"turn-memory turns {turns[0]}-{turns[-1]}"
        while no_progress < self.config.workerAttempts and len(self.workers) < self.config.maxWorkers:
            mode = "fork" if not self.workers else "spawn"
            worker_id = f"w{next(_worker_ids)}"
            self.workers.append(worker_id)
            self.worker_modes.append(mode)
            revision = self._revision()
            try:
                prompt = self._prompt(mode)
            except PromptError as exc:
                log.error("%s: prompt failed: %s", self.where, exc)
                return False
            self.current_worker = worker_id
            try:
                outcome = await self.port.run_worker(self.session.id, {
                    "jobId": self.job_id, "workerId": worker_id, "mode": mode, "prompt": prompt,
                    "persona": render_prompt("turn-worker-system", {}), "tools": tool_specs(),
                    "maxRequests": self.config.maxWorkerRequests, "label": label,
                }, self.config.workerTimeoutS)
            except Exception as exc:  # transport, timeout, host refusal: a failed worker
                outcome = {"stop": "error", "detail": str(exc)}
            finally:
                self.current_worker = None
            if self._worker_finished:
                return True
            progressed = self._revision() > revision
            no_progress = 0 if progressed else no_progress + 1
            stop = outcome.get("stop") if isinstance(outcome, dict) else outcome
            if isinstance(outcome, dict) and outcome.get("detail"):
                stop = f"{stop}: {outcome['detail']}"
            log.info("%s: worker %s (%s) ended without a finish (%s); %s", self.where, worker_id, mode, stop,
                     "it made progress, continuing" if progressed else
                     f"no progress ({no_progress}/{self.config.workerAttempts})")
        return False

    def _prompt(self, mode: str) -> str:
        todo = self._todo
        editors = [job.editor for job in todo]
        images = [m for e in editors for m in e.image_markers()]  # type: ignore[union-attr]
        hints = [h for job in todo for h in job.hints]
        turns = [str(job.turn) for job in todo]
        return render_prompt(
            "turn-compression",
            {"turn": turns[0], "turns": ", ".join(turns[:-1]) + f" and {turns[-1]}" if len(turns) > 1 else turns[0],
             "node_count": str(sum(len(e.nodes) for e in editors)),  # type: ignore[union-attr]
             "catalog": "\n\n".join(catalog(e, previews=True) for e in editors),  # type: ignore[arg-type]
             "hints": hints_text(hints), "images": "\n".join(images)},
            {"single": len(todo) == 1, "batch": len(todo) > 1, "spawn": mode == "spawn",
             "continuing": self._revision() > 0, "hints": bool(hints), "images": bool(images)},
        )

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolAnswer:
        """A worker's tool call, routed here by the engine."""
        if self._tools is None or worker_id != self.current_worker or self._worker_finished:
            return ToolAnswer("this worker is no longer active; stop now", is_error=True, conclude=True)
        try:
            text = self._tools.call(name, args)
        except ToolError as exc:
            return ToolAnswer(str(exc), is_error=True)
        if name == FINISH:
            self._worker_finished = True
            return ToolAnswer(text, conclude=True)
        return ToolAnswer(text)

    # -- landing -----------------------------------------------------------------------
    def _context(self, open_turn: int | None, workers: int | None = None,
                 open_step: int | None = None) -> landing_.LandingContext:
        return landing_.LandingContext(self.turn, open_turn, len(self.workers) if workers is None else workers,
                                       tuple(self.worker_modes), open_step=open_step)

    async def _land_now(self, build: Any) -> None:
        try:
            await land(self.session, self.port, build)
        except LandingError as exc:
            log.warning("%s: marker landing refused: %s", self.where, exc)

    async def land_into(self, open_turn: int, open_step: int | None = None) -> None:
        """Land the finished turn while `open_turn` is open: in its pre-step (no step open), or
        inside the loop's own step `open_step` before that step commits anything (0.2)."""
        editor = self.editor
        assert editor is not None

        def build(log_: Any) -> Any:
            # rebuilt on every attempt: the landing must belong to the turn (and step) still open
            if lifecycle_state(log_.events).open_turn != open_turn:
                raise landing_.LandingImpossible(f"turn {open_turn} is no longer open")
            if open_step is not None and open_step_of(log_.events) != (open_turn, open_step):
                raise landing_.LandingImpossible(f"step {open_step} of turn {open_turn} is no longer open")
            return landing_.plan_landing(log_, editor, self.positions, self._context(open_turn, open_step=open_step))

        try:
            await land(self.session, self.port, build)
            log.info("%s: landed (%d -> %d nodes, %d worker(s))", self.where, len(self.positions),
                     len(self.editor.nodes), len(self.workers))
        except (LandingError, landing_.LandingImpossible) as exc:
            log.warning("%s: landing refused, the turn stays raw: %s", self.where, exc)
        finally:
            self.landed.set()
