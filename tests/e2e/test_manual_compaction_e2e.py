"""Issue 2 acceptance: turn-memory live in the real DSH, `/compact` end to end."""

from __future__ import annotations

import pytest

from helpers import CHECKPOINT_MARK, NO_TURNS, reload, text_of, transactions, turn_tasks
from turn_memory.host.surface import SessionLog
from turn_memory.install.patchyaml import load as loads

pytestmark = pytest.mark.e2e


def script(fake) -> None:
    fake.push("turn", {"text": "Looking.", "tool_calls": [{"name": "bash", "arguments": {"command": "echo parser-ok", "description": "probe"}}]})
    fake.push("turn", "Turn one done: the parser module tokenizes input. FIRST")
    fake.push("turn", "Turn two done: the parser has no tests. SECOND")
    fake.push("turn", "Turn three done: I added a test plan. THIRD")
    fake.push("compaction", "SUMMARY-CHECKPOINT: the user asked to inspect the parser; it tokenizes; no tests; plan added.")


def test_installed_engine_is_the_only_live_one(home):
    tree = loads(home.dsh("--profile", "tm", "--dump-config").stdout)
    rows = {row["id"]: row for row in tree if isinstance(row, dict) and "id" in row}
    assert rows["compaction-basic"].get("disabled") is True
    ours = rows["turn-memory"]
    assert ours["name"] == "dsh-turn-memory" and not ours.get("disabled")
    assert (home.profile_dir / "node_modules" / "dsh-turn-memory" / "lib" / "index.js").exists()


def test_three_turns_then_compact_then_resume(home, fake):
    script(fake)
    run = home.run([*turn_tasks(3), "/compact", "After compaction: what did we learn?"], engine_overrides=NO_TURNS)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    (compact,) = run.commands()
    assert compact["result"]["kind"] == "success", compact
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 4

    _, events = home.session_log(run.session_id)
    (tx,) = transactions(home, events)
    assert [e["type"] for e in tx] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    start, summary, checkpoint, end = tx
    assert "error" not in end["data"] and start["data"]["turn"] is None
    # the checkpoint shadows exactly the nodes the summary names, contiguous on the surface then
    before = SessionLog(home.dialect, events[: checkpoint["seq"]])
    shadowed = summary["data"]["shadowedSeqs"]
    first = before.nodes.index(shadowed[0])
    assert before.nodes[first:first + len(shadowed)] == shadowed
    assert checkpoint["surfaceOp"] == home.dialect.replace_op(shadowed[0], shadowed[-1])
    assert set(shadowed) <= set(checkpoint["sourceEventSeqs"])
    assert "SUMMARY-CHECKPOINT" in text_of(checkpoint["data"])
    # the whole log reloads and the surface now starts with the checkpoint (0.2: after the
    # system prompt, surface node 0, which only a system/message may replace)
    head = 1 if home.dialect.protects_system_head else 0
    assert reload(home, events).nodes[head] == checkpoint["seq"]

    # the model request after the compaction starts with the checkpoint text
    kinds = [r.kind for r in fake.requests]
    after = next(r for r in fake.requests[kinds.index("compaction") + 1:] if r.kind == "turn")
    first_conversation = [m for m in after.messages if m["role"] != "system"][0]
    assert CHECKPOINT_MARK in text_of(first_conversation) and "SUMMARY-CHECKPOINT" in text_of(first_conversation)

    # a new DSH process reopens the session and completes another turn
    fake.push("turn", "Resumed fine. FIFTH")
    again = home.run(["One more turn after reopening."], resume=run.session_id, engine_overrides=NO_TURNS)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.tasks()[0]["reason"]["kind"] == "completed" and "FIFTH" in again.tasks()[0]["text"]
    _, events2 = home.session_log(run.session_id)
    reload(home, events2)
