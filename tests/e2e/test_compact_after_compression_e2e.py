"""Issue 21 on each real DSH host: `/compact` after turns were compressed. Older history too
small to fold is a result with its size, not an error; a compression that is finished but not
landed yet (no turn is open at `/compact`, so nothing can land) is folded into the checkpoint
in its compressed form instead of being wasted."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from helpers import host_problems, reload, text_of, transactions, turn_rewrite
from turn_memory.host.markers import marker_of
from turn_memory.logs.reader import session_log_for
from turn_memory.turns.results import ResultStore

pytestmark = pytest.mark.e2e

TURN = re.compile(r"memory editor for turn (\d+)")
#: the start of prompts/compact-summary.md: the one summary request of `compaction.method: summary`
SUMMARY_PROMPT = "Stop the conversation here."


def worker(req):
    """The scripted turn worker: compresses its turn (helpers.turn_rewrite: either form),
    replace and finish in one reply."""
    if "replace_turn_nodes" not in req.tool_names:
        return None
    prompt = next(text_of(m) for m in reversed(req.messages) if m["role"] == "user" and TURN.search(text_of(m)))
    calls = turn_rewrite(prompt, int(TURN.search(prompt).group(1)))
    return {"tool_calls": [*calls, {"name": "finish_turn_compression", "arguments": {}}]}


def tool_turn(fake, k: int, output_lines: int) -> str:
    fake.add_rule({"last_user_contains": f"Task {k}:", "tools_exclude": "replace_turn_nodes"}, replies=[
        {"text": f"Probing {k}.", "tool_calls": [{"name": "bash", "arguments": {
            "command": f"seq -f 'raw{k}-%04g' 1 {output_lines}", "description": "probe"}}]},
        f"Turn {k} done: the probe passed."])
    return f"Task {k}: probe the parser, part {k}."


def test_older_history_too_small_to_fold_is_a_result_with_its_size(home, fake, tmp_path):
    engine_log = tmp_path / "engine.log"
    fake.responder = worker
    # if the host's runtime-context snapshot makes the older history larger than a checkpoint's
    # framing, the summary is asked for, and it comes out no smaller: the same result
    fake.add_rule({"kind": "*", "messages_contain": SUMMARY_PROMPT}, reply="SUMMARY " * 400)
    tasks = [tool_turn(fake, k, 20) for k in (1, 2, 3)]
    # the landing barrier lands turns 1 and 2 at the next turn's first request; turn 3 is the
    # retained tail (compaction.retainTurns = 1), its compression ready, nothing open to land in
    run = home.run([*tasks, "/compact"], engine_overrides={"turns": {"landingBarrier": True},
                                                           "compaction": {"method": "summary"},
                                                           "engine": {"logFile": str(engine_log)}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    (compact,) = run.commands()
    assert compact["result"] == {"kind": "success", "text": "No compactable history yet."}, compact
    log = engine_log.read_text()
    (line,) = [x for x in log.splitlines() if "/compact:" in x]
    assert re.search(r"/compact: the older history \(turns 1-2, \d+ nodes, ~\d+ tokens\) is too small to fold: "
                     r"(a checkpoint's framing alone is|its checkpoint came out at) ~\d+ tokens; nothing changed",
                     line), line
    _, events = home.session_log(run.session_id)
    attempts = transactions(home, events)  # none, or one closed with the reason: never a checkpoint
    assert all([e["type"] for e in tx] == ["compaction/start", "compaction/end"] for tx in attempts), attempts
    assert [m for e in events if (m := marker_of(e)) and m[0] == "compression"] == [("compression", 1),
                                                                                    ("compression", 2)]
    reload(home, events)
    assert host_problems(run) == []


def test_a_compression_ready_but_not_landed_is_folded_in_its_compressed_form(home, fake, tmp_path):
    engine_log = tmp_path / "engine.log"
    fake.responder = worker
    fake.add_rule({"kind": "*", "messages_contain": SUMMARY_PROMPT}, reply="SUMMARY-CHECKPOINT: probed twice; both passed.")
    tasks = [tool_turn(fake, k, 200) for k in (1, 2)]
    fake.add_rule({"last_user_contains": "Task 3:", "tools_exclude": "replace_turn_nodes"}, reply="Turn 3 done. THIRD")
    overrides = {"turns": {"landingBarrier": True}, "engine": {"logFile": str(engine_log)},
                 "compaction": {"method": "summary", "retainTurns": 0}}
    run = home.run([*tasks, {"waitFile": str(engine_log), "contains": "turn 2: finished by worker", "timeoutMs": 30000},
                    "/compact", "Task 3: anything else?"], engine_overrides=overrides)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    (compact,) = run.commands()
    assert compact["result"]["kind"] == "success" and compact["result"]["text"].startswith("Compacted "), compact
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 3

    # the one summary request read turn 2 compressed (turn 1 had landed compressed already)
    (summary,) = [r for r in fake.requests if SUMMARY_PROMPT in r.all_text()]
    read = summary.all_text()
    assert "COMPRESSED-USER of turn 2." in read and "raw2-0001" not in read and "raw1-0001" not in read
    log = engine_log.read_text()
    assert "turn(s) 2 in their finished compressed form" in log
    assert re.search(r"turn 2: the checkpoint at seq \d+ folded this compressed turn", log)
    assert "landing refused" not in log

    _, events = home.session_log(run.session_id)
    (tx,) = transactions(home, events)
    assert [e["type"] for e in tx] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    assert "SUMMARY-CHECKPOINT" in text_of(tx[2]["data"])
    # turn 2 never landed on its own: the checkpoint holds it, and nothing refused a landing later
    assert [m for e in events if (m := marker_of(e)) and m[0] == "compression"] == [("compression", 1)]
    reload(home, events)
    assert host_problems(run) == []



def test_held_turns_are_pending_for_inspect_and_recovery_and_a_restart_holds_them_again(home, fake, tmp_path, tm_cli):
    """Issue 22: turns the default policy holds (a short session has not made the requests that
    would pay a worker back) keep their raw reasoning under a pending marker, never under one
    that says compressed; `inspect` calls them pending, a new DSH process recovers them, and
    its policy holds them again."""
    engine_log = tmp_path / "engine.log"
    for k in (1, 2, 3):
        fake.add_rule({"last_user_contains": f"Task {k}:", "tools_exclude": "replace_turn_nodes"}, reply={
            "reasoning": f"Thinking about part {k}: " + "the parser reads the stream, then " * 40,
            "text": f"Part {k}: the parser handles it."})
    policy = {"turns": {"minTurnTokens": 600}, "engine": {"logFile": str(engine_log)}}  # the default (the template: 0)
    # an instant scripted session can end before a loaded machine has booted the engine: DSH
    # stays until the engine (catching up on the turns that ended while it started) has held one
    held = {"waitFile": str(engine_log), "contains": ": held; ", "timeoutMs": 30000}
    run = home.run([*(f"Task {k}: explain part {k} of the parser." for k in (1, 2)), held], engine_overrides=policy)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert not [r for r in fake.requests if "replace_turn_nodes" in r.tool_names]  # no worker
    _, events = home.session_log(run.session_id)
    # turn 1's pending marker lands at turn 2's start; where the engine caught up only after that
    # (a loaded machine), the engine's journal holds it instead: pending either way
    assert [m for e in events if (m := marker_of(e))][:1] == [("pending", 1)] or \
        1 in ResultStore(home.root).owed(run.session_id), events
    assert not [m for e in events if (m := marker_of(e)) and m[0] == "compression"]

    path = session_log_for(home.root / "sessions", run.session_id)
    proc = subprocess.run([tm_cli, "inspect", "--json", "--dsh-home", str(home.root), str(path)], capture_output=True,
                          text=True, timeout=120)
    states = {t["turn"]: t["state"] for t in json.loads(proc.stdout)["turns"]}
    assert states[1] == "pending" and states.get(2) in ("pending", "untouched"), states  # turn 2: DSH may exit first

    held_again = {"waitFile": str(engine_log), "contains": "3: held; ", "timeoutMs": 30000}  # turn 3's, with 1 and 2
    again = home.run(["Task 3: explain part 3 of the parser.", held_again], resume=run.session_id,
                     engine_overrides=policy)
    assert again.returncode == 0 and again.tasks()[0]["reason"]["kind"] == "completed", again.records
    log = engine_log.read_text()
    assert re.search(r"turn 1: recovering \((pending or stale marker|journaled, its marker owed)\)", log), log[-3000:]
    assert re.search(r"turns? 1(, 2)?(, 3)?: held; ", log.split("recovering", 1)[1]), log[-3000:]
    assert not [r for r in fake.requests if "replace_turn_nodes" in r.tool_names]
    _, events = home.session_log(run.session_id)
    assert not [m for e in events if (m := marker_of(e)) and m[0] == "compression"]
    reload(home, events)
