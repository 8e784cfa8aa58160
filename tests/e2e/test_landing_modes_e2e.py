"""How a compressed turn lands, on each real host, each way in its own test:
what lands on the surface, and what the next model request carries.

Turn 1 is one tool turn: n1 user, n2 runtime snapshot, n3 assistant + call, n4 tool result,
n5 answer. rc.8 replaces any node in place at a pre-step; 0.2 may append an assistant node
only inside a step its agent loop opened. By default (`turns.assistantNodes` auto) 0.2's
workers keep the assistant nodes, so the turn lands in place wherever it stands; with
`rewrite` where the compression lands decides its shape (the FOLD tests).
"""

from __future__ import annotations

import pytest

from helpers import host_problems, reload, text_of
from test_turn_compression_e2e import IS_WORKER, agent_requests
from turn_memory.devtools.scripted_workers import worker_responder
from turn_memory.host.dialect import is_runtime_context
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns.recovery import turn_nodes

pytestmark = pytest.mark.e2e

TASK = "Please look at the parser module and tell me what it does."
TURN_1 = [{"text": "Listing the parser.", "tool_calls": [{"name": "bash", "arguments": {
    "command": "echo 'listing parser.py'; yes 'def parse(tokens): a long listing line' | head -40",
    "description": "list"}}]}, "The parser tokenizes input. FIRST-DONE"]
FINISH = {"tool_calls": [{"name": "finish_turn_compression", "arguments": {}}]}
FOLD = {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n5", "nodes": [
    {"role": "user", "content": "COMPRESSED-USER: what does the parser do?"},
    {"role": "assistant", "content": "COMPRESSED-ASSISTANT: it tokenizes input (listed parser.py)."}]}}]}
IN_PLACE = {"tool_calls": [
    {"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n2", "nodes": [
        {"role": "user", "content": "COMPRESSED-USER: what does the parser do?"}]}},
    {"name": "replace_turn_nodes", "arguments": {"from": "n4", "to": "n4", "nodes": [
        {"role": "tool", "content": "REWRITTEN-RESULT: parser.py lists parse()."}]}}]}
REWRITE_RESULT = {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n4", "to": "n4", "nodes": [
    {"role": "tool", "content": "REWRITTEN-RESULT: parser.py lists parse()."}]}}]}


def roles(home, events) -> list[str]:
    log = SessionLog(home.dialect, events)
    return [log.message_of(s)["role"] for s in turn_nodes(log, 1)]


def first_request_of_turn_2(fake):
    return next(r for r in agent_requests(fake) if "Second task" in r.last_user_text)


def answered(request) -> bool:
    """Every tool call the request carries is answered by its result, and no result is orphaned."""
    calls = {c["id"] for m in request.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []}
    results = {m.get("tool_call_id") for m in request.messages if m["role"] == "tool"}
    return calls == results


def run_two_turns(home, fake, worker_replies, *, barrier: bool, second_turn=None, assistants: str = "auto"):
    fake.push("turn", *TURN_1, *(second_turn or ["Turn two done. SECOND-DONE"]))
    fake.add_rule(IS_WORKER, replies=worker_replies)
    run = home.run([TASK, "Second task: add a regression test.", "Third task: done?"],
                   engine_overrides={"turns": {"landingBarrier": barrier, "assistantNodes": assistants}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert host_problems(run) == []
    _, events = home.session_log(run.session_id)
    reload(home, events)
    return run, events


def test_nothing_to_rewrite_lands_a_no_op_marker(home, fake):
    """Mode 1: the worker finishes without a change; the turn's first user node is re-marked."""
    run, events = run_two_turns(home, fake, [FINISH], barrier=True)
    marks = [marker_of(e) for e in events if marker_of(e) and marker_of(e)[1] == 1]
    assert marks == [("compression", 1)]  # ready at turn 2's first pre-step: no pending marker before it
    tool = home.dialect.tool_result_role
    assert roles(home, events) == ["user", "user", "assistant", tool, "assistant"]  # content unchanged
    assert any(TASK in text_of(m) for m in first_request_of_turn_2(fake).messages)


def test_a_tool_result_rewritten_one_to_one_stays_paired_with_its_call(home, fake):
    """Mode 2: only the tool result changes; it is rewritten in place, content only, and the
    next request carries every tool call answered by its (rewritten) result."""
    run, events = run_two_turns(home, fake, [REWRITE_RESULT, FINISH], barrier=True)
    tool = home.dialect.tool_result_role
    assert roles(home, events) == ["user", "user", "assistant", tool, "assistant"]
    request = first_request_of_turn_2(fake)
    assert answered(request), request.messages
    results = [text_of(m) for m in request.messages if m["role"] == "tool"]
    assert any("REWRITTEN-RESULT" in r for r in results) and "listing parser.py" not in "".join(results)


def test_a_turn_ready_before_the_next_request_keeps_its_user_assistant_shape(home, fake):
    """Mode 3 on 0.2 (inside the next turn's first step, where the turn is still the surface
    tail), in-place on rc8: the turn lands as user + assistant and the next request carries
    exactly that."""
    run, events = run_two_turns(home, fake, [FOLD, FINISH], barrier=True, assistants="rewrite")
    assert roles(home, events) == ["user", "assistant"]
    request = first_request_of_turn_2(fake)
    convo = [(m["role"], text_of(m)) for m in request.messages if m["role"] != "system"]
    assert convo[0][1].startswith("COMPRESSED-USER") and convo[1] == ("assistant", FOLD["tool_calls"][0]["arguments"]["nodes"][1]["content"])
    assert answered(request)


def test_a_turn_ready_only_later_lands_at_a_later_step(home, fake):
    """Landing at a later pre-step: the worker is slow, turn 2 runs two steps. 0.2 can then
    no longer append an assistant after the turn (mode 4: one user checkpoint with the roles
    written out); rc8 still replaces in place. Either way the request after the landing
    carries the compressed turn and no step waited for it."""
    slow_fold = {**FOLD, "delay_ms": 1500}
    second = [{"text": "Writing the test.", "tool_calls": [{"name": "bash", "arguments": {
        "command": "sleep 2; echo test-written", "description": "write test"}}]}, "Turn two done. SECOND-DONE"]
    run, events = run_two_turns(home, fake, [slow_fold, FINISH], barrier=False, second_turn=second,
                                assistants="rewrite")
    assert max(p["ms"] for p in run.pre_steps()) < 1000, run.pre_steps()
    assert [marker_of(e) for e in events if marker_of(e) == ("compression", 1)]
    expected = ["user"] if home.dialect.name == "v02" else ["user", "assistant"]
    assert roles(home, events) == expected
    if home.dialect.name == "v02":
        (node,) = turn_nodes(SessionLog(home.dialect, events), 1)
        text = text_of(events[node]["data"])
        assert text.startswith("User: COMPRESSED-USER") and "\n\nAssistant: COMPRESSED-ASSISTANT" in text
    after = next(r for r in agent_requests(fake) if "Third task" in r.last_user_text)
    assert "COMPRESSED-USER" in "".join(text_of(m) for m in after.messages)


def test_by_default_a_turn_ready_only_later_lands_in_place_keeping_its_shape_and_assistants(home, fake):
    """The default (`turns.assistantNodes` auto): the worker rewrites the user nodes and the
    tool result and leaves the assistant nodes; it is slow, so it is ready only while turn 2
    runs its tool. It lands there in place on both hosts: user, assistant, tool, assistant,
    the assistant nodes verbatim, no step waited, the log reloads (run_two_turns), and the
    next request carries the rewrite with every call answered."""
    second = [{"text": "Writing the test.", "tool_calls": [{"name": "bash", "arguments": {
        "command": "sleep 2; echo test-written", "description": "write test"}}]}, "Turn two done. SECOND-DONE"]
    run, events = run_two_turns(home, fake, [{**IN_PLACE, "delay_ms": 1500}, FINISH], barrier=False,
                                second_turn=second)
    assert max(p["ms"] for p in run.pre_steps()) < 1000, run.pre_steps()
    assert [marker_of(e) for e in events if marker_of(e) == ("compression", 1)]
    tool = home.dialect.tool_result_role
    log = SessionLog(home.dialect, events)
    nodes = turn_nodes(log, 1)
    if home.dialect.name == "rc8":  # rc8 restates the runtime snapshot the landing shadowed at the tail
        assert is_runtime_context(log.message_of(nodes[-1]).get("source")), log.message_of(nodes[-1])
        nodes = nodes[:-1]
    assert [log.message_of(s)["role"] for s in nodes] == ["user", "assistant", tool, "assistant"]
    after = next(r for r in agent_requests(fake) if "Third task" in r.last_user_text)
    convo = [(m["role"], text_of(m)) for m in after.messages if m["role"] != "system"]
    assert convo[0][1].startswith("COMPRESSED-USER") and convo[1] == ("assistant", "Listing the parser.")
    assert convo[2][1].startswith("REWRITTEN-RESULT") and convo[3] == ("assistant", "The parser tokenizes input. FIRST-DONE")
    assert answered(after)


def test_turns_ready_by_a_turns_start_land_together_each_keeping_its_shape(home, fake, tmp_path):
    """Turn 1's worker is slow: turn 2's first request goes out without it (the barrier's wait
    is short), and it is ready only while turn 2 runs its tool. Turn 2's worker is fast. By
    turn 3's first request both are ready and reach the surface tail: 0.2 lands them there as
    one block (with `turns.shapeWaitTurns` 1, turn 1 waited for it instead of flattening
    mid-turn), rc8 in place; either way
    both keep their user/assistant shape and the request carries both compressed."""
    engine_log = tmp_path / "engine.log"
    second = [{"text": "Writing the test.", "tool_calls": [{"name": "bash", "arguments": {
        "command": "sleep 3; echo test-written", "description": "write test"}}]}, "Turn two done. SECOND-DONE"]
    fake.push("turn", *TURN_1, *second, "Turn three done. THIRD-DONE")

    def workers(request):
        reply = worker_responder(request)
        slow = reply is not None and any("memory editor for turn 1 " in text_of(m) for m in request.messages)
        return {**reply, "delay_ms": 1500} if slow else reply

    fake.responder = workers
    run = home.run([TASK, "Second task: add a regression test.", "Third task: done?"], engine_overrides={
        "turns": {"landingBarrier": True, "landingWaitS": 0.5, "shapeWaitTurns": 1, "assistantNodes": "rewrite"},
        "engine": {"logFile": str(engine_log)}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert host_problems(run) == []
    _, events = home.session_log(run.session_id)
    reload(home, events)
    log = SessionLog(home.dialect, events)
    shapes = [[log.message_of(s)["role"] for s in turn_nodes(log, turn)] for turn in (1, 2)]
    assert shapes == [["user", "assistant"], ["user", "assistant"]]
    landed = [line for line in engine_log.read_text().splitlines() if ": landed (" in line]
    block = [line for line in landed if "in one block with turns 1, 2" in line]
    assert len(block) == (2 if home.dialect.name == "v02" else 0), landed
    request = next(r for r in agent_requests(fake) if "Third task" in r.last_user_text)
    carried = "".join(text_of(m) for m in request.messages)
    assert "listing parser.py" not in carried and "test-written" not in carried
    assert answered(request)


def test_a_plan_the_host_would_refuse_is_refused_before_anything_is_appended(home, fake, tmp_path):
    """A landing plan that breaks a host rule (fault-injected: its replacement cites no
    sources) is refused by the engine's own check: nothing is appended, the refusal is logged
    with session and turn, the turn stays raw and the session carries on."""
    engine_log = tmp_path / "engine.log"
    home.extra_env["TURN_MEMORY_FAULTS"] = "corrupt-turn-plan"
    fake.push("turn", *TURN_1, "Turn two done. SECOND-DONE", "Turn three. THIRD-DONE")
    fake.add_rule(IS_WORKER, replies=[IN_PLACE, FINISH])
    run = home.run([TASK, "Second task: add a regression test.", "Third task: done?"],
                   engine_overrides={"turns": {"landingBarrier": True}, "engine": {"logFile": str(engine_log)}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 3
    assert host_problems(run) == []
    _, events = home.session_log(run.session_id)
    assert [m for e in events if (m := marker_of(e)) == ("compression", 1)] == []  # nothing landed
    tool = home.dialect.tool_result_role
    assert roles(home, events) == ["user", "user", "assistant", tool, "assistant"]
    reload(home, events)
    refused = [line for line in engine_log.read_text().splitlines() if "turn 1: landing refused" in line]
    assert refused and run.session_id in refused[0] and "replace-coverage" in refused[0], refused
