"""Issue 5 acceptance on each real DSH host (0.1.0-rc.8, 0.2.1-rc.2): after turn-memory compressed a turn, the agent
reads the original back with read_session_history — reasoning included — searches its raw turns,
and cannot reach another session's turns."""

from __future__ import annotations


import pytest

from helpers import reload, text_of
from turn_memory.host.markers import marker_of

pytestmark = pytest.mark.e2e

IS_WORKER = {"tools_include": "replace_turn_nodes"}
SECRET = "RAW-ONLY: the flux capacitor needs 1.21 gigawatts"
OTHER_SECRET = "BRAVO-ONLY-7731"
# user, runtime snapshot, assistant = 3 nodes; the worker folds them and drops the secret
FOLD = {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n3", "nodes": [
    {"role": "user", "content": "COMPRESSED-USER: asked about the power figure."},
    {"role": "assistant", "content": "COMPRESSED-ASSISTANT: worked it out."}]}}]}
FINISH = {"tool_calls": [{"name": "finish_turn_compression", "arguments": {}}]}


def call(args: dict) -> dict:
    return {"tool_calls": [{"name": "read_session_history", "arguments": args}]}


def history_results(fake) -> list[str]:
    """The read_session_history results, in order, as the agent's next requests carried them."""
    agent = [r for r in fake.requests_of("turn") if "replace_turn_nodes" not in r.tool_names]
    return [text_of(r.messages[-1]) for r in agent if r.messages and r.messages[-1].get("role") == "tool"]


def test_agent_reads_back_a_compressed_turn_with_reasoning_and_searches_only_its_own(home, fake):
    fake.add_rule({**IS_WORKER, "messages_contain": "flux capacitor"}, replies=[FOLD, FINISH])
    fake.add_rule(IS_WORKER, reply=FINISH, times="always")  # other turns land as they are

    # another session in the same DSH process — mirrored by the same engine, which lands its
    # turn 1 — with a fact of its own; then the agent under test, with the landing barrier
    # (turn 2's first request already carries turn 1 compressed)
    fake.push("turn", f"Noted: {OTHER_SECRET}.", "Fine.")
    fake.push("turn",
              {"reasoning": f"Let me think. {SECRET}. That settles it.", "text": "Worked it out."},
              call({}), call({"turn": 1}), call({"query": "flux capacitor"}), call({"query": OTHER_SECRET}),
              call({"turn": 9}), "All read. DONE")
    run = home.run([{"spawn": "other", "tasks": [f"Remember {OTHER_SECRET} please.", "Thanks."]}, {"join": "other"},
                    "What power does the device need?", "Check what you found earlier."],
                   # a worker that may rewrite the reasoning away (0.2 keeps it by default)
                   engine_overrides={"turns": {"landingBarrier": True, "assistantNodes": "rewrite"}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed", "completed"]
    assert [t["reason"]["kind"] for t in run.tasks("other")] == ["completed", "completed"]
    # the engine did mirror the other session: it landed that session's turn 1
    _, other_events = home.session_log(run.session_of("other"))
    assert ("compression", 1) in [marker_of(e) for e in other_events]

    # nothing compressed yet, nothing to read back: the first request declares no memory tool
    first = next(r for r in fake.requests if r.kind == "turn")
    assert not {"read_session_history", "read_memory_image"} & set(first.tool_names), first.tool_names

    # turn 1 was compressed: the next request no longer carries the secret, and offers the
    # tools that read it back from the request that first carries the compressed turn on...
    second = next(r for r in fake.requests_of("turn") if "Check what you found" in r.last_user_text)
    assert "COMPRESSED-ASSISTANT" in second.all_text() and SECRET not in second.all_text()
    assert {"read_session_history", "read_memory_image"} <= set(second.tool_names), second.tool_names

    catalog, turn1, found, foreign, missing = history_results(fake)[-5:]
    assert "- turn 1:" in catalog and "turn-memory: landed" in catalog and "- turn 2" not in catalog  # turn 2 is open
    # ...but the tool hands back the original, reasoning shown explicitly
    assert "[reasoning]" in turn1 and SECRET in turn1 and "What power does the device need?" in turn1
    assert "Worked it out." in turn1 and "COMPRESSED" not in turn1
    assert "- turn 1" in found and "1.21 gigawatts" in found
    assert foreign.startswith("No completed turn") and OTHER_SECRET not in foreign  # the other session is unreachable
    assert "turn 9 does not exist" in missing

    _, events = home.session_log(run.session_id)
    reload(home, events)
    assert ("compression", 1) in [marker_of(e) for e in events]
