"""Per-turn compression for every mirrored user session: triggers, policy, scheduling, landing.

Triggers: a live `turn/end` in a user session (not subagents; user lineage forks count),
and on every full resync (agent/created, reconnect) the recovery scan. Each turn is
marked at once, then the compression policy (`turns.eligibility`) decides from what the
session shows — the turns' sizes, its requests so far, how full the window is, how far behind
the workers are (how turns share workers) — whether it, with the turns held before it, gets a
worker now; the queue (`turns.queue`) runs up to `turns.concurrentJobs` jobs at once. A finished compression lands
at the first pre-step after it is ready (any step of any later turn), every ready one in
that pre-step, oldest first and never past an earlier dispatched turn that is not ready; no
request waits for it, unless `turns.landingBarrier` asks each turn's first request to wait
(bounded) for the previous turn. Session compaction waits (bounded) for the rewrites in
flight through `rewrite_barrier` (two writers never rewrite one span), and only when it is
about to run. Each turn's state is its job's phase (`turns.lifecycle`); `SessionTurns` holds one
session's jobs and is its queue's `TurnWork`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Iterable, Sequence

from turn_memory.bridge.port import HostPort
from turn_memory.config import EngineConfig
from turn_memory.host.dialect import is_runtime_context
from turn_memory.host.tokens import estimate_text
from turn_memory.host.turn_index import LANDING_STEP
from turn_memory.runtime.interfaces import HintSource, LandingOutcome, ReadyTurn
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import WorkerRegistry
from turn_memory.turns import eligibility, landing_check, split
from turn_memory.turns.breaker import Breaker
from turn_memory.turns.job import TurnJob
from turn_memory.turns.lifecycle import Phase
from turn_memory.turns.marking import land_marker
from turn_memory.turns.queue import TurnQueue
from turn_memory.turns.recovery import turns_to_recover
from turn_memory.turns.results import ResultStore

log = logging.getLogger("turn_memory.turns")


#: the routed model's context window of a session (None: not known yet); engine.py wires it
WindowOf = Callable[[MirroredSession], "int | None"]


def _loop_step(session: MirroredSession, open_turn: int) -> int | None:
    """The step of `open_turn` the agent loop has open (rc8), for a landing that happens inside it:
    an overflow's compaction runs after its step's request failed, with the step still open, and a
    landing step of ours opened there would nest in it; DSH's token meter then fails at every
    measure for the rest of the session (bench/soak.py, rc8: 525 failed measures after one
    overflow). None between steps, and on 0.2, whose landings inside a step are its request's."""
    step = session.log.index.open_step
    if not session.log.dialect.plugin_steps or step is None or step[0] != open_turn or step[1] == LANDING_STEP:
        return None
    return step[1]


def _opens_with_snapshot(session: MirroredSession, turn: int) -> bool:
    """Whether the turn's first node is the host's runtime-context snapshot (rc8 opens every other
    turn with one): a marker copy carries turn-memory's source instead, so rc8 takes the snapshot
    for gone and appends a new one at its next step, between a tool result and the model's next
    request."""
    nodes = session.log.index.turn_nodes(turn)
    return bool(nodes) and is_runtime_context((session.log.message_of(nodes[0]) or {}).get("source"))


class SessionTurns:
    """One user session's turns: their jobs (turn -> job, each holding the turn's phase), the
    queue that schedules them, and what the compression policy learns of the session. It is
    the queue's `TurnWork`."""

    def __init__(self, session_id: str, config: EngineConfig, workers: WorkerRegistry,
                 hints: HintSource | None, window_of: WindowOf | None) -> None:
        self.id = session_id
        #: the config the session's turns were last queued with (the policy and the queue read it)
        self.config = config
        #: marked, held, queued, compressing, and ready ones whose landing waits for a landing point
        self.jobs: dict[int, TurnJob] = {}
        self.queue = TurnQueue(session_id, self)
        #: (raw tokens, kept tokens) of the rewrites landed in this process
        self.kept = (0, 0)
        #: (turn, turns) a turn's first pre-step left to land at its request (0.2)
        self.deferred: tuple[int, set[int]] | None = None
        #: when the session's turns ended (seconds, the log's clock) and (tokens written, seconds
        #: of worker time) over its finished jobs: its pace and its workers' speed (`turns.split`)
        self.turn_ends: list[float] = []
        self.pace = (0, 0.0)
        #: what its workers may spend while none finishes (`turns.breaker`)
        self.breaker = Breaker(config.turns.failingRequests, config.turns.failingJobs)
        #: turns that ended and owe their marker (turn -> "pending" or "no-op"; `turns.marking`),
        #: kept in `results`' journal so that a restart before they land still redoes them
        self.owed: dict[int, str] = {}
        self.results: ResultStore | None = None
        #: the session's port, for markers whose job is gone (set by `on_events`)
        self.port: Callable[[], HostPort] | None = None
        self._workers, self._hints, self._window_of = workers, hints, window_of

    # -- TurnWork: what the queue asks ---------------------------------------------------
    def phase(self, turn: int) -> Phase | None:
        job = self.jobs.get(turn)
        return job.phase if job is not None else None

    async def admit(self, turn: int) -> None:
        job = self.jobs[turn]
        if job.marking is not None:
            await job.marking
        if job.done:  # no-op, skipped: nothing left to do
            self.finish([job])

    def choose(self, turns: list[int]) -> None:
        """The compression policy over the held turns, oldest first (logged): each moves to
        HELD or DISPATCHED; a policy that crashes gives every one of them a worker."""
        jobs = [self.jobs[t] for t in turns]
        for job in [j for j in jobs if not j.session.log.index.turn_nodes(j.turn)]:
            job.move(Phase.FOLDED, "a checkpoint folded the turn while it was held")
            self.owe(job.turn, None)
            self.finish([job])
        jobs = [job for job in jobs if not job.done]
        if not jobs:
            return
        session = jobs[0].session
        if self.breaker.open:
            for job in jobs:
                if job.phase is Phase.PENDING:
                    job.move(Phase.HELD, f"compression stopped: {self.breaker.reason}")
            return
        candidates = [self._facts(session, job.turn) for job in jobs]
        try:
            choice = eligibility.choose(candidates, self._session_facts(session), self.config.turns)
            chosen, reason = set(choice.dispatch), choice.reason
        except Exception:
            log.exception("session %s: the compression policy crashed; every held turn gets a worker", self.id)
            chosen, reason = {job.turn for job in jobs}, "the compression policy crashed"
        where = f"session {self.id} turn{'s' if len(jobs) > 1 else ''} {', '.join(str(j.turn) for j in jobs)}"
        log.info("%s: %s; %s", where, "compressing" if chosen else "held", reason)
        for job in jobs:
            if job.turn in chosen:
                job.move(Phase.DISPATCHED, reason)
            elif job.phase is Phase.PENDING:
                job.move(Phase.HELD, reason)

    def _facts(self, session: MirroredSession, turn: int) -> eligibility.TurnFacts:
        log_, nodes = session.log, session.log.index.turn_nodes(turn)
        fixed = [s for s in nodes if log_.events[s]["type"] == "assistant/message"] \
            if log_.dialect.keeps_assistants(self.config.turns.assistantNodes) else []
        return eligibility.TurnFacts(turn, log_.tokens(nodes), turn in session.continuations.requests,
                                     log_.tokens(fixed))

    def _session_facts(self, session: MirroredSession) -> eligibility.SessionFacts:
        index = session.log.index
        window = self._window_of(session) if self._window_of is not None else None
        raw, kept = self.kept
        return eligibility.SessionFacts(
            agent_requests=index.completed_steps(), surface_tokens=session.log.tokens(),
            threshold_tokens=int(window * self.config.compaction.thresholdRatio) if window else None,
            keep_ratio=kept / raw if raw else None, agentic=index.tool_results > 0,
            completed_turns=len(index.turn_ends))

    async def compress(self, turns: list[int]) -> None:
        """One worker reads and rewrites the batch's turns together, once; each still lands,
        and is reported, on its own. Returns when every turn is ready; landings wait in `jobs`."""
        job, *batch = [self.jobs[t] for t in turns]
        if not batch:
            job.budget = self._budget(job)
        job.allowance = self.breaker
        try:
            await job.run(batch)
        finally:
            if job.pace is not None:
                written, seconds = self.pace
                self.pace = (written + job.pace[0], seconds + job.pace[1])
            self._note_outcome(job)
            self.finish([job, *batch])

    def _note_outcome(self, job: TurnJob) -> None:
        """A job that finished resets the breaker; one that gave up counts toward opening it."""
        was_open = self.breaker.open
        if job.compression is not None and job.phase in (Phase.READY, Phase.LANDED):
            self.breaker.finished()
        elif job.phase is Phase.STOPPED and job.lifecycle.reason.startswith("gave up"):
            self.breaker.gave_up(job.lifecycle.reason)
        if self.breaker.open and not was_open:
            log.warning("session %s: compression stopped: %s; its turns stay raw and pending until /compact, a "
                        "config change or a new DSH process", self.id, self.breaker.reason)

    def reconfigure(self, config: EngineConfig) -> None:
        """The config the session's turns are queued with; a change closes the breaker (try again)."""
        if config != self.config and self.breaker.open:
            log.info("session %s: the config changed; compressing again", self.id)
            self.breaker.close()
        self.breaker.max_requests, self.breaker.max_failed_jobs = config.turns.failingRequests, config.turns.failingJobs
        self.config = config

    def _budget(self, job: TurnJob) -> split.Budget | None:
        """What each worker of a big turn may take so that its part is ready within one of the
        session's turns, at the speed its workers wrote so far (`turns.maxParts` parts at most);
        None: one worker."""
        facts = self._facts(job.session, job.turn)
        if facts.tokens - facts.fixed < self.config.turns.batchTokens:
            return None  # not a big turn (`turns.batchTokens`): a request's own latency outweighs any split
        raw, kept = self.kept
        share = kept / raw if raw else eligibility.KEEP_PRIOR
        written, seconds = self.pace
        # the workers' own speed once one finished; before, the session's model's (a fork runs on its route)
        speed = written / seconds if seconds else split.model_speed(job.session.log.events, job.session.log.price)
        # the session's pace: the gap between its turn ends, or before two ended, this turn's own length
        pace = split.turn_seconds(self.turn_ends) or split.turn_duration(job.session.log.events, job.turn)
        within = split.budget(max(0, facts.tokens - facts.fixed), share, speed, pace, self.config.turns.maxParts)
        if within is not None:
            log.info("session %s turn %d: ~%d tokens to write at ~%.0f tokens/s per worker (%s), turns ~%.0fs apart: "
                     "up to %d workers, each on at most ~%d of its tokens", self.id, job.turn,
                     share * (facts.tokens - facts.fixed), speed or 0,
                     "its workers so far" if seconds else "the session's model", pace or 0, within.most, within.tokens)
        return within

    def stop(self, turn: int, reason: str) -> None:
        job = self.jobs.get(turn)
        if job is not None:
            job.stop(reason)
            self.finish([job])

    def slots(self) -> int:
        return self.config.turns.concurrentJobs

    def batch(self, turns: list[int]) -> int:
        return eligibility.batches([self.jobs[t].tokens for t in turns], self.config.turns)[0]

    def finish(self, jobs: Iterable[TurnJob]) -> None:
        """Jobs that stopped compressing: forget what nothing waits for any more."""
        for done in jobs:
            self._workers.remove(done.job_id)
            if self._hints is not None:
                self._hints.forget(self.id, done.turn)  # a job that never took them (skipped, no-op)
            if done.done and self.jobs.get(done.turn) is done:  # nothing waits to land
                del self.jobs[done.turn]
            if not done.compressed:
                self.queue.forget(done.turn)  # a later recovery may retry it

    # -- owed markers (`turns.marking`) --------------------------------------------------
    def owe(self, turn: int, kind: str | None) -> None:
        """Record the marker `turn` owes (None: it owes none any more) in the journal."""
        if self.owed.get(turn) == kind:
            return
        if kind is None:
            del self.owed[turn]
        else:
            self.owed[turn] = kind
        if self.results is not None:
            self.results.save_owed(self.id, self.owed)

    async def land_markers(self, session: MirroredSession, open_turn: int) -> None:
        """At the first landing point of `open_turn`: land the markers earlier turns owe, except
        where the turn's rewrite is about to land instead (ready, or kept in its sidecar) or a
        worker reads the turn (its positions, and a sidecar's, must not move under it). No job
        starts while they land."""
        due = sorted(t for t in self.owed if t < open_turn)
        if not due or self.port is None:
            return
        landing = {job.turn for job in self._ready(open_turn)}
        if self.results is not None:
            landing.update(self.results.turns(self.id))
        queue = self.queue
        async with queue.marking:
            await queue.released()
            with queue.landing_marker(), queue.held():  # no await since released()
                for turn in due:
                    job = self.jobs.get(turn)
                    if turn in landing or turn not in self.owed or queue.is_running(turn) or \
                            (job is not None and job.phase in (Phase.COMPRESSING, Phase.READY)):
                        continue
                    if _opens_with_snapshot(session, turn):
                        continue  # rc8 would restate the snapshot the marker shadows, mid-turn: the journal keeps it
                    kind = self.owed[turn]
                    where = f"session {self.id} turn {turn}"
                    if await land_marker(session, job.port if job is not None else self.port(), turn, kind, where):
                        log.info("%s: its %s marker landed in turn %d", where, kind, open_turn)
                    self.owe(turn, None)  # landed, refused (logged) or folded: the journal is done with it

    # -- landing points ------------------------------------------------------------------
    def _ready(self, open_turn: int) -> list[TurnJob]:
        """Finished compressions of turns before `open_turn` that may land now, oldest first:
        up to the first earlier dispatched turn that is not ready (landings stay in turn
        order; a held turn blocks nothing: it waits for later turns, not for a worker). Jobs
        with nothing left to land are forgotten on the way."""
        out = []
        for turn in sorted(t for t in self.jobs if t < open_turn):
            job = self.jobs[turn]
            if job.held:
                continue
            if job.done:
                self.jobs.pop(turn, None)
            elif job.phase is Phase.READY:
                out.append(job)
            else:
                break
        return out

    async def land_ready(self, session: MirroredSession, open_turn: int, *, open_step: int | None = None,
                         turn_start: bool = False, wait_turns: int = 0) -> bool:
        """Land every ready compression of a turn before `open_turn`, oldest first.

        On 0.2 the newest ready turns that reach the surface tail land as one block inside the
        loop's step, each keeping its user/assistant shape: at the step's request (`open_step`),
        or, from the turn's first pre-step (`turn_start`), deferred to that request (returns
        True). An older one that could only land as one user message waits for a block to take
        it until the `wait_turns`-th turn start, then lands as it can (later turns wait behind it).
        """
        ready = self._ready(open_turn)
        if not ready:
            return False
        log_ = session.log
        step = open_step if open_step is not None else (1 if turn_start else None)
        pairs = [(job.turn, job.compression) for job in ready if job.compression is not None]
        # turns that land in place anywhere (0.2's kept assistants) never take the tail form: its
        # appended copies would cost the person's next turn its usage badge and fold in DSH's chat
        in_place = all(landing_check.keeps_shape_anywhere(log_, c, open_turn) for _, c in pairs)
        size = landing_check.block_in_step(log_, pairs, open_turn, step) \
            if step is not None and not log_.dialect.plugin_steps and len(pairs) == len(ready) and not in_place else 0
        alone, block = ready[:len(ready) - size], ready[len(ready) - size:]
        for job in alone:
            c = job.compression
            if c is not None and not landing_check.keeps_shape_anywhere(log_, c, open_turn) \
                    and not self._stop_waiting(job, turn_start, wait_turns):
                if turn_start:
                    log.info("session %s turn %d: ready; waits (turn start %d of %d) for a landing that keeps its "
                             "user/assistant shape: the turns after it are not all ready to land with it",
                             session.id, job.turn, job.shape_waits, wait_turns)
                return False
            if not await job.land_into(open_turn, open_step):
                return False  # it stays ready and lands at a later landing point; later turns wait for it
            self._landed(job)
        if not block:
            return False
        if open_step is None:
            self.deferred = (open_turn, {job.turn for job in block})
            return True
        await self._land_block(session, block, pairs[-size:], open_turn, open_step)
        return False

    async def _land_block(self, session: MirroredSession, block: list[TurnJob],
                          pairs: list[tuple[int, Any]], open_turn: int, open_step: int) -> None:
        turns = [job.turn for job in block]
        where = f"session {session.id} turns {', '.join(map(str, turns))}"
        outcome, why = await landing_check.land_block_into(session, block[0].port, pairs, open_turn, open_step, where)
        if outcome is LandingOutcome.REFUSED:  # never lose them: each lands on its own, as it can
            log.warning("%s: the block landing was refused (%s); landing each turn on its own", where, why)
            for job in block:
                if not await job.land_into(open_turn, open_step):
                    return
                self._landed(job)
            return
        for job in block:
            job.settle(outcome, why, turns)
            self._landed(job)

    @staticmethod
    def _stop_waiting(job: TurnJob, turn_start: bool, wait_turns: int) -> bool:
        """Whether a ready turn that can only land flattened stops waiting for its shape now: at
        the `wait_turns`-th turn start after it was ready (0: at once)."""
        if turn_start:
            job.shape_waits += 1
        return job.shape_waits >= wait_turns

    def _landed(self, job: TurnJob) -> None:
        if job.phase is Phase.LANDED:
            self.owe(job.turn, None)  # its landing carries the compression marker
            self._note_landing(job)
        if job.done:
            self.jobs.pop(job.turn, None)

    def _note_landing(self, job: TurnJob) -> None:
        """A rewrite landed: what it kept tells the policy what this session's rewrites keep."""
        if job.compression is None or not job.tokens or not job.compression.editor.changed:
            return
        editor = job.compression.editor
        # where assistants are kept, the ratio is over what a worker may rewrite (`TurnFacts.fixed`)
        fixed = {n.original.seq for n in editor.nodes
                 if editor.keep_assistants and n.role == "assistant" and n.original is not None}
        kept = sum(estimate_text(n.text) for n in editor.nodes if n.original is None or n.original.seq not in fixed)
        fixed_tokens = job.session.log.tokens(fixed)
        raw, before = self.kept
        self.kept = (raw + max(0, job.tokens - fixed_tokens), before + kept)

    def busy_turns(self) -> set[int]:
        # a held turn is not busy: no worker is coming for it now, and a checkpoint may take it raw
        return {t for t, job in self.jobs.items() if not job.phase.terminal and job.phase is not Phase.HELD}

    def ready_within(self, seqs: Sequence[int]) -> dict[int, ReadyTurn]:
        inside, out = set(seqs), {}
        for turn, job in self.jobs.items():
            c = job.compression
            if job.phase is Phase.READY and c is not None and c.positions and inside.issuperset(c.positions):
                nodes: list[tuple[str, str]] = [(n.role, n.text) for n in c.editor.nodes]
                out[turn] = (tuple(c.positions), nodes)
        return out

    def folded(self, turns: Iterable[int], checkpoint_seq: int) -> None:
        for turn in turns:
            job = self.jobs.get(turn)
            if job is not None and job.phase is Phase.READY:
                job.fold_into(checkpoint_seq)
                self.jobs.pop(turn, None)
            self.owe(turn, None)


class TurnService:
    """Every mirrored user session's turns (`SessionTurns`), and what other features may ask of
    them: `continuation` reads jobs (`TurnJobs`), `compaction` the rewrites (`TurnRewrites`)."""

    def __init__(self, workers: WorkerRegistry, hints: HintSource | None = None,
                 window_of: WindowOf | None = None) -> None:
        self.sessions: dict[str, SessionTurns] = {}
        self.hints = hints
        self.workers = workers
        self.window_of = window_of

    def job(self, session_id: str, turn: int) -> TurnJob | None:
        turns = self.sessions.get(session_id)
        return turns.jobs.get(turn) if turns is not None else None

    def resume(self, session_id: str, why: str) -> None:
        """Something changed (`/compact`): a session that stopped compressing tries again."""
        turns = self.sessions.get(session_id)
        if turns is not None and turns.breaker.open:
            log.info("session %s: %s; compressing again", session_id, why)
            turns.breaker.close()

    def notice(self, session_id: str) -> str | None:
        """The one line for DSH's output about this session's compression, when there is one."""
        turns = self.sessions.get(session_id)
        return turns.breaker.notice() if turns is not None else None

    def on_events(self, session: MirroredSession, events: list[dict[str, Any]], reset: bool,
                  port: Callable[[], HostPort], config: EngineConfig, results: ResultStore | None = None) -> None:
        if not config.turns.enabled or not session.is_user_session:
            return
        turns = self.sessions.get(session.id)
        if turns is None:
            turns = self.sessions[session.id] = SessionTurns(session.id, config, self.workers, self.hints,
                                                             self.window_of)
            if results is not None:  # what the last process left owed
                turns.owed = results.owed(session.id)
        turns.port = port
        if results is not None:
            turns.results = results
        if reset:
            # the session may have been closed and reopened (a new mirror entry) or the shim
            # reconnected: a job of this process reads the session as it is now, so a finished
            # one still lands at the reopened session's next landing point
            for job in turns.jobs.values():
                if not job.done:
                    job.rebind(session, port(), results)
            live_from = session.meta.liveFrom if session.meta is not None else None
            redo = turns_to_recover(session.log, live_from, session.continuations, owed=turns.owed)
            for turn in [t for t in turns.owed if t not in redo and t not in turns.jobs]:
                turns.owe(turn, None)  # landed, folded or gone since
            for turn in redo:
                if self._enqueue(turns, session, turn, port, config, results):
                    why = "journaled, its marker owed" if turn in turns.owed else "pending or stale marker"
                    log.info("session %s turn %d: recovering (%s)", session.id, turn, why)
            if results is not None:
                self._drop_stale_results(turns, session, results, set(redo))
            return
        ends = [event for event in events if event["type"] == "turn/end"]
        # the session's pace: one live turn end per delivery (turn ends delivered together are a
        # backlog, not turns that took no time)
        if ends and isinstance(ends[-1].get("time"), (int, float)):
            # only the recent gaps count (`split.turn_seconds`): a long session keeps no more
            turns.turn_ends = [*turns.turn_ends[-split.RECENT:], ends[-1]["time"] / 1000]
        for event in ends:
            self._enqueue(turns, session, event["data"]["turn"], port, config, results)

    @staticmethod
    def _drop_stale_results(turns: SessionTurns, session: MirroredSession, results: ResultStore,
                            redo: set[int]) -> None:
        """A kept compression of a turn recovery does not redo has no landing left to make."""
        for turn in results.turns(session.id):
            if turn not in redo and turn not in turns.jobs:
                why = "the turn already landed" if turn in session.log.index.landed else "the turn is not pending"
                results.delete(session.id, turn, f"stale: {why}")

    def _enqueue(self, turns: SessionTurns, session: MirroredSession, turn: int, port: Callable[[], HostPort],
                 config: EngineConfig, results: ResultStore | None) -> bool:
        turns.reconfigure(config)
        existing = turns.jobs.get(turn)
        if existing is not None and not existing.done:
            return False
        job = TurnJob(session, port(), config.turns, turn, results=results)
        if self.hints is not None and config.thoughtHints.enabled:
            hints = self.hints
            job.take_hints = lambda: hints.take(job.session, turn, job.port, config.thoughtHints)
        if not turns.queue.enqueue(turn):
            return False
        turns.jobs[turn] = job  # the queue reads its phase once this returns
        self.workers.add(job.job_id, job)
        job.marking = asyncio.get_running_loop().create_task(self._mark(turns, job))
        return True

    @staticmethod
    async def _mark(turns: SessionTurns, job: TurnJob) -> None:
        """Read the turn at turn/end, and journal the marker it owes (docs/decisions.md#turns-are-recovered-from-the-log)."""
        turns.owe(job.turn, await job.mark())

    async def pre_step(self, session: MirroredSession, turn: int, step: int, config: EngineConfig) -> bool:
        """Before a step of `turn` starts: land every earlier turn whose compression is ready.

        With `turns.landingBarrier` the first step first waits (bounded) for the previous
        turn, queued or compressing, so the request about to be made already carries it.
        Returns True when a landing waits for this step's `agent/request` instead (see
        `at_request`).
        """
        turns = self.sessions.get(session.id)
        if turns is None:
            return False
        previous = turns.jobs.get(turn - 1)
        if config.turns.landingBarrier and step == 1 and previous is not None and not previous.phase.settled \
                and not previous.held:
            started = time.monotonic()
            if await previous.ready_unless_held(config.turns.landingWaitS):
                log.info("session %s turn %d step 1: waited %d ms for turn %d's compression (landing barrier)",
                         session.id, turn, (time.monotonic() - started) * 1000, previous.turn)
            elif not previous.held:
                log.info("session %s turn %d: not ready after %.0fs; turn %d proceeds with it raw", session.id,
                         previous.turn, config.turns.landingWaitS, turn)
        # 0.2 reloads appended assistant nodes only inside a step the agent loop opened, and the
        # turn just ended is still the surface tail once this turn's first step has opened (the
        # turn's user message is committed after agent/request): ready turns that reach the tail
        # land there, as one block keeping their shape
        turn_start = step == 1 and not session.log.dialect.plugin_steps
        if step == 1:  # the markers earlier turns owe: once a turn, at its first landing point
            await turns.land_markers(session, turn)
        return await turns.land_ready(session, turn, turn_start=turn_start, wait_turns=config.turns.shapeWaitTurns)

    async def at_request(self, session: MirroredSession, turn: int, step: int) -> None:
        """Inside the loop's step `step` of `turn`, before it commits anything: land what is ready."""
        turns = self.sessions.get(session.id)
        if turns is None:
            return
        await turns.land_ready(session, turn, open_step=step, wait_turns=turns.config.turns.shapeWaitTurns)
        turns.deferred = None

    def deferred(self, session_id: str, turn: int) -> set[int]:
        """The turns the first pre-step of `turn` left to land at its request (0.2)."""
        turns = self.sessions.get(session_id)
        if turns is None or turns.deferred is None or turns.deferred[0] != turn:
            return set()
        return turns.deferred[1]

    # -- TurnRewrites: what session compaction asks --------------------------------------
    def ready_within(self, session: MirroredSession, seqs: Sequence[int]) -> dict[int, ReadyTurn]:
        """Finished compressions not landed yet whose whole turn lies in `seqs` (a compaction's
        range): turn -> (its positions, its compressed nodes), for the checkpoint to fold."""
        turns = self.sessions.get(session.id)
        return turns.ready_within(seqs) if turns is not None else {}

    def busy_turns(self, session: MirroredSession) -> set[int]:
        own = self.sessions.get(session.id)
        return own.busy_turns() if own is not None else set()

    def folded(self, session: MirroredSession, turns: Iterable[int], checkpoint_seq: int) -> None:
        """A checkpoint folded these turns' compressed form: nothing of theirs lands any more."""
        own = self.sessions.get(session.id)
        if own is not None:
            own.folded(turns, checkpoint_seq)

    @asynccontextmanager
    async def rewrite_barrier(self, session: MirroredSession, open_turn: int | None,
                              timeout: float) -> AsyncIterator[None]:
        """The session compaction's side of the rewrite barrier: for as long as it is inside, no queued turn
        starts compressing and no pending marker starts landing; on entry it waits (bounded) for
        the markers landing and the compressions in flight, then lands what
        is ready into `open_turn` (None: lands nothing), so the range it selects is the surface
        as it will stay. A compression still running after `timeout` goes on; its landing is
        refused later if the checkpoint took its turn."""
        turns = self.sessions.get(session.id)
        if turns is None:
            yield
            return
        queue = turns.queue
        with queue.held():
            # a pending marker already on its way replaces its turn's first user node: a range
            # read before it lands would no longer be contiguous at the commit (the /compact
            # issued right at a turn's end); the ones not yet started wait for the release
            started = time.monotonic()
            if not await queue.markers_landed(timeout):
                log.warning("session %s: a pending marker still landing after %.0fs; the compaction goes on",
                            session.id, timeout)
            running = queue.running
            if running:
                listed = ", ".join(map(str, running))
                if await queue.settled(max(0.0, timeout - (time.monotonic() - started))):  # one budget for both
                    log.info("session %s: compaction waited %d ms for the compression of turn(s) %s", session.id,
                             (time.monotonic() - started) * 1000, listed)
                else:
                    log.warning("session %s: turn(s) %s still compressing after %.0fs; the compaction goes on without "
                                "them", session.id, listed, timeout)
            if open_turn is not None:  # everything ready lands now: the checkpoint may take what follows it
                await turns.land_ready(session, open_turn, open_step=_loop_step(session, open_turn))
            yield

    def close(self) -> list["asyncio.Task[None]"]:
        """Cancel every scheduler, job and pending-marker task for good; returns them to await."""
        tasks = [t for turns in self.sessions.values() for t in turns.queue.cancel()]
        for turns in self.sessions.values():
            for job in turns.jobs.values():
                if job.marking is not None and not job.marking.done():
                    job.marking.cancel()
                    tasks.append(job.marking)
        return tasks

    async def drained(self, session_id: str, timeout: float | None = None) -> bool:
        """Wait until no turn of the session is queued or compressing (landings may still wait;
        held turns wait for later turns)."""
        turns = self.sessions.get(session_id)
        return True if turns is None else await turns.queue.drained(timeout)
