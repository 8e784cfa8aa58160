"""Thought hints on each real DSH host (0.1.0-rc.8, 0.2.1-rc.2): a long reasoning block is indexed by a
one-shot request while the turn still runs, the compression worker reads the hint, and a
hint endpoint that is down costs nothing but the hint."""

from __future__ import annotations

import re
import socket

import pytest

from helpers import reload
from turn_memory.devtools.fake_model import FakeModel
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.prompts import render_prompt
from turn_memory.turns.recovery import turn_nodes

pytestmark = pytest.mark.e2e

WORKER_TOOLS = {"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression"}
TASK = "The tokenizer loses the last token of a file. Find out why and fix it. " * 3
THOUGHT = ("Hypothesis: the tokenizer drops the trailing token when the input does not end with a newline. "
           "Ruled out the parser: its unit tests pass on the same input. Next: read tokenize() in lexer.py. ") * 12
HINT = "- HINT-NAV-7: trailing token lost without a final newline; parser ruled out; check tokenize() in lexer.py"
# turns 1 and 2 are small: with the landing barrier on, from turn 2 on DSH's pre-step waits for
# a booting engine, so the engine is surely listening when turn 3's reasoning block ends (the
# live path); the barrier also lands turn 3 before turn 4's request
# and workers that may rewrite the reasoning (0.2 keeps it by default, and then asks no hint).
# On 0.2 the memory tools join with turn 1's landing, in turn 2: a turn split by that
# tool-registry message keeps its assistant nodes (and so asks no hint) whatever the setting
BARRIER = {"landingBarrier": True, "assistantNodes": "rewrite"}
TASKS = ["Say hi.", "Say hello once more.", TASK, "Fourth task: add a regression test."]
AGENT_TURNS = [
    "Hi. ZERO-DONE",
    "Hello again. ONE-DONE",
    {"reasoning": THOUGHT, "text": "Checking the lexer.",
     "tool_calls": [{"name": "bash", "arguments": {"command": "echo lexer-probe", "description": "probe"}}]},
    # the answer comes late, so a hint started at the block's end is visibly before turn/end
    {"text": "Fixed: tokenize() now flushes the last token. FIRST-DONE", "delay_ms": 800},
    "Turn four done. THIRD-DONE",
]
SECTION = "Thought hints (navigation only)"


def worker(request):
    """Plays every compression worker: fold the whole catalog into user + assistant, finish."""
    if "replace_turn_nodes" not in request.tool_names:
        return None
    prompt = request.last_user_text
    turn = re.search(r"memory editor for turn (\d+)", prompt).group(1)
    ids = re.findall(r"^- (n\d+) ", prompt, re.M)
    return {"tool_calls": [
        {"name": "replace_turn_nodes", "arguments": {"from": ids[0], "to": ids[-1], "nodes": [
            {"role": "user", "content": f"COMPRESSED-USER of turn {turn}."},
            {"role": "assistant", "content": f"COMPRESSED-ASSISTANT of turn {turn}."}]}},
        {"name": "finish_turn_compression", "arguments": {}}]}


def worker_prompts(fake, turn):
    return [r.all_text() for r in fake.requests if r.kind == "turn" and WORKER_TOOLS & set(r.tool_names)
            and f"memory editor for turn {turn}" in r.last_user_text]


def turn_end_ms(events, turn):
    return next(e["time"] for e in events if e["type"] == "turn/end" and e["data"]["turn"] == turn)


def assert_landed(home, events):
    log = SessionLog(home.dialect, events)
    for turn in (1, 2, 3):
        nodes = turn_nodes(log, turn)
        roles = [log.message_of(s)["role"] for s in nodes]
        at = log.index_of(nodes[0])
        if any(events[s]["type"] == "developer/message" for s in log.nodes[at:at + len(nodes) + 1]):
            # 0.2 put its tool-registry message in this turn (the memory tools joined here): it
            # lands in place around the message, its assistant nodes kept
            assert roles[0] == "user" and roles[-1] == "assistant", (turn, roles)
        else:
            assert roles == ["user", "assistant"], turn
        assert marker_of(events[nodes[0]]) == ("compression", turn)
    reload(home, events)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hints_config(base_url: str, engine_log) -> dict:
    return {"thoughtHints": {"baseUrl": base_url, "model": "hint-small", "apiKey": "sk-hint",
                             "minimumChars": 1000, "timeoutS": 10},
            "engine": {"logFile": str(engine_log)}, "turns": BARRIER}


def test_a_long_thought_is_hinted_once_before_the_turn_ends_and_the_worker_reads_the_hint(home, fake, tmp_path):
    fake.push("turn", *AGENT_TURNS)
    fake.responder = worker
    engine_log = tmp_path / "engine.log"
    with FakeModel({"title": [HINT]}) as hint_server:
        run = home.run(TASKS, engine_overrides=hints_config(hint_server.base_url + "/v1", engine_log))
        hint_requests = hint_server.requests
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    _, events = home.session_log(run.session_id)
    log = engine_log.read_text()

    # exactly one request, only the fixed prompt and the thought, sent while turn 3 still ran
    (request,) = hint_requests
    assert request.body["model"] == "hint-small" and "tools" not in request.body
    assert request.messages == [{"role": "system", "content": render_prompt("thought-hints", {})},
                                {"role": "user", "content": THOUGHT}]
    assert request.time * 1000 < turn_end_ms(events, 3), "the hint was requested only after turn/end"
    assert "turn 3: thought hint requested for step 1 (2292 chars of reasoning, live)" in log

    # turn 3's worker reads the hint in its labelled section, next to the raw reasoning in its task
    (turn3_worker,) = worker_prompts(fake, 3)
    assert SECTION in turn3_worker and HINT in turn3_worker and THOUGHT[:60] in turn3_worker
    (turn1_worker,) = worker_prompts(fake, 1)
    assert SECTION not in turn1_worker  # no long thought, no hint
    assert "turn 3: 1 thought hint(s) go into the worker prompt" in log
    assert_landed(home, events)


def test_with_the_hint_endpoint_down_the_turn_still_lands(home, fake, tmp_path):
    fake.push("turn", *AGENT_TURNS)
    fake.responder = worker
    engine_log = tmp_path / "engine.log"
    run = home.run(TASKS, engine_overrides=hints_config(f"http://127.0.0.1:{closed_port()}/v1", engine_log))
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    (turn3_worker,) = worker_prompts(fake, 3)
    assert SECTION not in turn3_worker
    assert_landed(home, home.session_log(run.session_id)[1])
    log = engine_log.read_text()
    assert "turn 3: thought hint for step 1 failed" in log and "compression goes on without it" in log


def test_by_default_the_hint_goes_through_dshs_own_llm_service(home, fake):
    fake.push("turn", *AGENT_TURNS)
    fake.responder = worker
    # a tool-less request whose system prompt is the hint prompt, on the session's own route
    fake.add_rule({"kind": "title", "system_contains": "recall index"}, reply=HINT)
    run = home.run(TASKS, engine_overrides={"thoughtHints": {"minimumChars": 1000}, "turns": BARRIER})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    (request,) = [r for r in fake.requests if "recall index" in r.system_text]
    assert [m["role"] for m in request.messages] == ["system", "user"] and not request.body.get("tools")
    assert request.messages[1]["content"] == THOUGHT
    (turn3_worker,) = worker_prompts(fake, 3)
    assert HINT in turn3_worker
    assert_landed(home, home.session_log(run.session_id)[1])
