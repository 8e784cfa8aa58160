"""One completed turn's compression: read it, prepare, run workers, land.

The turn is read at `turn/end` (`mark`, started by the turn service as soon as the turn is
queued), not when the job's turn comes; the marker it owes (`turns.marking`) lands at the next
turn's first landing point unless its rewrite lands there first, and the engine's journal keeps
it recoverable until then. `run()` (the queue calls it, oldest turn first) then compresses and
ends once the landing is ready; the turn service lands it at a later turn's landing point. The
session is touched at most twice: the owed marker, and that landing.

A job is the turn's state from turn/end to landing; each step lives in the module named for it:
`marking` (what the turn owes), `batch_run` (the worker run, bounded and checked for
progress by `runtime.worker_run`: `turns.maxJobRequests` model requests and `turns.jobTimeoutS`
seconds over all its workers), `sidecar` (a finished compression kept across restarts, in
`turns.results`, so a restart lands it without running workers again) and `landing_check`
(whether and when it lands). One log line reports each job: its workers, model requests,
time and outcome.

A turn no worker may rewrite (the model said nothing in it) owes the no-op marker instead,
and gets no job work; every other turn is pending and then held until the
compression policy dispatches it (`turns.eligibility`, scheduled by `turns.queue`). A job may
carry a batch: turns dispatched together (held small turns with a later one, or turns that
waited for a worker slot). Its workers edit every turn that needs one, each in its own
editor (ids prefixed with the turn); each turn keeps its own marker, sidecar,
landing and report line, exactly as if it had had its own worker. A turn restored from its
sidecar never joins the batch's worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import ToolResult
from turn_memory.config import TurnConfig
from turn_memory.host.reasoning import Hint
from turn_memory.host.tokens import estimate_text
from turn_memory.runtime.interfaces import LandingOutcome
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.worker_run import Allowance
from turn_memory.turns import landing_check, sidecar, split
from turn_memory.turns.batch_run import BatchRun
from turn_memory.turns.compression import Compression, split_by_host_message, surface_positions
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.lifecycle import Lifecycle, Phase
from turn_memory.turns.marking import Marked, classify
from turn_memory.turns.nodes import OriginalNode, original_nodes
from turn_memory.turns.results import ResultStore
from turn_memory.turns.split_run import SplitRun

log = logging.getLogger("turn_memory.turns")


@dataclass
class TurnJob:
    session: MirroredSession
    port: HostPort
    config: TurnConfig
    turn: int
    job_id: str = ""
    #: where a finished compression waits to land across restarts (None: nowhere)
    results: ResultStore | None = None
    #: the turn's working surface, once it has one (workers ran on it, or its sidecar restored it)
    compression: Compression | None = None
    #: the turn's phase and how it got there: the one record of its state (`turns.lifecycle`)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    #: the worker keeps the assistant nodes (`turns.assistantNodes`, or a host message inside the turn)
    keep: bool = False
    #: takes the turn's thought hints (bounded wait); None: hints are off
    take_hints: Callable[[], Awaitable[list[Hint]]] | None = None
    #: navigation for every worker's prompt (docs/decisions.md#long-thoughts-get-hints); empty when none came back in time
    hints: list[Hint] = field(default_factory=list)
    #: the task reading the turn, started when it was queued
    marking: "asyncio.Task[None] | None" = None
    #: DSH's token estimate of the turn's surface nodes when it was marked
    tokens: int = 0
    #: the turns of the batch this job's turn was compressed with (empty: on its own)
    batch_turns: list[int] = field(default_factory=list)
    #: turn starts this ready compression waited through for a landing that keeps its shape
    shape_waits: int = 0
    #: the worker run this job leads (for its own turn and batched ones that need a worker);
    #: kept apart from its own `compression`: a leader restored from its sidecar lands with
    #: its own provenance while it runs
    _batch: BatchRun | SplitRun | None = None
    #: a turn too big for one worker in time: what each of its parallel workers may take
    #: (`turns.split`; set at dispatch); None: one worker
    budget: split.Budget | None = None
    #: (tokens the workers wrote, seconds of worker time) once they finished: the session's worker speed
    pace: tuple[int, float] | None = None
    #: what the session lets its workers spend (`turns.breaker`; set at dispatch)
    allowance: Allowance | None = None
    _started: float = 0.0
    #: replaced at every move: whoever waits for a phase wakes and looks again
    _moved: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.job_id = self.job_id or f"{self.session.id}#turn{self.turn}"

    @property
    def phase(self) -> Phase:
        return self.lifecycle.phase

    @property
    def done(self) -> bool:
        """Nothing is left to land (landed, refused, no-op, folded, stopped)."""
        return self.phase.terminal

    @property
    def held(self) -> bool:
        return self.phase.held

    @property
    def compressed(self) -> bool:
        """A worker (or the sidecar) produced a validated rewrite, landed or not."""
        return self.lifecycle.reached(Phase.READY)

    @property
    def landing(self) -> LandingOutcome:
        """How the landing ended (WAITING while nothing has: held, compressing, ready, stopped)."""
        return _LANDINGS.get(self.phase, LandingOutcome.WAITING)

    @property
    def where(self) -> str:
        return f"session {self.session.id} turn {self.turn}"

    def move(self, to: Phase, reason: str) -> None:
        """Move the turn to its next phase (`turns.lifecycle` refuses any other move)."""
        self.lifecycle.move(to, reason)
        log.debug("%s: %s (%s)", self.where, to.value, reason)
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def stop(self, reason: str) -> None:
        """Nothing will land in this process (skipped, gave up, crashed); a ready or finished
        turn keeps its phase (its rewrite still lands, or already ended)."""
        if not self.phase.settled:
            self.move(Phase.STOPPED, reason)

    async def until(self, test: Callable[[Phase], bool], timeout: float | None = None) -> bool:
        """Wait (bounded by `timeout`) until the phase passes `test`; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not test(self.phase):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            try:
                await asyncio.wait_for(self._moved.wait(), left)
            except asyncio.TimeoutError:
                return False
        return True

    async def settled(self, timeout: float | None = None) -> bool:
        """Wait (bounded) until it is ready to land or done; False on timeout."""
        return await self.until(lambda p: p.settled, timeout)

    async def ready_unless_held(self, timeout: float) -> bool:
        """Wait (bounded) until the compression is ready; False at once when the policy holds
        the turn (no worker is coming for it now), or after `timeout`."""
        deadline = time.monotonic() + timeout
        if not await self.until(lambda p: p.decided, timeout) or self.held:
            return False
        return await self.settled(max(0.0, deadline - time.monotonic()))

    # -- turn/end: what the turn is, and the marker it owes -----------------------------
    async def mark(self) -> str | None:
        """Read the completed turn (`marking.classify`): pending, or a no-op that needs no worker.
        Returns the marker it owes the log ("pending", "no-op"), which lands later, or None."""
        try:
            marking = classify(self.session, self.turn, self.where)
        except Exception:
            log.exception("%s: reading the completed turn failed; it stays raw", self.where)
            self.stop("failed to mark")
            return None
        self.tokens = marking.tokens
        if marking.marked is Marked.SKIPPED:
            self.stop("skipped")
        elif marking.marked is Marked.NO_OP:
            self.move(Phase.NO_OP, f"no-op ({marking.problem})")
        else:
            self.move(Phase.PENDING, "pending")
        return marking.owes

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
            if job.phase is Phase.DISPATCHED:
                job.move(Phase.COMPRESSING, "its worker run started")
        try:
            for job in group:  # each turn read at turn/end
                if job.marking is not None:
                    await job.marking
                else:
                    await job.mark()
            await self._run(group)
        finally:
            for job in group:
                job.stop("stopped")  # crashed before it was ready: nothing will land
                job._report()

    def _report(self) -> None:
        c = self.compression
        modes = f" ({', '.join(c.modes)})" if c is not None and c.modes else ""
        batch = (f" (one worker run for turns {', '.join(map(str, self.batch_turns))}: workers, requests and time "
                 "are the batch's)" if len(self.batch_turns) > 1 else "")
        log.info("%s: job %s: %d worker(s)%s, %d model request(s), %.1fs%s", self.where, self.lifecycle.reason,
                 len(c.workers) if c is not None else 0, modes, c.requests if c is not None else 0,
                 time.monotonic() - self._started, batch)

    async def _run(self, group: list["TurnJob"]) -> None:
        todo: list[tuple[TurnJob, list[int], list[OriginalNode]]] = []
        for job in group:
            if not job.phase.settled and (needs := await job._setup()) is not None:
                todo.append((job, *needs))
        if not todo:
            return
        # one worker, several turns: ids carry their turn so no call can mix them up
        prefix = len(todo) > 1
        work: list[tuple[TurnJob, Compression]] = []
        for job, positions, originals in todo:
            job.compression = Compression(positions, TurnNodeEditor(
                job.turn, originals, id_prefix=f"t{job.turn}." if prefix else "",
                keep_assistants=job.keep))
            work.append((job, job.compression))
        batch = self._batch = self._start_run(work)
        started = time.monotonic()
        try:
            gave_up = await batch.work()
        finally:
            # the worker run was on behalf of `todo`: its workers and requests are theirs (this
            # job's own turn, when it needed none, ran no worker)
            run = batch.run
            for job, c in work:
                c.workers, c.modes, c.requests = list(run.workers), list(run.modes), run.requests
                job.batch_turns = batch.turns if prefix else []
        if gave_up is not None:
            for job, _ in work:
                why = f"gave up: {gave_up}; the turn stays raw (pending, retried on the next start)"
                log.warning("%s: %s", job.where, why)
                job.stop(why)
            return
        seconds = sum(batch.seconds) if isinstance(batch, SplitRun) else time.monotonic() - started
        self.pace = (sum(estimate_text(n.text) for _, c in work for n in c.editor.nodes if n.changed), seconds)
        for job, c in work:
            log.info("%s: finished by worker %d (%s)%s; %d -> %d nodes; landing at the next pre-step", job.where,
                     len(c.workers), ", ".join(c.modes),
                     f" with turns {', '.join(map(str, batch.turns))}" if prefix else "",
                     len(c.positions), len(c.editor.nodes))
            if job.results is not None:
                sidecar.save(job.results, job.session.log, job.session.id, job.turn, c)
            job.move(Phase.READY, "finished; landing at the next landing point")

    def _start_run(self, work: list[tuple["TurnJob", Compression]]) -> BatchRun | SplitRun:
        """One worker run for the batch, or, for one turn given several parts, a run per part."""
        if len(work) == 1 and self.budget is not None:
            job, c = work[0]
            log_ = job.session.log
            sizes = [0 if c.editor.keep_assistants and o.role == "assistant" else log_.price(o.seq) or 0
                     for o in c.editor.originals]
            scopes = split.plan(c.editor.originals, sizes, self.budget)
            if len(scopes) > 1:
                log.info("%s: %d workers at once, one per part (positions %s)", job.where, len(scopes),
                         ", ".join(f"{a + 1}-{b + 1}" for a, b in scopes))
                return SplitRun.start(job.session, job.port, job.job_id, job.config, c.editor, job.hints, scopes,
                                      self.allowance)
        return BatchRun.start(self.session, self.port, self.job_id, self.config, [(c.editor, job.hints) for job, c in work],
                              self.allowance)

    async def _setup(self) -> tuple[list[int], list[OriginalNode]] | None:
        """The turn's positions and original nodes, its hints taken, when it needs a worker;
        None when it needs none: skipped, or its compression restored from the sidecar (then
        it is ready to land)."""
        positions = surface_positions(self.session.log, self.turn, self.where)
        if positions is None:
            self.stop("skipped")
            return None
        keep = self.keep = self.session.log.dialect.keeps_assistants(self.config.assistantNodes)
        if not keep and split_by_host_message(self.session.log, positions):
            keep = self.keep = True
            log.info("%s: the host's tool-registry message sits inside the turn: its assistant nodes are kept and it "
                     "lands in place around the message", self.where)
        originals = original_nodes(self.session.log, positions)
        restored = sidecar.restore(self.results, self.session.log, self.session.id, self.turn, positions, originals,
                                   self.where, keep_assistants=keep) if self.results is not None else None
        if restored is not None:
            self.compression = restored
            self.move(Phase.READY, "restored its finished compression from the sidecar file (no worker); landing at "
                                   "the next landing point")
            return None
        self.hints = await self._take_hints()
        return positions, originals

    async def _take_hints(self) -> list[Hint]:
        """The turn's hints, after the pending marker (a restart redoes the turn either way); none
        where the workers keep the assistant nodes, reasoning and all: no rewrite needs them."""
        if self.take_hints is None or self.keep:
            return []
        try:
            hints = await self.take_hints()
        except Exception as exc:  # hints are optional: never a reason not to compress
            log.warning("%s: thought hints unavailable: %s", self.where, exc)
            return []
        if hints:
            log.info("%s: %d thought hint(s) go into the worker prompt", self.where, len(hints))
        return hints

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        """A worker's tool call, routed here by the engine."""
        if self._batch is None:
            return ToolResult("this worker is no longer active; stop now", is_error=True, conclude=True)
        return self._batch.tool_call(worker_id, name, args)

    # -- landing -----------------------------------------------------------------------
    def landable_in_step(self, open_turn: int, step: int) -> bool:
        """Whether the landing would be accepted inside the loop's step `step` of `open_turn`,
        which has not started yet (0.2: the pre-step defers the landing to the step's request)."""
        if self.compression is None:
            return False
        why = landing_check.refusal_in_step(self.session.log, self.turn, self.compression, open_turn, step)
        if why is not None:
            log.warning("%s: would not land inside step %d of turn %d: %s", self.where, step, open_turn, why)
        return why is None

    def landable_in_next_turn(self) -> bool:
        """Whether the landing would be accepted at the next turn's landing point (its first
        pre-step; 0.2: its first step's request), were that turn to start now."""
        if self.phase is not Phase.READY or self.compression is None:
            return self.landing is LandingOutcome.LANDED
        turn, why = landing_check.refusal_in_next_turn(self.session.log, self.turn, self.compression)
        if why is not None:
            log.warning("%s: its landing would be refused in turn %d: %s", self.where, turn, why)
        return why is None

    async def land_into(self, open_turn: int, open_step: int | None = None) -> bool:
        """Land the finished turn while `open_turn` is open (`landing_check.land_into`).

        Returns False when it could not land now but may at a later landing point; the job
        then stays ready. Otherwise the job is done: landed, or refused for good (the turn
        stays raw and pending: a restart redoes it).
        """
        c = self.compression
        assert c is not None, "only a finished job lands"
        outcome, why = await landing_check.land_into(self.session, self.port, self.turn, c, open_turn, open_step,
                                                     self.where)
        return self.settle(outcome, why)

    def settle(self, outcome: LandingOutcome, why: str = "", block: Sequence[int] = ()) -> bool:
        """Record how this turn's landing attempt ended (alone, or in the `block` of turns that
        landed together); False when it waits for a later landing point."""
        if outcome is LandingOutcome.WAITING:
            return False
        if outcome is LandingOutcome.REFUSED:
            self._refused_landing(why)
            return True
        c = self.compression
        assert c is not None, "only a finished job lands"
        self._forget_result(None)
        together = f", in one block with turns {', '.join(map(str, block))}" if len(block) > 1 else ""
        log.info("%s: landed (%d -> %d nodes, %d worker(s), %d model request(s)%s)", self.where, len(c.positions),
                 len(c.editor.nodes), len(c.workers), c.requests, together)
        self.move(Phase.LANDED, f"landed{together}")
        return True

    def fold_into(self, checkpoint_seq: int) -> None:
        """A session checkpoint took the turn and folded this finished compression's nodes: it
        was not wasted, and it never lands (its span is gone from the surface)."""
        c = self.compression
        log.info("%s: the checkpoint at seq %d folded this compressed turn (%d -> %d nodes); nothing left to land",
                 self.where, checkpoint_seq, len(c.positions) if c else 0, len(c.editor.nodes) if c else 0)
        self._forget_result("a checkpoint folded it")
        self.move(Phase.FOLDED, f"into the checkpoint at seq {checkpoint_seq}")

    def _refused_landing(self, why: str) -> None:
        log.warning("%s: landing refused, the turn stays raw: %s", self.where, why)
        self._forget_result("its landing was refused")  # the same plan would be refused again
        self.move(Phase.REFUSED, why)

    def _forget_result(self, why: str | None) -> None:
        if self.results is not None:
            self.results.delete(self.session.id, self.turn, why)

    def rebind(self, session: MirroredSession, port: HostPort, results: ResultStore | None) -> None:
        """The session was reopened (a new mirror entry, maybe a new shim connection): read that."""
        self.session, self.port = session, port
        if results is not None:
            self.results = results


#: the landing outcome each phase that ends a landing reads as (`LandingOutcome`, for `continuation`)
_LANDINGS = {Phase.LANDED: LandingOutcome.LANDED, Phase.NO_OP: LandingOutcome.LANDED,
             Phase.REFUSED: LandingOutcome.REFUSED, Phase.FOLDED: LandingOutcome.FOLDED}
