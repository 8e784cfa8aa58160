"""Long-turn continuation against the in-memory host: counting, the once-per-milestone
reminder, the continuation tool, and the one automatic follow-up after the turn's compression."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine_harness import EngineHarness, forward
from fake_host import SESSION, FakeHost, WorkerScript, attach_workers
from surface_builders import LogBuilder, new_id, snapshot_source
from turn_memory import faults
from turn_memory.bridge.protocol import AgentOptions
from turn_memory.catalog import context_sections, public_tools
from turn_memory.config import EngineConfig
from turn_memory.continuation import state, texts
from turn_memory.continuation.dispatch import FollowupDispatcher
from turn_memory.continuation.reminder import Reminders
from turn_memory.host import continuations
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import is_host_context, marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.public_tools import PublicCall, PublicTools
from turn_memory.turns.recovery import turn_nodes, turns_to_recover
from turn_memory.turns.service import TurnService

FINISH = ("finish_turn_compression", {})
HANDOFF = "Done: lexer and parser. State: tests green. Next: write the code generator in gen.py."


def cfg(**continuation) -> EngineConfig:
    return EngineConfig.model_validate({"turnContinuation": continuation})


def snapshot(b: LogBuilder, sections: list[dict] | None = None) -> int:
    source = {**snapshot_source(RC8), "sections": sections or []}
    text = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\n" + \
        "\n\n".join(s["text"] for s in sections or [{"text": "cwd=/w"}])
    return b.add("user/message", {"id": new_id("snap"), "role": "user", "source": source,
                                  "content": [{"type": "text", "text": text}]}, op="append")


def work_step(b: LogBuilder, *, tool: str = "bash", arguments: str = "{}", result_error: bool = False) -> str:
    """One model step of the open turn: an assistant tool call and its result (2 nodes)."""
    b.step_no += 1
    turn = b.turn_no
    b.add("step/start", {"turn": turn, "step": b.step_no})
    call = new_id("call")
    b.assistant(f"step {b.step_no}: working", tool_calls=(call,))
    call_seq = b.add("tool/call", {"turn": turn, "step": b.step_no, "callId": call, "name": tool, "arguments": arguments})
    b.tool_result(call, "ok", call_seq=call_seq)
    if result_error:
        b.events[-1]["data"]["message"]["content"][0]["isError"] = True
    b.add("step/end", {"turn": turn, "step": b.step_no})
    return call


def open_long_turn(steps: int, *, prior_turns: int = 0, dialect=RC8) -> LogBuilder:
    """A session whose open turn has 1 user node + `steps` work steps (1 + 2*steps nodes)."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    if dialect is V02:
        b.system()  # 0.2.1: node 0, inside turn 1's first step
    for _ in range(prior_turns):
        b.turn("earlier task")
    b.turn_no += 1
    b.step_no = 0
    b.add("turn/start", {"turn": b.turn_no})
    b.step_no = 1
    b.add("step/start", {"turn": b.turn_no, "step": 1})
    b.user("Build the whole compiler, please.")
    snapshot(b) if dialect is RC8 else b.snapshot()
    b.assistant("starting")
    b.add("step/end", {"turn": b.turn_no, "step": 1})
    for _ in range(steps):
        work_step(b)
    return b


def handoff_step(b: LogBuilder, handoff: str = HANDOFF, **kw) -> str:
    return work_step(b, tool=continuations.TOOL, arguments=json.dumps({"handoff": handoff}), **kw)


def end_turn(b: LogBuilder) -> None:
    b.add("turn/end", {"turn": b.turn_no, "reason": {"kind": "completed"}})


def session_of(events) -> FakeHost:
    return FakeHost(RC8, events)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


# -- counting ------------------------------------------------------------------------------
def test_the_open_turn_counts_its_own_appended_nodes_only():
    b = open_long_turn(3, prior_turns=2)
    log = SessionLog(RC8, b.events)
    # user + "starting" + 3 x (call, result); the snapshot and the earlier turns do not count
    assert len(state.open_turn_nodes(log, 3)) == 8
    snapshot(b)
    b.add("step/start", {"turn": 3, "step": 0})  # a landing step of an earlier turn
    b.user("landed earlier turn node")
    b.add("step/end", {"turn": 3, "step": 0})
    assert len(state.open_turn_nodes(SessionLog(RC8, b.events), 3)) == 8


# -- the reminder --------------------------------------------------------------------------
def test_reminder_appears_once_per_milestone_and_names_count_tokens_and_next():
    b = open_long_turn(13)  # 2 + 26 = 28 nodes
    host, reminders, config = session_of(b.events), Reminders(), cfg()
    assert reminders.render(host.session, 1, 15, config) == ""
    for _ in range(1):
        work_step(b)  # 30 nodes
    host = session_of(b.events)
    text = reminders.render(host.session, 1, 16, config)
    assert "30 context nodes" in text and "milestone 30" in text and "at 60 nodes" in text
    assert "continue_after_turn_compression" in text and "<" not in text  # plain text, no XML wrapper
    assert texts.parse_reminder(text) == 30
    # the next pre-step comes before the host has persisted the snapshot showing it: not again
    work_step(b)
    assert reminders.render(session_of(b.events).session, 1, 17, config) == ""
    # once persisted, the durable snapshot alone also says it was shown (a restart)
    snapshot(b, [{"name": state.SECTION, "text": text}])
    assert Reminders().render(session_of(b.events).session, 1, 18, config) == ""
    # a step that jumps across 60 and 90 shows only the highest milestone, once
    for _ in range(30):
        work_step(b)
    again = reminders.render(session_of(b.events).session, 1, 50, config)
    assert "milestone 90" in again and "milestone 60" not in again
    assert reminders.render(session_of(b.events).session, 1, 51, config) == ""


def test_reminder_restores_a_milestone_shown_under_an_older_prompt_from_the_count():
    b = open_long_turn(15)  # 32 nodes
    snapshot(b, [{"name": state.SECTION, "text": "an older wording of the reminder"}])
    assert Reminders().render(session_of(b.events).session, 1, 17, cfg()) == ""


def test_a_new_turn_starts_counting_again():
    b = open_long_turn(15)
    reminders = Reminders()
    assert reminders.render(session_of(b.events).session, 1, 17, cfg()) != ""
    end_turn(b)
    b.turn_no, b.step_no = 2, 0
    b.add("turn/start", {"turn": 2})
    b.step_no = 1
    b.add("step/start", {"turn": 2, "step": 1})
    b.user("next")
    b.add("step/end", {"turn": 2, "step": 1})
    assert reminders.render(session_of(b.events).session, 2, 2, cfg()) == ""
    for _ in range(15):
        work_step(b)
    assert "milestone 30" in reminders.render(session_of(b.events).session, 2, 17, cfg())


def test_reminder_interval_is_configurable_and_the_feature_can_be_off():
    b = open_long_turn(5)  # 12 nodes
    assert "milestone 10" in Reminders().render(session_of(b.events).session, 1, 7, cfg(reminderIntervalNodes=10))
    sections = {s.name: s for s in context_sections()}
    section = sections[state.SECTION]
    assert not section.enabled(cfg(enabled=False))
    assert not section.enabled(EngineConfig.model_validate({"turns": {"enabled": False}}))
    assert section.enabled(cfg())


# -- the tool ------------------------------------------------------------------------------
def call_tool(events, args, config=None, tools=None):
    host = session_of(events)
    session = host.session
    call = PublicCall(session=session, args=args, turn=session.log.index.open_turn,
                      call_id="call-x", agent_options=AgentOptions(), config=config or cfg(), port=host)
    return run((tools or PublicTools(public_tools())).call(continuations.TOOL, call))


def test_tool_concludes_a_long_turn_with_a_handoff():
    answer = call_tool(open_long_turn(15).events, {"handoff": HANDOFF})
    assert not answer.is_error and answer.conclude and "ends now" in answer.text


@pytest.mark.parametrize("args, why", [({"handoff": "   "}, "non-empty"), ({}, "non-empty"), ("{not json", "non-empty")])
def test_tool_refuses_an_empty_handoff_without_ending_the_turn(args, why):
    answer = call_tool(open_long_turn(15).events, args)
    assert answer.is_error and not answer.conclude and why in answer.text


def test_tool_refuses_below_the_threshold_and_outside_a_turn():
    short = call_tool(open_long_turn(10).events, {"handoff": HANDOFF})
    assert short.is_error and not short.conclude and "22 of 30" in short.text
    b = open_long_turn(15)
    end_turn(b)
    outside = call_tool(b.events, {"handoff": HANDOFF})
    assert outside.is_error and not outside.conclude and "open turn" in outside.text


def test_tool_is_offered_only_while_the_feature_is_on():
    tools = PublicTools(public_tools())
    assert continuations.TOOL in [s.name for s in tools.specs(cfg())]
    assert continuations.TOOL not in [s.name for s in tools.specs(cfg(enabled=False))]
    off = call_tool(open_long_turn(15).events, {"handoff": HANDOFF}, cfg(enabled=False))
    assert off.is_error and not off.conclude


# -- requests in the log -------------------------------------------------------------------
def test_only_a_successful_handoff_pair_of_the_latest_completed_turn_awaits_a_followup():
    b = open_long_turn(15)
    handoff_step(b, result_error=True)  # a refused call is no request
    assert continuations.awaiting_followup(b.events) == []
    call = handoff_step(b)
    assert continuations.awaiting_followup(b.events) == []  # the turn is still open
    end_turn(b)
    (request,) = continuations.awaiting_followup(b.events)
    assert (request.id, request.turn, request.handoff) == (call, 1, HANDOFF)
    # delivered: the inbox insertion names it
    delivered = list(b.events)
    LogBuilder.add(b, "agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [
        {"id": "m1", "role": "user", "content": [], "source": {"kind": "plugin", "plugin": "turn-memory",
                                                                "continuation": call}}]})
    assert continuations.awaiting_followup(b.events) == []
    # superseded: a later (human) turn started first
    b.events[:] = delivered
    b.turn("a new human message")
    assert continuations.awaiting_followup(b.events) == []


def test_a_code_mode_handoff_is_a_request_too():
    b = open_long_turn(15)
    dispatch = {"rootCallId": "run1", "parentCallId": "run1", "name": continuations.TOOL,
                "arguments": {"handoff": HANDOFF}, "content": []}
    b.add("tool/code-dispatch", {**dispatch, "subCallId": "run1:code:0", "isError": True})  # refused
    end_turn(b)
    assert continuations.awaiting_followup(b.events) == []
    b.events.pop()
    b.add("tool/code-dispatch", {**dispatch, "subCallId": "run1:code:1", "isError": False})
    end_turn(b)
    (request,) = continuations.awaiting_followup(b.events)
    assert (request.id, request.turn, request.handoff) == ("run1:code:1", 1, HANDOFF)


# -- the follow-up -------------------------------------------------------------------------
def ended_handoff_host(steps: int = 15, dialect=RC8) -> tuple[FakeHost, str]:
    b = open_long_turn(steps, dialect=dialect)
    call = handoff_step(b)
    return FakeHost(dialect, b.events), call


def fold(host: FakeHost, turn: int = 1):
    count = len(turn_nodes(host.log, turn))
    return ("replace_turn_nodes", {"from": "n1", "to": f"n{count}", "nodes": [
        {"role": "user", "content": "Build the compiler."},
        {"role": "assistant", "content": "Lexer and parser done; handed off: next is gen.py."}]})


async def end_the_turn(host, service, dispatcher, config, turn: int = 1) -> None:
    host.host_append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    forward(host, config, service, dispatcher)


async def settle(dispatcher: FollowupDispatcher) -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)
    await asyncio.gather(*list(dispatcher._tasks), return_exceptions=True)


def test_one_followup_after_the_compression_is_ready_then_it_lands_before_the_next_request():
    host, call = ended_handoff_host()
    service, config = EngineHarness().turns, cfg()
    dispatcher = FollowupDispatcher(service)
    attach_workers(host, service, [WorkerScript([fold(host), FINISH])])

    async def scenario():
        await end_the_turn(host, service, dispatcher, config)
        await settle(dispatcher)
        assert len(host.followups) == 1 and host.flushes >= 1
        # more events and a resync do not queue it again
        forward(host, config, service, dispatcher, reset=True)
        await settle(dispatcher)
        assert len(host.followups) == 1
        # the follow-up's turn opens; its first pre-step lands the compressed turn
        host.host_append("turn/start", {"turn": 2})
        host._forward()
        await service.pre_step(host.session, 2, 1, config)

    run(scenario())
    (message_id, content, source) = host.followups[0]
    assert source == {"kind": "plugin", "plugin": "turn-memory", "continuation": call}
    text = content[0]["text"]
    assert HANDOFF in text and "not a new instruction from the user" in text and "<" not in text
    assert [host.log.message_of(s)["role"] for s in turn_nodes(host.log, 1)] == ["user", "assistant"]
    assert any(marker_of(e) == ("compression", 1) for e in host.log.events)
    assert is_host_context({"role": "user", "source": source})


def test_no_followup_when_the_compression_gives_up():
    host, _ = ended_handoff_host()
    service, config = EngineHarness().turns, EngineConfig.model_validate({"turns": {"workerAttempts": 1, "maxWorkers": 1}})
    dispatcher = FollowupDispatcher(service)
    attach_workers(host, service, [WorkerScript([], stop="completed")])

    async def scenario():
        await end_the_turn(host, service, dispatcher, config)
        await settle(dispatcher)

    run(scenario())
    assert host.followups == []
    assert [marker_of(e) for e in host.log.events if marker_of(e)] == [] and service.sessions[SESSION].owed == {1: "pending"}


def test_no_followup_when_a_human_turn_started_first():
    host, _ = ended_handoff_host()
    service, config = EngineHarness().turns, cfg()
    dispatcher = FollowupDispatcher(service)
    gate = asyncio.Event()
    scripts = [WorkerScript([fold(host), FINISH])]
    attach_workers(host, service, scripts)
    run_worker = host.run_worker

    async def slow_worker(*args):
        await gate.wait()
        return await run_worker(*args)

    host.run_worker = slow_worker

    async def scenario():
        await end_the_turn(host, service, dispatcher, config)
        await asyncio.sleep(0.02)
        host.host_append("turn/start", {"turn": 2})  # the user typed before the worker finished
        forward(host, config, service, dispatcher)
        gate.set()
        await settle(dispatcher)

    run(scenario())
    assert host.followups == []


def test_after_a_restart_the_turn_is_compressed_and_followed_up_exactly_once():
    # the first process marked the turn pending, then died before its worker finished
    host, call = ended_handoff_host()
    host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    from turn_memory.runtime.land import stamp
    from turn_memory.turns.landing import pending_plan
    plan = pending_plan(host.log, turn_nodes(host.log, 1)[0], 1)
    for event in stamp(host.log, plan.events):
        host.host_append(event["type"], event["data"], surfaceOp=event["surfaceOp"],
                         sourceEventSeqs=event["sourceEventSeqs"])
    assert turns_to_recover(host.log) == [1]

    async def new_process():
        service, config = EngineHarness().turns, cfg()
        dispatcher = FollowupDispatcher(service)
        attach_workers(host, service, [WorkerScript([fold(host), FINISH])])
        forward(host, config, service, dispatcher, reset=True)
        await settle(dispatcher)

    run(new_process())
    assert len(host.followups) == 1 and host.followups[0][2]["continuation"] == call
    run(new_process())  # another restart before the follow-up ran: the log says it is queued
    assert len(host.followups) == 1


def test_a_handoff_turn_cut_off_before_its_pending_marker_is_still_recovered():
    host, call = ended_handoff_host()
    host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert turns_to_recover(host.log) == [1]  # marker-free, but it asked for a continuation


def test_a_handoff_turn_already_landed_gets_its_followup_without_recompression():
    # the first process landed the turn (a no-op marker) and died before queueing the follow-up
    host, call = ended_handoff_host()
    host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    from turn_memory.runtime.land import stamp
    from turn_memory.turns.landing import LandingContext, noop_plan
    plan = noop_plan(host.log, turn_nodes(host.log, 1)[0], LandingContext(1, None, 0))
    for event in stamp(host.log, plan.events):
        host.host_append(event["type"], event["data"], surfaceOp=event["surfaceOp"],
                         sourceEventSeqs=event["sourceEventSeqs"])
    assert turns_to_recover(host.log) == []
    service = EngineHarness().turns
    dispatcher = FollowupDispatcher(service)
    started = attach_workers(host, service, [])

    async def new_process():
        forward(host, cfg(), service, dispatcher, reset=True)
        await settle(dispatcher)

    run(new_process())
    assert started == [] and len(host.followups) == 1 and host.followups[0][2]["continuation"] == call


# -- the follow-up only ever runs on the compressed turn (issue 12) ------------------------
async def followup_turn(host: FakeHost, service: TurnService, dispatcher: FollowupDispatcher, config: EngineConfig,
                        turn: int = 2) -> list[str]:
    """The agent loop opens the follow-up's turn and runs its first pre-step as the engine
    and the shim do: the engine lands what is ready and says what to withhold; the step takes
    in the queued follow-ups it was not told to withhold, or, with nothing to take in, the
    turn ends before any step. Returns the withheld message ids."""
    async def step() -> list[str]:
        host.host_append("turn/start", {"turn": turn})
        host._forward()
        await dispatcher.before_step(host.session, turn, 1, config)
        at_request = await service.pre_step(host.session, turn, 1, config)
        withheld = dispatcher.withheld(host.session, turn, 1, at_request)
        taken = [(mid, content, source) for mid, content, source in host.followups if mid not in withheld]
        if not taken:
            host.host_append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            host._forward()
            return withheld
        host.host_append("step/start", {"turn": turn, "step": 1})
        host._forward()
        if at_request:  # 0.2: the landing happens at the step's request; a refusal withholds there too
            await service.at_request(host.session, turn, 1)
            late = dispatcher.withheld(host.session, turn, 1, False)
            withheld += late
            taken = [t for t in taken if t[0] not in late]
            if not taken:  # the shim cancels the step: nothing is taken in, no request runs
                host.host_append("step/end", {"turn": turn, "step": 1})
                host.host_append("turn/end", {"turn": turn, "reason": {"kind": "aborted"}})
                host._forward()
                return withheld
        for mid, content, source in taken:
            host.host_append("user/message", {"id": mid, "role": "user", "content": content, "source": source},
                             surfaceOp="append")
        host._forward()
        return withheld

    return await step()


def taken_in(host: FakeHost) -> list[int]:
    """Seqs of follow-up messages in the history."""
    return [e["seq"] for e in host.log.events if e["type"] == "user/message"
            and "continuation" in ((e["data"].get("source") or {}))]


def handoff_with_a_folding_worker(dialect):
    """An ended hand-off turn, a turn service whose one worker folds it, and a dispatcher."""
    host, call = ended_handoff_host(dialect=dialect)
    # the worker folds the whole turn, assistants too (`turns.assistantNodes=rewrite` on 0.2)
    service, config = EngineHarness().turns, EngineConfig.model_validate({"turns": {"assistantNodes": "rewrite"}})
    attach_workers(host, service, [WorkerScript([fold(host), FINISH])])
    return host, call, service, config, FollowupDispatcher(service)


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
@pytest.mark.parametrize("refused", [None, faults.CORRUPT_TURN_PLAN, faults.REFUSE_TURN_LANDING],
                         ids=["lands", "refused-plan", "refused-on-apply"])
def test_the_followup_runs_only_on_the_compressed_turn(dialect, refused, monkeypatch):
    """The follow-up is queued once the compression is ready (its own turn carries the
    landing); if the landing is then refused — or on 0.2, would be refused inside the step it
    is deferred to — the follow-up is withheld and its turn ends before any request, instead
    of continuing on the raw turn. (Here the host starts refusing only after the follow-up
    was queued.)"""
    host, call, service, config, dispatcher = handoff_with_a_folding_worker(dialect)

    async def scenario():
        await end_the_turn(host, service, dispatcher, config)
        await settle(dispatcher)
        assert len(host.followups) == 1
        if refused:  # a plan the host would refuse; or one it refuses when applied (after it validated)
            monkeypatch.setenv("TURN_MEMORY_FAULTS", refused)
        return await followup_turn(host, service, dispatcher, config)

    withheld = run(scenario())
    if refused:
        assert withheld == [host.followups[0][0]] and taken_in(host) == []
        assert host.log.events[-1]["type"] == "turn/end"  # the follow-up's turn took nothing in
        assert not any(e["type"] == "assistant/message" and e["data"]["turn"] == 2 for e in host.log.events)
        # raw, and recoverable: it owes its pending marker (journaled) until the next landing point
        assert marker_of(host.log.events[turn_nodes(host.log, 1)[0]]) is None and service.sessions[SESSION].owed == {1: "pending"}
        assert continuations.awaiting_followup(host.log.events) == []  # and never continued later on the raw turn
    else:
        (seq,) = taken_in(host)
        (landed,) = [e["seq"] for e in host.log.events if marker_of(e) == ("compression", 1)]
        assert withheld == [] and landed < seq


def test_a_followup_queued_before_a_restart_waits_for_its_handoff_turn():
    """A previous process queued the follow-up (the log holds the inbox insertion) and died
    before the landing; the follow-up's turn now starts while the turn is still compressing:
    its first pre-step waits (bounded) for that compression and lands it first."""
    host, call = ended_handoff_host()
    host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    from turn_memory.runtime.land import stamp
    from turn_memory.turns.landing import pending_plan
    for event in stamp(host.log, pending_plan(host.log, turn_nodes(host.log, 1)[0], 1).events):
        host.host_append(event["type"], event["data"], surfaceOp=event["surfaceOp"],
                         sourceEventSeqs=event["sourceEventSeqs"])
    run(host.followup(SESSION, "fu-1", [{"type": "text", "text": texts.followup(HANDOFF)}],
                      {"kind": "plugin", "plugin": "turn-memory", "continuation": call}))
    service, config = EngineHarness().turns, cfg()
    dispatcher = FollowupDispatcher(service)
    attach_workers(host, service, [WorkerScript([fold(host), FINISH])])
    gate, run_worker = asyncio.Event(), host.run_worker

    async def slow(*args):
        await gate.wait()
        return await run_worker(*args)

    host.run_worker = slow

    async def restart_then_wake():
        forward(host, config, service, dispatcher, reset=True)
        asyncio.get_running_loop().call_later(0.2, gate.set)  # the worker finishes while turn 2 waits
        return await followup_turn(host, service, dispatcher, config)

    withheld = run(restart_then_wake())
    (seq,) = taken_in(host)
    (landed,) = [e["seq"] for e in host.log.events if marker_of(e) == ("compression", 1)]
    assert withheld == [] and landed < seq and len(host.followups) == 1


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_no_followup_is_queued_for_a_landing_its_turn_would_refuse(dialect, monkeypatch):
    """The compression is ready but its landing would be refused in the turn the follow-up
    opens (checked as if that turn had started): no follow-up is queued at all."""
    monkeypatch.setenv("TURN_MEMORY_FAULTS", faults.CORRUPT_TURN_PLAN)
    host, call, service, config, dispatcher = handoff_with_a_folding_worker(dialect)

    async def scenario():
        await end_the_turn(host, service, dispatcher, config)
        await settle(dispatcher)

    run(scenario())
    assert host.followups == [] and taken_in(host) == []
    assert marker_of(host.log.events[turn_nodes(host.log, 1)[0]]) is None and service.sessions[SESSION].owed == {1: "pending"}
