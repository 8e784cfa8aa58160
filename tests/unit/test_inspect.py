"""`turn-memory inspect` reads a session log and reports per-turn state and savings."""

from __future__ import annotations

import json

from turn_builders import Shape, completed_turn_log
from turn_memory.host.dialect import RC8
from turn_memory.inspect_log import summarize_log
from turn_memory.landing.land import stamp
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import LandingContext, plan_landing
from turn_memory.turns.nodes import original_nodes


def write_log(tmp_path, events):
    path = tmp_path / "session.jsonl"
    lines = [json.dumps({"type": "session", "version": 0, "id": "s", "createdAt": 1})]
    lines += [json.dumps(e) for e in events]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_inspect_reports_landed_and_pending_turns_and_the_savings(tmp_path):
    log, positions = completed_turn_log(RC8, Shape(), prior_turns=1)  # turn 2 pending, turn 3 open
    editor = TurnNodeEditor(2, original_nodes(log, positions))
    editor.replace("n1", "n5", [Output("user", "Fix the parser."), Output("assistant", "Fixed.")])
    for event in stamp(log, plan_landing(log, editor, positions, LandingContext(2, 3, 1)).events):
        log.append(event)
    summary = summarize_log(write_log(tmp_path, log.events))
    by_turn = {t["turn"]: t for t in summary["turns"]}
    assert by_turn[1]["state"] == "untouched" and by_turn[1]["nodes"] == by_turn[1]["raw_nodes"]
    assert by_turn[2]["state"] == "landed" and by_turn[2]["nodes"] == 2 and by_turn[2]["raw_nodes"] == 5
    assert by_turn[2]["tokens"] < by_turn[2]["raw_tokens"]
    assert summary["surface"]["tokens"] < summary["raw"]["tokens"] and summary["reload_problems"] == []
