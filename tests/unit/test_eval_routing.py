"""The eval proxy's two decisions: what a request DSH sent is for, and which recorded reply the
agent gets. Both read the request itself, never the order requests arrive in."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from turn_memory.devtools.fake_model import FakeRequest
from turn_memory.eval import routing
from turn_memory.eval.proxy import CAPTURE_TEXT
from turn_memory.eval.replay import Replay
from turn_memory.eval.scenario import parse_scenario

HINT_SYSTEM = "The user message is one block of an agent's private reasoning."
SNAPSHOT = {"role": "user", "content": "Current runtime context. This snapshot supersedes earlier runtime-context snapshots."}
BASH = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]


def request(messages: list[dict[str, Any]], tools: list[str] = (), headers: dict[str, str] | None = None) -> FakeRequest:
    body = {"messages": messages, "tools": [{"type": "function", "function": {"name": t, "parameters": {}}} for t in tools]}
    kind = "compaction" if (headers or {}).get("x-deepseek-harness-compact") == "1" else ("turn" if tools else "title")
    return FakeRequest(0, kind, "/v1/chat/completions", headers or {}, body, 0.0)


def purpose(req: FakeRequest) -> str:
    return routing.purpose_of(req, user_texts={"Fix the parser.", "Run the tests."}, capture_text=CAPTURE_TEXT,
                              hint_system=HINT_SYSTEM)


@pytest.mark.parametrize("req,expected", [
    (request([{"role": "user", "content": "Fix the parser."}, SNAPSHOT], ["bash"]), routing.AGENT),
    (request([{"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "", "tool_calls": []},
              {"role": "tool", "content": "ok", "tool_call_id": "c1"}], ["bash"]), routing.AGENT),
    # DSH appends its own text part after the words of a user message with an image
    (request([{"role": "user", "content": [{"type": "text", "text": "Run the tests."},
                                           {"type": "text", "text": 'Image "shot.png" (sha256:…)'}]}], ["bash"]), routing.AGENT),
    (request([{"role": "user", "content": "task"}], ["list_turn_nodes", "replace_turn_nodes"]), routing.TURN_WORKER),
    (request([{"role": "user", "content": "task"}], ["replace_session_memory", "bash"]), routing.SESSION_WORKER),
    (request([{"role": "system", "content": HINT_SYSTEM}, {"role": "user", "content": "thought"}]), routing.HINT),
    (request([{"role": "user", "content": "Fix the parser."}], ["bash"], {"x-deepseek-harness-compact": "1"}), routing.SUMMARY),
    # on a generic route stock's summarizer sends no header: its last message is the instruction
    (request([{"role": "user", "content": "Fix the parser."}, {"role": "user", "content": "You are now acting as a "
                                                                                       "compaction engine"}], ["bash"]), routing.SUMMARY),
    (request([{"role": "user", "content": "Generate the session title"}]), routing.TITLE),
    (request([{"role": "user", "content": CAPTURE_TEXT}, SNAPSHOT], ["bash"]), routing.CAPTURE),
])
def test_each_request_is_told_apart_by_what_it_carries(req, expected):
    assert purpose(req) == expected


def test_refused_edit_calls_are_counted_once_by_rule():
    def worker(*results: tuple[str, str, str]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
        for call_id, name, text in results:
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        return messages

    first = worker(("c1", "replace_turn_nodes", "Accepted: n1..n4 -> r1, r2."),
                   ("c2", "finish_turn_compression", "Error: cannot finish yet:\n- image markers were dropped"),
                   ("c3", "read_turn_nodes", "Error: unknown node id 'n9'"))  # a read is not an edit
    later = worker(*[("c1", "replace_turn_nodes", "Accepted: n1..n4 -> r1, r2."),
                     ("c2", "finish_turn_compression", "Error: cannot finish yet:\n- image markers were dropped"),
                     ("c4", "replace_session_memory", "Error: landing refused [rule: replace-coverage]"),
                     ("c5", "replace_turn_nodes", "Error: n12 no longer exists: it was replaced by r1")])
    assert routing.count_refusals([first, later]) == Counter(
        {"cannot finish yet": 1, "replace-coverage": 1, "# no longer exists": 1})


def _scenario():
    return parse_scenario({"title": "t", "shape": "s", "turns": [
        {"user": "Fix the parser.", "steps": [{"think": "look first", "bash": ["cat parser.py"]}, {"say": "Fixed."}]},
        {"user": "Run the tests.", "steps": [{"say": "All pass."}]}],
        "facts": [{"id": "f", "text": "Fixed", "turn": 1, "kind": "decision", "query": "fixed"}],
        "probes": [{"id": "p", "dimension": "decision", "question": "q", "reference": "r", "facts": ["f"]}]}, Path("x"))


def test_the_agent_gets_the_recorded_step_its_request_is_at():
    replay = Replay(_scenario())
    turn1 = [{"role": "user", "content": "Fix the parser."}, SNAPSHOT]
    assert replay.reply(turn1) == {"reasoning": "look first", "tool_calls": [
        {"id": "call_t1s1c1", "name": "bash", "arguments": {"description": "cat parser.py", "command": "cat parser.py"}}]}
    step2 = turn1 + [{"role": "assistant", "content": ""}, {"role": "tool", "content": "…", "tool_call_id": "c"}]
    assert replay.reply(step2) == {"text": "Fixed."}
    # turn 2, after turn 1 was compressed into a user/assistant pair
    turn2 = [{"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "Fixed."},
             {"role": "user", "content": "Run the tests."}]
    assert replay.reply(turn2) == {"text": "All pass."}
    assert replay.off_script == [] and replay.extra == []


def test_a_step_whose_user_message_was_folded_continues_from_the_last_one():
    replay = Replay(_scenario())
    replay.reply([{"role": "user", "content": "Fix the parser."}])
    checkpoint_only = [{"role": "user", "content": "This is an automatically generated checkpoint …"}, SNAPSHOT]
    assert replay.reply(checkpoint_only) == {"text": "Fixed."}
    # the host may ask once more after the answer: the answer again, noted, not a fault
    assert replay.reply(checkpoint_only) == {"text": "Fixed."}
    assert replay.extra == ["turn 1 step 3: the recording has 2 step(s)"] and replay.off_script == []


def test_requests_the_recording_has_no_answer_for_are_off_script():
    replay = Replay(_scenario())
    assert replay.reply([{"role": "user", "content": "something else"}]) == {"text": "I have nothing recorded for this request."}
    too_far = [{"role": "user", "content": "Run the tests."}, {"role": "assistant", "content": "All pass."}]
    assert replay.reply(too_far) == {"text": "All pass."}
    assert replay.off_script == ["a request with no scenario user message", "turn 2 step 2: the recording has 1 step(s)"]
