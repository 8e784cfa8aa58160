"""Turn compression jobs end to end against the in-memory host: triggers, workers, landing."""

from __future__ import annotations

import asyncio
import json

import pytest

from fake_host import SESSION, FakeHost, WiredTurnService as TurnService, WorkerScript, attach_workers
from turn_builders import Shape, add_turn
from surface_builders import LogBuilder
from turn_memory.bridge.protocol import SessionEventsParams
from turn_memory.config import EngineConfig
from turn_memory.host.dialect import RC8, V02
from turn_memory.host.surface import SessionLog
from turn_memory.turns.markers import marker_of
from turn_memory.turns.recovery import turn_nodes

FOLD = ("replace_turn_nodes", {"from": "n1", "to": "n5", "nodes": [
    {"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "Fixed parse() on empty input."}]})
FINISH = ("finish_turn_compression", {})


def config(**turns) -> EngineConfig:
    # the builders' turns are a few hundred tokens: compress them (the policy has its own tests)
    return EngineConfig.model_validate({"turns": {"minTurnTokens": 0, **turns}})


def one_turn_host(dialect=RC8, shape: Shape | None = None) -> FakeHost:
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    if dialect.protects_system_head:
        b.system()  # 0.2.1: the system prompt is surface node 0, inside turn 1 (not a turn node)
    add_turn(b, shape or Shape())
    return FakeHost(dialect, b.events[:-1])  # everything but turn/end


async def complete_turn(host: FakeHost, service: TurnService, cfg: EngineConfig, turn: int = 1) -> None:
    """The agent ends the turn; the mirror forwards turn/end; the service reacts."""
    host.host_append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    new = host.log.events[host._sent:]
    params = SessionEventsParams(sessionId=SESSION, start=host._sent, count=len(new))
    events = host.mirror.receive(None, host.dialect, params, json.dumps(new).encode())
    host._sent = len(host.log)
    service.on_events(host.session, events, False, lambda: host, cfg)


async def next_turn_prestep(host: FakeHost, service: TurnService, cfg: EngineConfig, turn: int = 2,
                            step: int = 1) -> bool:
    """The next turn opens and its first pre-step runs (landing whatever is ready); like the
    0.2 agent loop, the step then opens and, if the pre-step asked, the engine is called from
    the step's agent/request. Returns whether it asked."""
    if step == 1:
        host.host_append("turn/start", {"turn": turn})
        host._forward()
    at_request = await service.pre_step(host.session, turn, step, cfg)
    host.host_append("step/start", {"turn": turn, "step": step})
    host._forward()
    if at_request:
        await service.at_request(host.session, turn, step)
    return at_request


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_turn_is_marked_pending_compressed_and_landed_in_the_next_prestep(dialect):
    host, service, cfg = one_turn_host(dialect), TurnService(), config()
    started = attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)
        pending = [marker_of(e) for e in host.log.events if marker_of(e)]
        assert pending == [("pending", 1)]
        await service.drained(SESSION, 5)  # ready; it lands at the next pre-step
        await next_turn_prestep(host, service, cfg)

    run(scenario())
    assert [s["mode"] for s in started] == ["fork"]
    assert "- n1 · user" in started[0]["prompt"] and {t["name"] for t in started[0]["tools"]} >= {"replace_turn_nodes"}
    nodes = turn_nodes(host.log, 1)
    # rc8 replaces in place in the pre-step; v02 lands inside the loop's first step of turn 2,
    # where turn 1 is still the tail: the user/assistant shape survives (D-019 mode 3)
    assert [host.log.message_of(s)["role"] for s in nodes] == ["user", "assistant"]
    assert marker_of(host.log.events[nodes[0]]) == ("compression", 1)
    if dialect is V02:
        assert host.log.events[host.log.nodes[0]]["type"] == "system/message"  # the head survives
    assert SessionLog(dialect, host.log.events).reload_problems == []  # still reloads


def test_v02_a_turn_ready_only_after_the_next_turn_started_lands_as_one_checkpoint():
    """Past the next turn's first step the landed turn is no longer the surface tail, and no
    step may hold an appended assistant: D-019 mode 4, one user checkpoint."""
    host, service, cfg = one_turn_host(V02), TurnService(), config()
    attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)
        host.host_append("turn/start", {"turn": 2})
        host.host_append("step/start", {"turn": 2, "step": 1})
        host.host_append("user/message", {"id": "u2", "role": "user", "content": [{"type": "text", "text": "next"}],
                                          "source": {"kind": "user"}}, surfaceOp="append")
        host.host_append("step/end", {"turn": 2, "step": 1})
        host._forward()
        assert await next_turn_prestep(host, service, cfg, step=2) is False

    run(scenario())
    nodes = turn_nodes(host.log, 1)
    assert [host.log.message_of(s)["role"] for s in nodes] == ["user"]
    assert marker_of(host.log.events[nodes[0]]) == ("compression", 1)
    assert SessionLog(V02, host.log.events).reload_problems == []


def test_a_worker_that_stops_after_progress_is_continued_by_a_spawn():
    host, service, cfg = one_turn_host(), TurnService(), config(workerAttempts=1)
    first = ("replace_turn_nodes", {"from": "n3", "to": "n4", "nodes": [{"role": "assistant", "content": "Ran tests."}]})
    second = ("replace_turn_nodes", {"from": "r1", "to": "n5", "nodes": [{"role": "assistant", "content": "Ran tests; fixed."}]})
    started = attach_workers(host, service, [WorkerScript([first], stop="completed"), WorkerScript([second, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)  # ready; it lands at the next pre-step
        await next_turn_prestep(host, service, cfg)

    run(scenario())
    assert [s["mode"] for s in started] == ["fork", "spawn"]
    assert "r1" in started[1]["prompt"]  # the spawn starts from the editor's current catalog
    assert [host.log.message_of(s)["role"] for s in turn_nodes(host.log, 1)] == ["user", "user", "assistant"]


def test_the_fixed_instructions_are_the_workers_system_prompt_and_the_task_holds_only_the_turn():
    # the worker's request is [its tools][its system prompt][inherited conversation][task]:
    # only what precedes the changing conversation can hit the provider's prefix cache, so
    # the instructions live in the system prompt, identical for every worker of every turn
    host, service, cfg = one_turn_host(), TurnService(), config(workerAttempts=1)
    first = ("replace_turn_nodes", {"from": "n3", "to": "n4", "nodes": [{"role": "assistant", "content": "Ran tests."}]})
    started = attach_workers(host, service, [WorkerScript([first], stop="completed"), WorkerScript([FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    run(scenario())
    fork, spawn = started
    assert fork["persona"] == spawn["persona"]
    for fixed in ("## What to produce", "Rules the host enforces", "## How to work", "operational payload"):
        assert fixed in fork["persona"]
        assert fixed not in fork["prompt"] and fixed not in spawn["prompt"]
    assert "turn 1" not in fork["persona"]  # nothing of this turn in what every worker shares
    assert "memory editor for turn 1 of" in fork["prompt"] and "- n1 · user" in fork["prompt"]
    assert len(fork["prompt"]) < len(fork["persona"])


def test_workers_without_progress_exhaust_the_budget_and_the_turn_stays_raw():
    host, service, cfg = one_turn_host(), TurnService(), config(workerAttempts=2)
    junk = [("replace_turn_nodes", "{broken json")] * 30
    scripts = [WorkerScript(junk), WorkerScript(junk), WorkerScript(junk)]
    started = attach_workers(host, service, list(scripts))
    raw = None

    async def scenario():
        nonlocal raw
        await complete_turn(host, service, cfg)
        raw = list(turn_nodes(host.log, 1))
        await service.drained(SESSION, 5)

    run(scenario())
    assert len(started) == 2  # budget of 2 consecutive no-progress workers
    # each worker was stopped at its request bound, every call refused with a clear error
    assert [len(s.answers) for s in scripts[:2]] == [24, 24]
    assert all(a.is_error and "not valid JSON" in a.text for s in scripts[:2] for a in s.answers)
    nodes = turn_nodes(host.log, 1)
    assert nodes[1:] == raw[1:] and marker_of(host.log.events[nodes[0]]) == ("pending", 1)  # only the marker landed

def test_turn_without_assistant_transcript_gets_a_noop_marker_and_no_worker():
    host, service, cfg = FakeHost(RC8, []), TurnService(), config()
    started = attach_workers(host, service, [])

    async def scenario():
        host.host_append("turn/start", {"turn": 1})
        host.host_append("user/message", {"id": "u", "role": "user", "source": {"kind": "user"},
                                          "content": [{"type": "text", "text": "hello?"}]}, surfaceOp="append")
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    run(scenario())
    assert started == []
    assert [marker_of(e) for e in host.log.events if marker_of(e)] == [("compression", 1)]


def test_recovery_redoes_pending_turns_once_and_never_marker_free_ones():
    host, service, cfg = one_turn_host(), TurnService(), config()
    host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    # a second, marker-free turn that predates the plugin
    b = LogBuilder(RC8, len(host.log))
    b.turn_no = 1
    add_turn(b, Shape(steps=[(0, False, False)], snapshot=False), "older")
    for e in b.events:
        host.host_append(e["type"], e["data"], **{k: v for k, v in e.items() if k not in ("type", "data", "seq", "time")})
    first_user = turn_nodes(SessionLog(RC8, host.log.events), 1)[0]
    from turn_memory.landing.land import stamp
    from turn_memory.turns.landing import pending_plan
    for e in stamp(host.log, pending_plan(host.log, first_user, 1).events):
        host.host_append(e["type"], e["data"], surfaceOp=e["surfaceOp"], sourceEventSeqs=e["sourceEventSeqs"])
    started = attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        host._forward()
        events = host.log.events
        service.on_events(host.session, list(events), True, lambda: host, cfg)
        await asyncio.sleep(0.05)
        await service.drained(SESSION, 5)
        await next_turn_prestep(host, service, cfg, turn=3)
        # a second resync (restart) finds nothing left to do
        service.on_events(host.session, list(host.log.events), True, lambda: host, cfg)
        await service.drained(SESSION, 5)

    run(scenario())
    assert len(started) == 1 and "turn 1" in started[0]["label"]
    marks = [marker_of(e) for e in host.log.events if marker_of(e)]
    assert marks == [("pending", 1), ("compression", 1)]


def test_workers_that_always_progress_but_never_finish_are_capped():
    host, service, cfg = one_turn_host(), TurnService(), config(maxWorkers=3)
    scripts = [WorkerScript([("replace_turn_nodes", {"from": "n5" if k == 0 else f"r{k}", "nodes": [
        {"role": "assistant", "content": f"version {k}"}]})]) for k in range(10)]
    started = attach_workers(host, service, scripts)

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    run(scenario())
    assert len(started) == 3  # progress resets the no-progress budget, never the hard cap
    assert [marker_of(e) for e in host.log.events if marker_of(e)] == [("pending", 1)]
