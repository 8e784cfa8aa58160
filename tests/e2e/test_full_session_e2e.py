"""A whole session on each real host, the way a user meets turn-memory: three tool turns,
`/compact`, one more turn, then the session reopened in a new DSH process for another. Every
turn lands compressed (turn 1 included), `/compact` lands a checkpoint, the log reloads, DSH
exits 0 both times, and neither run logs a warning or error from the session store, the
token meter or turn-memory."""

from __future__ import annotations

import pytest

from helpers import host_problems, reload, transactions
from turn_memory.devtools.scripted_workers import worker_responder
from turn_memory.host.markers import marker_of

pytestmark = pytest.mark.e2e


def tool_turn(k: int) -> list:
    return [{"text": f"Checking part {k}.", "tool_calls": [{"name": "bash", "arguments": {
        "command": f"echo part-{k}", "description": f"part {k}"}}]},
        f"Part {k} is fine. DONE-{k} " + f"Module {k} reads its input, validates it and writes the result. " * 12]


def test_three_tool_turns_compact_one_more_then_reopen(home, fake):
    fake.responder = worker_responder  # folds each turn to its request and last answer
    for k in (1, 2, 3, 4, 5):
        fake.push("turn", *tool_turn(k))
    fake.push("compaction", "SUMMARY-CHECKPOINT: parts 1 and 2 are fine.")
    tasks = [f"Check part {k} of the system, please." for k in (1, 2, 3)]
    barrier = {"turns": {"landingBarrier": True}, "compaction": {"method": "summary"}}
    run = home.run([*tasks, "/compact", "Check part 4 of the system, please."], engine_overrides=barrier)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 4
    assert run.commands()[0]["result"]["kind"] == "success", run.commands()
    assert host_problems(run) == []

    again = home.run(["Check part 5 of the system, please."], resume=run.session_id, engine_overrides=barrier)
    assert again.returncode == 0 and again.tasks()[0]["reason"]["kind"] == "completed", again.records
    assert host_problems(again) == []

    _, events = home.session_log(run.session_id)
    landed = {mark[1] for e in events if (mark := marker_of(e)) and mark[0] == "compression"}
    assert landed >= {1, 2, 3, 4}, landed
    (tx,) = transactions(home, events)
    assert any(home.dialect.is_checkpoint_source((e["data"] or {}).get("source")) for e in tx if e["type"] == "user/message")
    reload(home, events)
