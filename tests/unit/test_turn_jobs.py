"""Turn compression jobs end to end against the in-memory host: triggers, workers, landing."""

from __future__ import annotations

import asyncio

import pytest

from engine_harness import EngineHarness, forward
from fake_host import SESSION, FakeHost, WorkerScript, attach_workers
from turn_builders import Shape, add_turn
from surface_builders import LogBuilder
from turn_memory.bridge.protocol import WorkerRunResult
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns.recovery import turn_nodes, turns_to_recover
from turn_memory.turns.results import ResultStore
from turn_memory.turns.service import TurnService
from turn_memory.inspection.report import inspect_log
from test_inspect import write_plain

FOLD = ("replace_turn_nodes", {"from": "n1", "to": "n5", "nodes": [
    {"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "Fixed parse() on empty input."}]})
FINISH = ("finish_turn_compression", {})


def config(**turns) -> EngineConfig:
    # the builders' turns are a few hundred tokens: compress them (the policy has its own tests)
    # one worker per turn: gated workers would read as slow ones and split turns (tests/unit/test_turn_split.py)
    return EngineConfig.model_validate({"turns": {"minTurnTokens": 0, "maxParts": 1, **turns}})


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
    forward(host, cfg, service)


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
def test_turn_is_compressed_and_landed_in_the_next_prestep_without_a_pending_marker(dialect):
    # v02 with workers that may rewrite assistants (`turns.assistantNodes=rewrite`: the tail form)
    host, service, cfg = one_turn_host(dialect), EngineHarness().turns, config(assistantNodes="rewrite")
    started = attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)
        assert marks(host) == [] and owed(service) == {1: "pending"}  # nothing lands at turn/end
        await service.drained(SESSION, 5)  # ready; it lands at the next pre-step, instead of the marker
        await next_turn_prestep(host, service, cfg)
        assert owed(service) == {}

    run(scenario())
    assert [s["mode"] for s in started] == ["spawn"]
    assert "- n1 · user" in started[0]["prompt"] and "You start fresh" in started[0]["prompt"] and {t["name"] for t in started[0]["tools"]} >= {"replace_turn_nodes"}
    nodes = turn_nodes(host.log, 1)
    # rc8 replaces in place in the pre-step; v02 lands inside the loop's first step of turn 2,
    # where turn 1 is still the tail: the user/assistant shape survives (mode 3)
    assert [host.log.message_of(s)["role"] for s in nodes] == ["user", "assistant"]
    assert marker_of(host.log.events[nodes[0]]) == ("compression", 1)
    assert ("pending", 1) not in marks(host)  # its landing came first: the log never needed the marker
    if dialect is V02:
        assert host.log.events[host.log.nodes[0]]["type"] == "system/message"  # the head survives
    assert SessionLog(dialect, host.log.events).reload_problems == []  # still reloads


def test_v02_a_turn_ready_only_after_the_next_turn_started_lands_as_one_checkpoint(tmp_path):
    """Past the next turn's first step the landed turn is no longer the surface tail, and no
    step may hold an appended assistant: with `turns.shapeWaitTurns` 0 it lands at once, as
    one user checkpoint (mode 4)."""
    host, service, cfg = one_turn_host(V02), EngineHarness().turns, config(shapeWaitTurns=0, assistantNodes="rewrite")
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
    report = inspect_log(write_plain(tmp_path / "session.v4.jsonl", host.log.events, V02))
    assert [(t["turn"], t["landing"]) for t in report["turns"]][0] == (1, "flattened")


IN_PLACE = [("replace_turn_nodes", {"from": "n1", "to": "n2", "nodes": [{"role": "user", "content": "Fix the parser."}]}),
            ("replace_turn_nodes", {"from": "n4", "nodes": [{"role": "tool", "content": "a.txt b.txt"}]}), FINISH]


def test_v02_a_turn_ready_turns_later_lands_in_place_keeping_its_assistants_and_its_shape(tmp_path):
    """The default on 0.2 (`turns.assistantNodes` auto): the worker leaves the assistant nodes
    as they are, so a compression that is ready only after the next turn ran (the turn is no
    longer the surface tail) lands node by node where it stands: user, assistant, tool,
    assistant, nothing appended, the later turn untouched, and the log reloads."""
    host, service, cfg = one_turn_host(V02), EngineHarness().turns, config()
    slow = asyncio.Event()
    started = attach_workers(host, service, [WorkerScript(IN_PLACE, gate=slow)])

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)
        assert await next_turn_prestep(host, service, cfg, turn=2) is False  # not ready yet
        play_turn(host, 2, started=True)
        await complete_turn(host, service, cfg, turn=2)
        slow.set()
        await service.drained(SESSION, 5)
        turn2 = [host.log.events[s]["seq"] for s in turn_nodes(host.log, 2)]
        await next_turn_prestep(host, service, cfg, turn=3)
        # turn 2 (no worker for it) gets only the pending marker it owed: its first node
        after = turn_nodes(host.log, 2)
        assert [host.log.events[s]["seq"] for s in after[1:]] == turn2[1:]
        assert marker_of(host.log.events[after[0]]) == ("pending", 2)

    before = [e["seq"] for e in host.log.events if e["type"] == "assistant/message"]
    run(scenario())
    assert "· assistant · assistant with 1 tool call, raw reasoning · fixed ·" in started[0]["prompt"]
    assert "Assistant nodes stay as they are" in started[0]["prompt"]
    nodes = turn_nodes(host.log, 1)
    assert shapes(host, 1) == [["user", "assistant", "tool", "assistant"]]
    assert [s for s in nodes if host.log.events[s]["type"] == "assistant/message"] == before
    assert marker_of(host.log.events[nodes[0]]) == ("compression", 1)
    assert [b.get("text") for b in V02.tool_result_blocks(host.log.message_of(nodes[2]))] == ["a.txt b.txt"]
    landing = [e for e in host.log.events if e["seq"] >= nodes[0] and e["type"] != "step/start"]  # the loop's next step
    assert [(e["type"], e.get("surfaceOp") == "append") for e in landing] == [("user/message", False),
                                                                              ("tool/result", False)]
    log = SessionLog(V02, host.log.events)
    assert log.reload_problems == []
    # the kept assistant's raw reasoning is by design: neither a restart nor inspect takes it for a stale landing
    assert host.log.events[nodes[0]]["data"]["source"]["keptAssistants"] is True
    assert turns_to_recover(log) == [2]  # turn 2 had no worker script: pending; turn 1 is done
    report = inspect_log(write_plain(tmp_path / "session.v4.jsonl", host.log.events, V02))
    assert [(t["turn"], t["state"], t["landing"]) for t in report["turns"]][0] == (1, "compressed", "in-place")


def test_v02_a_turn_ready_while_it_still_ends_the_surface_lands_in_place_not_at_the_tail():
    """The default keeps the assistant nodes, so even a turn that could take the tail form (it
    ends the surface at the next turn's first step) lands in place: nothing is appended into
    the person's next turn (DSH's chat would drop that turn's usage badge and fold)."""
    host, service, cfg = one_turn_host(V02), EngineHarness().turns, config()
    attach_workers(host, service, [WorkerScript(IN_PLACE)])
    before = len(host.log.events)

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)
        await next_turn_prestep(host, service, cfg, turn=2)

    run(scenario())
    assert shapes(host, 1) == [["user", "assistant", "tool", "assistant"]]
    ours = [e for e in host.log.events[before:] if e["type"] in ("user/message", "assistant/message", "tool/result",
                                                                   "tool/call")]
    assert [(e["type"], e.get("surfaceOp") == "append") for e in ours] == [
        ("user/message", False), ("tool/result", False)]  # the landing alone: no pending marker before it
    assert SessionLog(V02, host.log.events).reload_problems == []


def fold(turn: int) -> tuple[str, dict]:
    return ("replace_turn_nodes", {"from": "n1", "to": "n5" if turn == 1 else "n2", "nodes": [
        {"role": "user", "content": f"Task {turn}, in short."}, {"role": "assistant", "content": f"Did {turn}."}]})


def play_turn(host: FakeHost, turn: int, *, started: bool = False) -> None:
    """The agent loop runs one more turn (a user message and an answer), up to its turn/end."""
    b = LogBuilder(host.dialect, len(host.log))
    b.turn_no, b.step_no = turn, 1
    if not started:
        b.add("turn/start", {"turn": turn})
        b.add("step/start", {"turn": turn, "step": 1})
    b.user(f"task {turn}: " + "please look at the lexer as well " * 4)
    b.assistant(f"answer {turn}: " + "the lexer handles empty input " * 4)
    b.add("step/end", {"turn": turn, "step": 1})
    for e in b.events:
        host.host_append(e["type"], e["data"], **{k: v for k, v in e.items() if k not in ("type", "seq", "time", "data")})
    host._forward()


def shapes(host: FakeHost, *turns: int) -> list[list[str]]:
    return [[host.log.message_of(s)["role"] for s in turn_nodes(host.log, t)] for t in turns]


def compression_markers(events) -> list[tuple[str, int]]:
    return [m for e in events if (m := marker_of(e)) is not None and m[0] == "compression"]


def test_v02_turns_ready_by_a_turns_start_land_as_one_block_each_keeping_its_shape(tmp_path):
    """Turn 1's worker is slow, turn 2's fast: by turn 3's first request both are ready and
    reach the surface tail together, so they land as one plan inside that step (one cache
    break), each as user + assistant, and recovery finds nothing to redo."""
    host, service, cfg = one_turn_host(V02), EngineHarness().turns, config(batchTurns=1, assistantNodes="rewrite")
    slow = asyncio.Event()
    attach_workers(host, service, [WorkerScript([fold(1), FINISH], gate=slow), WorkerScript([fold(2), FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)  # turn 1's worker has started (and waits)
        assert await next_turn_prestep(host, service, cfg, turn=2) is False  # nothing ready yet
        play_turn(host, 2, started=True)
        await complete_turn(host, service, cfg, turn=2)
        await asyncio.sleep(0.05)
        slow.set()
        await service.drained(SESSION, 5)
        assert await next_turn_prestep(host, service, cfg, turn=3) is True  # deferred to the step's request

    run(scenario())
    assert shapes(host, 1, 2) == [["user", "assistant"], ["user", "assistant"]]
    assert compression_markers(host.applied[-1]) == [("compression", 1), ("compression", 2)]
    assert sum(1 for plan in host.applied if compression_markers(plan)) == 1
    assert turns_to_recover(host.log) == []
    assert SessionLog(V02, host.log.events).reload_problems == []
    report = inspect_log(write_plain(tmp_path / "session.v4.jsonl", host.log.events, V02))
    assert [(t["turn"], t["landing"]) for t in report["turns"]][:2] == [(1, "tail"), (2, "tail")]


def test_v02_a_ready_turn_waits_for_the_next_turns_start_to_land_with_the_turn_after_it():
    """Turn 1 is ready only in turn 2's second step: landing then would flatten it (turn 2
    follows it). With `turns.shapeWaitTurns` 1 it waits, and lands with turn 2 at turn 3's
    first request, both keeping their shape."""
    host, service, cfg = one_turn_host(V02), EngineHarness().turns, config(shapeWaitTurns=1, batchTurns=1, assistantNodes="rewrite")
    slow = asyncio.Event()
    attach_workers(host, service, [WorkerScript([fold(1), FINISH], gate=slow), WorkerScript([fold(2), FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await next_turn_prestep(host, service, cfg, turn=2)
        play_turn(host, 2, started=True)
        slow.set()
        await service.drained(SESSION, 5)
        assert await next_turn_prestep(host, service, cfg, turn=2, step=2) is False
        assert compression_markers(host.log.events) == []  # it waited
        host.host_append("step/end", {"turn": 2, "step": 2})
        await complete_turn(host, service, cfg, turn=2)
        await service.drained(SESSION, 5)
        assert await next_turn_prestep(host, service, cfg, turn=3) is True

    run(scenario())
    assert shapes(host, 1, 2) == [["user", "assistant"], ["user", "assistant"]]


@pytest.mark.parametrize("wait_turns", [1, 2])
def test_v02_a_ready_turn_stops_waiting_for_its_shape_at_the_shape_wait_turns_th_turn_start(wait_turns):
    """Turn 2's worker never finishes in time, so no block can take turn 1: it lands as one
    user message at the `turns.shapeWaitTurns`-th turn start after it was ready (turn 3's
    start for 1, turn 4's for 2), and not before."""
    host, service, cfg = one_turn_host(V02), EngineHarness().turns, config(shapeWaitTurns=wait_turns, batchTurns=1, assistantNodes="rewrite")
    stuck = asyncio.Event()
    attach_workers(host, service, [WorkerScript([fold(1), FINISH]), WorkerScript([fold(2), FINISH], gate=stuck)])
    landed_at: list[int] = []

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)
        play_turn(host, 2)  # turn 1 was ready before turn 2, but its pre-step ran without us
        await complete_turn(host, service, cfg, turn=2)
        for turn in (3, 4):
            assert await next_turn_prestep(host, service, cfg, turn=turn) is False
            if compression_markers(host.log.events) and not landed_at:
                landed_at.append(turn)
            play_turn(host, turn, started=True)
            await complete_turn(host, service, cfg, turn=turn)
        stuck.set()
        await service.drained(SESSION, 5)

    run(scenario())
    assert landed_at == [2 + wait_turns]
    assert compression_markers(host.log.events)[0] == ("compression", 1)
    assert shapes(host, 1) == [["user"]]
    assert SessionLog(V02, host.log.events).reload_problems == []


def test_a_worker_that_stops_after_progress_is_continued_by_a_spawn():
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(workerAttempts=1)
    first = ("replace_turn_nodes", {"from": "n3", "to": "n4", "nodes": [{"role": "assistant", "content": "Ran tests."}]})
    second = ("replace_turn_nodes", {"from": "r1", "to": "n5", "nodes": [{"role": "assistant", "content": "Ran tests; fixed."}]})
    started = attach_workers(host, service, [WorkerScript([first], stop="completed"), WorkerScript([second, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)  # ready; it lands at the next pre-step
        await next_turn_prestep(host, service, cfg)

    run(scenario())
    assert [s["mode"] for s in started] == ["spawn", "spawn"]
    assert "r1" in started[1]["prompt"]  # the spawn starts from the editor's current catalog
    assert [host.log.message_of(s)["role"] for s in turn_nodes(host.log, 1)] == ["user", "user", "assistant"]


def test_the_fixed_instructions_are_the_workers_system_prompt_and_the_task_holds_only_the_turn():
    # the worker's request is [its tools][its system prompt][inherited conversation][task]:
    # only what precedes the changing conversation can hit the provider's prefix cache, so
    # the instructions live in the system prompt, identical for every worker of every turn
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(workerAttempts=1)
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
    # the session's own allowance out of the way: this is about one job's bounds (tests/unit/test_turn_breaker.py)
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(workerAttempts=2, failingRequests=1000)
    junk = [("replace_turn_nodes", f"{{broken json {k}") for k in range(30)]  # never the same call twice
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
    assert turn_nodes(host.log, 1) == raw and owed(service) == {1: "pending"}  # nothing landed; it owes its marker

def test_turn_without_assistant_transcript_gets_a_noop_marker_and_no_worker():
    host, service, cfg = FakeHost(RC8, []), EngineHarness().turns, config()
    started = attach_workers(host, service, [])

    async def scenario():
        host.host_append("turn/start", {"turn": 1})
        host.host_append("user/message", {"id": "u", "role": "user", "source": {"kind": "user"},
                                          "content": [{"type": "text", "text": "hello?"}]}, surfaceOp="append")
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)
        assert marks(host) == [] and owed(service) == {1: "no-op"}
        await next_turn_prestep(host, service, cfg)

    run(scenario())
    assert started == []
    assert marks(host) == [("compression", 1)] and owed(service) == {}  # its no-op marker, at the next landing point


def test_recovery_redoes_pending_turns_once_and_never_marker_free_ones():
    host, service, cfg = one_turn_host(), EngineHarness().turns, config()
    host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    # a second, marker-free turn that predates the plugin
    b = LogBuilder(RC8, len(host.log))
    b.turn_no = 1
    add_turn(b, Shape(steps=[(0, False, False)], snapshot=False), "older")
    for e in b.events:
        host.host_append(e["type"], e["data"], **{k: v for k, v in e.items() if k not in ("type", "data", "seq", "time")})
    first_user = turn_nodes(SessionLog(RC8, host.log.events), 1)[0]
    from turn_memory.runtime.land import stamp
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


def test_workers_that_always_progress_but_never_finish_are_capped(caplog):
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(maxWorkers=3)
    scripts = [WorkerScript([("replace_turn_nodes", {"from": "n5" if k == 0 else f"r{k}", "nodes": [
        {"role": "assistant", "content": f"version {k}"}]})]) for k in range(10)]
    started = attach_workers(host, service, scripts)

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    with caplog.at_level("INFO", logger="turn_memory.turns"):
        run(scenario())
    assert len(started) == 3  # progress resets the no-progress budget, never the hard cap
    assert "turn 1: gave up: 3 workers, the cap (turns.maxWorkers)" in caplog.text
    assert marks(host) == [] and owed(service) == {1: "pending"}


# -- issue 12: nothing lost, nothing paid twice, nothing stuck ------------------------------
def add_raw_turn(host: FakeHost, turn: int, text: str = "now the lexer") -> None:
    """Turn `turn` runs: the user's request and the agent's answer (its turn/end not yet)."""
    host.host_append("turn/start", {"turn": turn})
    host.host_append("step/start", {"turn": turn, "step": 1})
    host.host_append("user/message", {"id": f"u{turn}", "role": "user", "source": {"kind": "user"},
                                      "content": [{"type": "text", "text": text + " please " * 20}]}, surfaceOp="append")
    host.host_append("assistant/message", host.dialect.assistant_data(turn, 1, {
        "id": f"a{turn}", "role": "assistant", "source": {"kind": "model", "provider": "p", "model": "m"},
        "content": [{"type": "text", "text": "Done with the lexer. " + "details " * 30}]}), surfaceOp="append")
    host.host_append("step/end", {"turn": turn, "step": 1})
    host._forward()


def marks(host: FakeHost) -> list[tuple[str, int]]:
    return [m for e in host.log.events if (m := marker_of(e))]


def owed(service: TurnService) -> dict[int, str]:
    """The markers the session's turns owe the log (`turns.marking`)."""
    return service.sessions[SESSION].owed


def gated(host: FakeHost) -> asyncio.Event:
    """Hold every worker until the returned gate opens."""
    gate, run_worker = asyncio.Event(), host.run_worker

    async def slow(*args):
        await gate.wait()
        return await run_worker(*args)

    host.run_worker = slow  # type: ignore[method-assign]
    return gate


def test_a_turn_that_ends_while_an_earlier_one_compresses_is_journaled_at_once(tmp_path):
    """A turn is journaled at turn/end, not when its own job starts, so a DSH that stops while
    turn 1 still compresses can still recover turn 2; the log gets no marker after a turn (DSH's
    Trajectory would open a phantom turn), and the pending marker lands at the next turn's
    landing point only for the turn whose rewrite is not ready."""
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(concurrentJobs=1)
    store = ResultStore(tmp_path / "dsh-home")
    attach_workers(host, service, [WorkerScript([FOLD, FINISH]), WorkerScript([FINISH])])
    gate = gated(host)

    async def scenario():
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        forward(host, cfg, service, results=store)  # turn 1: its worker is held
        await asyncio.sleep(0.05)
        add_raw_turn(host, 2)
        host.host_append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
        forward(host, cfg, service, results=store)
        await asyncio.sleep(0.05)
        assert marks(host) == []  # while turn 1 is still compressing
        assert store.owed(SESSION) == {1: "pending", 2: "pending"}
        assert turns_to_recover(host.log, owed=store.owed(SESSION)) == [1, 2]  # what a restart now would redo
        await next_turn_prestep(host, service, cfg, turn=3)
        # turn 2 waits for a job slot: its marker lands; turn 1's worker reads it: its positions stay
        assert marks(host) == [("pending", 2)]
        assert store.owed(SESSION) == {1: "pending"}
        gate.set()
        await service.drained(SESSION, 5)
        await next_turn_prestep(host, service, cfg, turn=3, step=2)

    run(scenario())
    assert marks(host) == [("pending", 2), ("compression", 1), ("compression", 2)] and store.owed(SESSION) == {}


def results_host(tmp_path):
    host, cfg = one_turn_host(), config()
    store = ResultStore(tmp_path / "dsh-home")
    return host, cfg, store


def reopen(host: FakeHost, service: TurnService, cfg: EngineConfig, store: ResultStore | None) -> None:
    """The shim resends the whole log (a restart, a reopened session): a fresh mirror entry."""
    host.mirror.close(SESSION)
    forward(host, cfg, service, reset=True, results=store)


def test_a_finished_compression_survives_a_restart_and_lands_without_workers(tmp_path, caplog):
    """The last turn before DSH stops is ready but cannot land (no later turn): the next
    process lands the kept result at its first landing point instead of paying its workers again."""
    host, cfg, store = results_host(tmp_path)
    first = EngineHarness().turns
    started = attach_workers(host, first, [WorkerScript([FOLD, FINISH])])

    async def before_the_stop():
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        host._forward()
        first.on_events(host.session, host.log.events[-1:], False, lambda: host, cfg, store)
        await first.drained(SESSION, 5)
        for queue in [t.queue for t in first.sessions.values()]:
            queue.cancel()

    run(before_the_stop())
    assert len(started) == 1 and store.turns(SESSION) == [1]
    assert marks(host) == [] and store.owed(SESSION) == {1: "pending"}  # DSH stopped before any later turn

    second = EngineHarness().turns
    again = attach_workers(host, second, [WorkerScript([FOLD, FINISH])])

    async def after_the_restart():
        reopen(host, second, cfg, store)
        await second.drained(SESSION, 5)
        await next_turn_prestep(host, second, cfg)

    with caplog.at_level("INFO", logger="turn_memory.turns"):
        run(after_the_restart())
    assert again == []  # no worker ran again
    nodes = turn_nodes(host.log, 1)
    assert [host.log.message_of(s)["role"] for s in nodes] == ["user", "assistant"]
    assert marker_of(host.log.events[nodes[0]]) == ("compression", 1)
    assert "Fixed parse() on empty input." in host.log.message_of(nodes[1])["content"][0]["text"]
    assert store.turns(SESSION) == [] and store.owed(SESSION) == {}  # deleted once landed
    assert "restored its finished compression" in caplog.text and "0 model request(s)" in caplog.text
    assert SessionLog(RC8, host.log.events).reload_problems == []


def test_a_kept_compression_whose_turn_moved_is_dropped_and_the_turn_redone(tmp_path, caplog):
    host, cfg, store = results_host(tmp_path)
    first = EngineHarness().turns
    attach_workers(host, first, [WorkerScript([FOLD, FINISH])])

    async def before_the_stop():
        await complete_turn(host, first, cfg)
        first.on_events(host.session, [], False, lambda: host, cfg, store)
        await first.drained(SESSION, 5)

    # the first process had no store yet: keep one by hand for a surface that no longer is
    run(before_the_stop())
    from turn_memory.turns.results import make_record
    job_positions = turn_nodes(host.log, 1)
    record = make_record(host.log, SESSION, 1, job_positions[:-1], [], 1, ["fork"], 3)
    store.save(SESSION, 1, record)
    second = EngineHarness().turns
    again = attach_workers(host, second, [WorkerScript([FOLD, FINISH])])

    async def after_the_restart():
        reopen(host, second, cfg, store)
        await second.drained(SESSION, 5)
        await next_turn_prestep(host, second, cfg)

    with caplog.at_level("INFO", logger="turn_memory.turns"):
        run(after_the_restart())
    assert len(again) == 1  # redone by a worker
    assert "dropped the saved compression (stale: the turn's surface moved" in caplog.text
    assert marker_of(host.log.events[turn_nodes(host.log, 1)[0]]) == ("compression", 1)
    assert store.turns(SESSION) == []


def test_a_kept_compression_of_a_turn_that_already_landed_is_deleted_on_resync(tmp_path, caplog):
    host, cfg, store = results_host(tmp_path)
    service = EngineHarness().turns
    attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)
        await next_turn_prestep(host, service, cfg)  # landed (no store: nothing kept)
        store.save(SESSION, 1, {"version": 1, "turn": 1})  # e.g. a process died between landing and deleting it
        reopen(host, service, cfg, store)
        await service.drained(SESSION, 5)

    with caplog.at_level("INFO", logger="turn_memory.turns"):
        run(scenario())
    assert store.turns(SESSION) == [] and "stale: the turn already landed" in caplog.text


def two_node_host() -> FakeHost:
    b = LogBuilder(RC8)
    b.add("permission/preset", {"preset": "workspace-write"})
    b.turn_no = 1
    b.add("turn/start", {"turn": 1})
    b.step_no = 1
    b.add("step/start", {"turn": 1, "step": 1})
    b.user("Fix the parser, please.")
    b.assistant("Fixed parse() on empty input.")
    b.add("step/end", {"turn": 1, "step": 1})
    return FakeHost(RC8, b.events)


def test_restating_a_refused_rewrite_is_no_progress():
    """One 2-node turn, every worker restating the same over-long rewrite that finish refuses:
    it used to reset the budget every worker (8 workers, 192 requests); now the job gives up
    after `workerAttempts` workers."""
    host, service, cfg = two_node_host(), EngineHarness().turns, config()
    long_fold = {"role": "assistant", "content": "Fixed parse() on empty input; " + "in great detail, " * 60}
    ask = {"role": "user", "content": "Fix the parser, please, and explain everything at length " * 3}

    def worker(first_id: str) -> WorkerScript:
        rest = [("list_turn_nodes", {})] * 20  # and then it keeps looking until its request bound
        return WorkerScript([("replace_turn_nodes", {"from": first_id, "to": first_id.replace("1", "2") if first_id == "n1"
                                                     else f"r{int(first_id[1:]) + 1}", "nodes": [ask, long_fold]}),
                             FINISH, *rest])

    scripts = [worker("n1")] + [worker(f"r{2 * k + 1}") for k in range(10)]
    started = attach_workers(host, service, list(scripts))

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    run(scenario())
    assert len(started) == 3  # workerAttempts, not maxWorkers
    job_log = [a for s in scripts[:3] for a in s.answers]
    assert sum(1 for a in job_log if a.is_error and "longer than what they replace" in a.text) == 3
    assert marks(host) == [] and owed(service) == {1: "pending"}


def test_a_job_stops_at_its_request_budget_even_while_its_workers_progress(caplog):
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(maxJobRequests=10, maxWorkerRequests=4)
    scripts = [WorkerScript([("replace_turn_nodes", {"from": "n5" if k == 0 else f"r{k}", "nodes": [
        {"role": "assistant", "content": f"version {k}"}]}), *[("list_turn_nodes", {})] * 10]) for k in range(10)]
    started = attach_workers(host, service, scripts)

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    with caplog.at_level("INFO", logger="turn_memory.turns"):
        run(scenario())
    # 4 + 4 requests, then a third worker bounded to the 2 left: 10 in all
    assert [s["maxRequests"] for s in started] == [4, 4, 2]
    assert "gave up: 10 model requests, the job's budget (turns.maxJobRequests)" in caplog.text
    assert "3 worker(s) (spawn, spawn, spawn), 10 model request(s)" in caplog.text
    assert marks(host) == [] and owed(service) == {1: "pending"}


def test_a_job_stops_at_its_wall_clock_budget():
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(jobTimeoutS=0.3)
    timeouts: list[float] = []

    async def slow_worker(params, timeout):
        timeouts.append(timeout)
        await asyncio.sleep(min(timeout, 0.2))
        return WorkerRunResult(stop="completed", requests=1)

    host.run_worker = slow_worker  # type: ignore[method-assign]

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    run(scenario())
    assert len(timeouts) == 2 and timeouts[0] <= 0.3 and timeouts[1] < 0.2  # the second only got what was left
    assert marks(host) == [] and owed(service) == {1: "pending"}


def test_a_finished_job_lands_in_a_session_reopened_in_the_same_process():
    """The agent is disposed (the shim closes the session) and the session reopened: the ready
    job used to read the closed mirror entry and be refused as 'no longer open' for good."""
    host, service, cfg = one_turn_host(), EngineHarness().turns, config()
    started = attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)  # ready, waiting for a later turn
        reopen(host, service, cfg, None)  # agent/disposed, then agent/created for the same session
        await service.drained(SESSION, 5)
        await next_turn_prestep(host, service, cfg)

    run(scenario())
    assert len(started) == 1
    assert marker_of(host.log.events[turn_nodes(host.log, 1)[0]]) == ("compression", 1)


def test_a_landing_that_cannot_happen_now_lands_at_the_next_landing_point():
    host, service, cfg = one_turn_host(), EngineHarness().turns, config()
    attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)
        host.host_append("turn/start", {"turn": 2})
        host._forward()
        await service.pre_step(host.session, 3, 1, cfg)  # a stale turn number: turn 3 is not open
        assert marks(host) == []
        await service.pre_step(host.session, 2, 1, cfg)

    run(scenario())
    assert marks(host) == [("compression", 1)]


class CountingEvents(list):
    """A log's events that count how many of them a reader walks."""

    walked = 0

    def __iter__(self):
        for event in super().__iter__():
            CountingEvents.walked += 1
            yield event

    def __reversed__(self):
        for event in super().__reversed__():
            CountingEvents.walked += 1
            yield event

    def __getitem__(self, key):
        if isinstance(key, slice):
            CountingEvents.walked += len(range(*key.indices(len(self))))
        return super().__getitem__(key)


def test_a_resync_never_walks_the_whole_log(tmp_path):
    """Recovery used to fold the whole log once per landed turn (7.4 s at 400 turns); now it
    reads the log's index: a resync walks at most the open turn's events."""
    from turn_memory.continuation.dispatch import FollowupDispatcher
    from turn_memory.devtools.synthetic_log import write_synthetic_log
    from turn_memory.logs.reader import read_session_log

    path = tmp_path / "s.jsonl.zstd"
    write_synthetic_log(path, turns=60)
    _, events = read_session_log(path)
    events = [e if e["type"] != "assistant/chunk" else {**e, "data": None} for e in events]
    host = FakeHost(RC8, events)
    session = host.session
    session.log.events = CountingEvents(session.log.events)
    service, cfg = EngineHarness().turns, config()
    dispatcher = FollowupDispatcher(service)

    async def scenario():
        CountingEvents.walked = 0
        service.on_events(session, [], True, lambda: host, cfg)
        dispatcher.on_events(session, [], True, lambda: host, cfg)
        walked = CountingEvents.walked
        for queue in [t.queue for t in service.sessions.values()]:
            queue.cancel()
        return walked

    walked = run(scenario())
    assert sum(len(t.jobs) for t in service.sessions.values()) >= 5  # it found the pending turns
    assert walked < 50, f"walked {walked} of {len(events)} events"


def test_a_marker_owed_mid_turn_waits_for_the_next_turn_start():
    """A turn whose worker gave up during the next turn owes its pending marker; it lands at the
    following turn's first pre-step, never at a later step of a turn (rc8 would restate a snapshot
    the marker shadows between a tool result and the model's next request)."""
    host, service, cfg = one_turn_host(), EngineHarness().turns, config(workerAttempts=1)
    attach_workers(host, service, [WorkerScript([], stop="completed")])
    gate = gated(host)

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)
        await next_turn_prestep(host, service, cfg, turn=2)  # its worker still runs: nothing lands
        gate.set()
        await service.drained(SESSION, 5)  # it gave up: raw, owing its marker
        assert service.job(SESSION, 1) is None and owed(service) == {1: "pending"}
        await next_turn_prestep(host, service, cfg, turn=2, step=2)
        assert marks(host) == []
        play_turn(host, 2, started=True)
        await complete_turn(host, service, cfg, turn=2)
        await next_turn_prestep(host, service, cfg, turn=3)

    run(scenario())
    assert marks(host)[:1] == [("pending", 1)] and 1 not in owed(service)


def test_the_journal_of_owed_markers_round_trips_disappears_when_empty_and_survives_damage(tmp_path, caplog):
    store = ResultStore(tmp_path / "dsh-home")
    assert store.owed(SESSION) == {}
    store.save_owed(SESSION, {3: "pending", 1: "no-op"})
    assert store.owed(SESSION) == {1: "no-op", 3: "pending"} and store.turns(SESSION) == []  # no record of a turn
    store.save_owed(SESSION, {})
    assert not store.owed_path(SESSION).exists()
    store.owed_path(SESSION).parent.mkdir(parents=True, exist_ok=True)
    store.owed_path(SESSION).write_text("{half a fi")
    with caplog.at_level("WARNING", logger="turn_memory.turns"):
        assert store.owed(SESSION) == {}
    assert "the journal of owed markers" in caplog.text and "is unreadable" in caplog.text
