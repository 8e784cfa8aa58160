"""Issue 6 acceptance: `turn-memory inspect` on logs the real DSH hosts wrote, plain and
zstd, agrees with the log's own events (turns, markers, checkpoint ranges, surface)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from helpers import NO_TURNS, turn_tasks
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.host.turn_index import node_origins
from turn_memory.logs.reader import read_session_log, session_log_for

pytestmark = pytest.mark.e2e

IS_WORKER = {"tools_include": "replace_turn_nodes"}
AGENT_TURN_1 = [
    {"text": "Looking at the parser.", "tool_calls": [{"name": "bash", "arguments": {"command": "echo probe-one", "description": "a"}}]},
    "Turn one done: parse() now returns [] on empty input.",
]
#: the default form on both hosts: the user nodes merge, the result shrinks, the assistant nodes stay
IN_PLACE = {"tool_calls": [
    {"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n2", "nodes": [
        {"role": "user", "content": "COMPRESSED-USER: fix it."}]}},
    {"name": "replace_turn_nodes", "arguments": {"from": "n4", "to": "n4", "nodes": [{"role": "tool", "content": "R1"}]}}]}
FINISH = {"tool_calls": [{"name": "finish_turn_compression", "arguments": {}}]}


def inspect_json(cli: str, path: Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([cli, "inspect", "--json", str(path)], capture_output=True, text=True, timeout=120,
                          cwd=path.parent)
    return proc.returncode, json.loads(proc.stdout)


def assert_agrees(home, cli: str, path: Path) -> dict[str, Any]:
    """Everything inspect reports, recomputed from the log's own events."""
    _, events = read_session_log(path)
    code, report = inspect_json(cli, path)
    assert code == 0 and report["whole"] and report["damage"] == [] and report["inconsistencies"] == []
    assert report["log"]["events"] == len(events)
    started = [e["data"]["turn"] for e in events if e["type"] == "turn/start"]
    ended = {e["data"]["turn"] for e in events if e["type"] == "turn/end"}
    assert [t["turn"] for t in report["turns"]] == sorted(set(started))
    assert {t["turn"] for t in report["turns"] if t["complete"]} == ended
    markers: dict[int, list[tuple[str, int]]] = {}
    for event in events:
        if (mark := marker_of(event)) is not None:
            markers.setdefault(mark[1], []).append((mark[0], event["seq"]))
    for t in report["turns"]:
        got = [(m["kind"].replace("no-op", "compression"), m["seq"]) for m in t["markers"]]
        assert got == markers.get(t["turn"], []), t
    summaries = [e["data"] for e in events if e["type"] == "compaction/summary"]
    checkpoints = [e for e in events if e["type"] == "user/message" and home.dialect.is_checkpoint_source(e["data"].get("source"))]
    assert [(c["seq"], c["range"]["start"], c["range"]["end"], c["shadowed"]["nodes"]) for c in report["checkpoints"]] \
        == [(c["seq"], s["shadowedSeqs"][0], s["shadowedSeqs"][-1], len(s["shadowedSeqs"]))
            for c, s in zip(checkpoints, summaries)]
    log = SessionLog(home.dialect, events)
    origins = node_origins(events, home.dialect)
    assert report["surface"]["nodes"] == len(log.nodes)
    for t in report["turns"]:
        assert t["current"]["nodes"] == sum(1 for s in log.nodes if origins[s] == ("turn", t["turn"])), t
    return report


def test_inspect_agrees_with_a_zstd_log_with_a_landed_turn(home, fake, tm_cli):
    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE")
    fake.add_rule(IS_WORKER, replies=[IN_PLACE, FINISH])
    run = home.run(["Please fix the parser: empty input crashes it.", "Second task: add a regression test.",
                    {"sleepMs": 1500}],  # time for turn 2 to be journaled
                   engine_overrides={"turns": {"landingBarrier": True}})  # turn 1 lands in turn 2's first step
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    path = session_log_for(home.root / "sessions", run.session_id)
    assert path.name == {"rc8": "session.jsonl.zstd", "v021": "session.v4.jsonl.zstd"}[home.host]
    report = assert_agrees(home, tm_cli, path)
    first = report["turns"][0]
    assert (first["state"], first["landing"]) == ("compressed", "in-place")
    assert first["after"]["tokens"] < first["before"]["tokens"]  # (rc8 restates the snapshot the landing shadowed)
    assert report["savings"]["tokens"] > 0


def test_inspect_agrees_with_a_plain_log_with_a_checkpoint(home, fake, tm_cli):
    for i in range(3):
        fake.push("turn", f"Answer {i}: the parser tokenizes input.")
    fake.push("compaction", "SUMMARY-CHECKPOINT: the parser tokenizes; no tests yet.")
    home.log_compression = "none"
    run = home.run([*turn_tasks(2), "/compact", "After compaction: what next?"], engine_overrides=NO_TURNS)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert run.commands()[0]["result"]["kind"] == "success", run.commands()
    path = session_log_for(home.root / "sessions", run.session_id)
    assert path.name == {"rc8": "session.jsonl", "v021": "session.v4.jsonl"}[home.host]
    report = assert_agrees(home, tm_cli, path)
    (checkpoint,) = report["checkpoints"]
    # /compact keeps the last complete turn verbatim (compaction.retainTurns = 1)
    assert checkpoint["current"] and checkpoint["shadowed"]["turns"] == [1, 1]
    assert [t["shadowed_by"] for t in report["turns"]] == [checkpoint["seq"], None, None]
    assert report["turns"][0]["current"]["nodes"] == 0 < report["turns"][0]["after"]["nodes"]
