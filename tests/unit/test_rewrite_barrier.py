"""Issue 15: the pre-step never waits for the turn-rewrite queue unless a compaction will run;
a backlog clears at worker speed and one pre-step lands every ready turn, oldest first.

The engine's own pre-step against the in-memory host, with compression workers that finish
only when the test releases them."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import fake_host
from fake_host import FakeHost
from surface_builders import LogBuilder
from turn_builders import Shape, add_turn
from turn_memory.bridge.protocol import AgentOptions, MeasureResult, MeteredNode, PreStepParams, WorkerRunParams, WorkerRunResult
from turn_memory.compaction.policy import surface_prices
from turn_memory.config import EngineConfig
from turn_memory.engine import Engine
from turn_memory.host.dialects import RC8
from turn_memory.host.markers import marker_of

AGENT = AgentOptions(provider="deepseek-official", model="deepseek-v4-flash")
TURNS = 3
OPEN = TURNS + 1
# every built turn: user, snapshot, assistant + call (with reasoning), result, answer
FOLD_TURN = [("replace_turn_nodes", {"from": "n1", "to": "n5", "nodes": [
    {"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "Fixed parse()."}]}),
    ("finish_turn_compression", {})]
FOLD_SEGMENT = [("replace_session_memory", {"expected_revision": 0, "from": "P1", "nodes": [
    {"role": "user", "content": "CKPT-USER: fix the parser, three times."},
    {"role": "assistant", "content": "CKPT-ASSISTANT: parse() fixed."}]}), ("finish_session_segment", {})]



def config(policy: dict | None = None) -> EngineConfig:
    # the builders' turns are a few hundred tokens: compress them (the policy has its own
    # tests), one worker per turn of the backlog, one at a time (batching and concurrent jobs
    # have their own tests)
    turns = {"minTurnTokens": 0, "batchTurns": 1, "concurrentJobs": 1, "maxParts": 1, **(policy or {}).get("turns", {})}
    return EngineConfig.model_validate({**(policy or {}), "turns": turns})

class HostEngine(fake_host.HostEngine):
    """The in-memory host's engine, with a pre-step to drive."""

    async def pre_step(self, turn: int, step: int) -> None:
        params = PreStepParams(sessionId=self.host.session.id, logLength=len(self.host.log), turn=turn, step=step,
                               agentOptions=AGENT)
        await self._pre_step(self.host.session, params, self.config)


class Workers:
    """Plays every worker; a turn's compression finishes only once its gate is open."""

    def __init__(self, host: FakeHost, engine: Engine, gated: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.gates = {turn: asyncio.Event() for turn in gated}
        #: (what, log length when it started): "turn k" or "segment"
        self.started: list[tuple[str, int]] = []
        self.host, self.engine = host, engine
        host.run_worker = self.run  # type: ignore[method-assign]

    async def run(self, params: WorkerRunParams, timeout: float) -> WorkerRunResult:
        spec = params.model_dump()
        if any(t["name"] == "replace_turn_nodes" for t in spec["tools"]):
            turn = int(spec["label"].rsplit(" ", 1)[1])
            self.started.append((f"turn {turn}", len(self.host.log)))
            if turn in self.gates:
                await self.gates[turn].wait()
            calls = FOLD_TURN
        else:
            self.started.append(("segment", len(self.host.log)))
            calls = FOLD_SEGMENT
        for tool, args in calls:
            answer = self.engine.workers.call(spec["jobId"], spec["workerId"], tool, args)
            if answer.conclude:
                return WorkerRunResult(stop="concluded")
        return WorkerRunResult(stop="completed")

    def turns_started(self) -> list[str]:
        return [what for what, _ in self.started if what.startswith("turn")]


def backlog_host(pressure: bool) -> FakeHost:
    """Three completed turns (their turn/ends not yet seen by the engine), then turn 4 opens.

    pressure: the window's threshold sits at half of the surface, so a compaction is due
    even after every turn landed compressed; else far above it."""
    b = LogBuilder(RC8)
    b.add("permission/preset", {"preset": "workspace-write"})
    for _ in range(TURNS):
        add_turn(b, Shape())
    host = FakeHost(RC8, [])
    for event in b.events:
        host.host_append(event["type"], event["data"], **{k: v for k, v in event.items()
                                                          if k not in ("type", "data", "seq", "time")})
    total = sum(surface_prices(host.log).values())
    host.host_append("request/context", {"contextWindow": math.ceil(total / 2 / 0.8) if pressure else total * 10})
    host.measure = meter(host)  # type: ignore[attr-defined]
    return host


def meter(host: FakeHost):
    async def measure(session_id: str) -> MeasureResult:
        prices = surface_prices(host.log)
        return MeasureResult(totalTokens=sum(prices.values()),
                             nodes=[MeteredNode(seq=s, tokens=t) for s, t in prices.items()])
    return measure


def end_turns_and_open_the_next(host: FakeHost, engine: HostEngine) -> None:
    """The engine sees the three turn/ends (one queue, turns 1-3), and turn 4 opens."""
    host._forward()
    ends = [e for e in host.log.events if e["type"] == "turn/end"]
    engine.turns.on_events(host.session, ends, False, lambda: host, engine.config)
    host.host_append("turn/start", {"turn": OPEN})
    host._forward()


def marks(host: FakeHost, phase: str) -> list[tuple[int, int]]:
    """(turn, seq) of every marker of `phase`, in log order."""
    return [(m[1], e["seq"]) for e in host.log.events if (m := marker_of(e)) is not None and m[0] == phase]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_ready_job_does_not_hold_the_queue_and_one_prestep_lands_every_ready_turn_oldest_first():
    host = backlog_host(pressure=False)
    engine = HostEngine(host, config())
    workers = Workers(host, engine)

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        # no pre-step runs: the three workers still run back to back
        assert await engine.turns.drained(host.session.id, 5)
        assert workers.turns_started() == ["turn 1", "turn 2", "turn 3"]
        assert marks(host, "compression") == []  # ready, waiting for a pre-step to land
        await engine.pre_step(OPEN, 1)

    run(scenario())
    landed = marks(host, "compression")
    assert [turn for turn, _ in landed] == [1, 2, 3] and landed == sorted(landed, key=lambda m: m[1])
    assert engine.turns.sessions[host.session.id].jobs == {}


def test_below_the_threshold_the_prestep_does_not_wait_for_the_queue():
    host = backlog_host(pressure=False)
    engine = HostEngine(host, config())
    workers = Workers(host, engine, gated={1})

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        await asyncio.sleep(0.05)
        assert workers.turns_started() == ["turn 1"]  # in flight; turns 2 and 3 queued behind it
        began = time.monotonic()
        await engine.pre_step(OPEN, 1)
        await engine.pre_step(OPEN, 2)
        assert time.monotonic() - began < 0.2
        assert marks(host, "compression") == [] and engine.turns.sessions[host.session.id].queue.pending == [2, 3]
        # once the worker is let go the backlog clears, and the next pre-step lands it all
        workers.gates[1].set()
        assert await engine.turns.drained(host.session.id, 5)
        await engine.pre_step(OPEN, 3)

    run(scenario())
    assert [turn for turn, _ in marks(host, "compression")] == [1, 2, 3]


def test_at_pressure_the_prestep_waits_for_the_rewrite_in_flight_and_no_longer():
    host = backlog_host(pressure=True)
    engine = HostEngine(host, config())
    workers = Workers(host, engine, gated={1, 2, 3})

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        await asyncio.sleep(0.05)
        step = asyncio.create_task(engine.pre_step(OPEN, 1))
        await asyncio.sleep(0.2)
        # a compaction is due: it waits for turn 1's rewrite before it reads the range
        assert not step.done() and not [e for e in host.log.events if e["type"] == "compaction/start"]
        workers.gates[1].set()
        # ... and no longer: turns 2 and 3 stay gated, yet the step goes on and compacts
        await asyncio.wait_for(step, 5)
        for turn in (2, 3):
            workers.gates[turn].set()
        await engine.turns.drained(host.session.id, 5)

    run(scenario())
    events = host.log.events
    (start,) = [e["seq"] for e in events if e["type"] == "compaction/start"]
    (end,) = [e for e in events if e["type"] == "compaction/end"]
    assert "error" not in end["data"]
    # turn 1 landed before the range was read; no other turn started rewriting under it
    assert [turn for turn, seq in marks(host, "compression") if seq < start] == [1]
    assert [what for what, at in workers.started if at <= end["seq"]] == ["turn 1", "segment"]


def test_at_pressure_a_rewrite_that_stays_in_flight_is_waited_for_only_rewrite_wait_s():
    host = backlog_host(pressure=True)
    engine = HostEngine(host, config({"compaction": {"rewriteWaitS": 0.3}}))
    workers = Workers(host, engine, gated={1})

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        await asyncio.sleep(0.05)
        began = time.monotonic()
        await engine.pre_step(OPEN, 1)
        waited = time.monotonic() - began
        assert 0.3 <= waited < 1.5, waited
        workers.gates[1].set()
        await engine.turns.drained(host.session.id, 5)

    run(scenario())
    assert [e for e in host.log.events if e["type"] == "compaction/start"]
    assert workers.turns_started()[0] == "turn 1"


def test_the_landing_barrier_keeps_the_next_request_carrying_the_previous_turn():
    host = backlog_host(pressure=False)
    engine = HostEngine(host, config({"turns": {"landingBarrier": True}}))
    workers = Workers(host, engine, gated={1})

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        await asyncio.sleep(0.05)
        step = asyncio.create_task(engine.pre_step(OPEN, 1))
        await asyncio.sleep(0.1)
        assert not step.done()  # waits for turn 3, the previous turn, queued behind turn 1
        workers.gates[1].set()
        await asyncio.wait_for(step, 5)

    run(scenario())
    assert [turn for turn, _ in marks(host, "compression")] == [1, 2, 3]


def test_the_handshake_bounds_the_prestep_by_the_waits_that_exist():
    from turn_memory.bridge.protocol import HelloParams
    from turn_memory.bridge.server import Peer

    async def hello(policy: dict[str, Any]):
        params = HelloParams(protocol=1, dshVersion="0.1.0-rc.8", dialect="rc8", secret="s", pid=1,
                             checkpointSource={"kind": "plugin", "plugin": "compact", "compactionId": "probe"},
                             config=policy)
        return Engine().on_hello(Peer(b"p"), params)

    default = asyncio.run(hello({}))
    barrier = asyncio.run(hello({"turns": {"landingBarrier": True, "landingWaitS": 7}}))
    manual_only = asyncio.run(hello({"compaction": {"auto": False}}))
    no_waits = asyncio.run(hello({"compaction": {"auto": False}, "turnContinuation": {"enabled": False}}))
    # no landing wait by default, so the shim never waits for a booting engine either
    assert not default.bootWait and barrier.bootWait
    # by default only an automatic continuation's first step waits (turns.landingWaitS) for its hand-off turn
    assert default.preStepTimeoutMs - barrier.preStepTimeoutMs == 30000 - 7000
    assert manual_only.preStepTimeoutMs == 2000 + 30000
    assert no_waits.preStepTimeoutMs == 2000  # neither a landing nor a compaction can hold a step
