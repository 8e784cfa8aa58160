"""Golden renders of every prompt the engine sends (issue 22 item 5), for the fixed session of
`golden_session.py`: each worker's system prompt, tools and task, the thought-hint request,
the long-turn continuation texts, the summary instruction and checkpoint, and the main
agent's memory tools. A prompt change shows up in review as a diff of `tests/unit/golden/`.

After an intended change, regenerate them and read the diff:

    TM_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_prompt_golden.py -q
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from golden_session import REASONING_1, session_log, turn_positions
from turn_memory.catalog import declarations_cache
from turn_memory.compaction import segment_prompt
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.memory import SessionMemoryEditor
from turn_memory.compaction.segmented import plan_segments, task_chars
from turn_memory.compaction.selection import Selection
from turn_memory.compaction.session_tools import SessionTools
from turn_memory.config import CompactionConfig, EngineConfig
from turn_memory.continuation import texts
from turn_memory.devtools.fake_model import FakeRequest
from turn_memory.devtools.scripted_workers import worker_responder
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.land import stamp
from turn_memory.host.reasoning import Hint, ReasoningBlock
from turn_memory.prompts import read_prompt, render_prompt
from turn_memory.turns import prompt as turn_prompt
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import LandingContext, plan_landing
from turn_memory.turns.nodes import original_nodes

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("TM_UPDATE_GOLDEN") == "1"
HINT = Hint(ReasoningBlock(1, 2, REASONING_1), "- finding: the count is off by two of 180 rows\n"
                                               "- hypotheses: header skips extra lines; quoted newlines split records\n"
                                               "- plan: read billing/importer.py; csv.reader would keep import_rows()")


def tools_text(specs: list[dict[str, Any]]) -> str:
    """Tool specs as the model gets them, one section per tool."""
    return "\n\n".join(f"## {s['name']}\n\n{s['description']}\n\nparameters: "
                       f"{json.dumps(s['parameters'], sort_keys=True)}" for s in specs) + "\n"


def editor(turn: int, prefix: str = "") -> TurnNodeEditor:
    log = session_log()
    return TurnNodeEditor(turn, original_nodes(log, turn_positions(log, turn)), id_prefix=prefix)


def turn_task_fork() -> str:
    return turn_prompt.task([editor(1)], [HINT], spawn=False, continuing=False)


def turn_task_first() -> str:
    """A turn job's first worker as it starts by default (`turns.workerStart=spawn`)."""
    return turn_prompt.task([editor(1)], [HINT], spawn=True, continuing=False)


def turn_task_spawn() -> str:
    """Turn 2 after an earlier worker folded its tool call: a spawn continues from `r1`."""
    e = editor(2)
    e.replace("n3", "n4", [Output("assistant", "grep: the dashboard reads monthly_totals (dashboards/orders.sql:3), "
                                               "refreshed daily at 02:00 by billing/cron.py:18.")])
    return turn_prompt.task([e], [], spawn=True, continuing=True)


def turn_task_batch() -> str:
    return turn_prompt.task([editor(2, "t2."), editor(3, "t3.")], [], spawn=False, continuing=False)


def session_tools() -> tuple[SessionTools, SessionMemoryEditor]:
    log = session_log()
    selection = Selection([s for t in (1, 2, 3) for s in turn_positions(log, t)])
    segments, sources = plan_segments(log, selection, 800)
    memory = SessionMemoryEditor(len(segments))
    return SessionTools(memory, segments, sources, assigned=1), memory


def session_task(segment: int) -> str:
    tools, memory = session_tools()
    if segment > 1:  # the first segment is done: its memory is what later ones build on
        memory.replace(1, 0, "P1", None, [
            ("user", "Find out why the nightly import of data/orders-2024-05.csv imports 178 of 180 rows and fix "
                     "it; keep import_rows()'s signature."),
            ("assistant", "billing/importer.py split lines itself, so orders 1042 and 1107 (a newline in the "
                          "quoted notes field) were skipped; it now iterates csv.reader records. Dry run: 180 "
                          "imported; tests/test_importer.py: 7 passed.")])
    tools.assigned = segment
    config = CompactionConfig()
    return segment_prompt.task(tools, memory, tools.segments[segment - 1], spawn=segment > 1,
                               text_chars=task_chars(config), handoff_chars=config.handoffChars)


#: what the workers kept of turns 1 and 2 (the relay run's turns that landed as one message)
FOLDED = {
    1: ("Find out why the nightly import of data/orders-2024-05.csv imports 178 of 180 rows and fix it; keep "
        "import_rows()'s signature.",
        "Ran `python -m billing.import data/orders-2024-05.csv --dry-run -v`: `row 1042: 4 fields, expected 6 "
        "(skipped)`, `row 1107: 4 fields, expected 6 (skipped)`. billing/importer.py split lines itself; it now "
        "iterates csv.reader records. Dry run: 180 imported, 0 skipped; tests/test_importer.py: 7 passed."),
    2: ("The dashboard still shows 178 orders for May (screenshot). Does it read from a cache?",
        "`grep -rn monthly_totals billing/ dashboards/`: dashboards/orders.sql:3 reads the materialized view "
        "monthly_totals, refreshed daily at 02:00 (billing/cron.py:18); `python -m billing.refresh "
        "monthly_totals` updates it now."),
}


def compressed_turns_task() -> str:
    """The relay run's finding re-checked: on 0.2 turns 1 and 2 landed after turn 3 followed
    them, each as one user message (`User: … Assistant: …`); the session worker's task then
    names them `compressed-turn`, which its prompt says to split back."""
    log = session_log(V02)
    log.append({"type": "turn/start", "seq": len(log), "time": 1, "data": {"turn": 4}})
    for turn, (user, assistant) in FOLDED.items():
        positions = turn_positions(log, turn)
        e = TurnNodeEditor(turn, original_nodes(log, positions))
        nodes = [Output("user", user), Output("assistant", assistant)]
        if turn == 2:  # the screenshot's marker is kept
            nodes[0] = Output("user", user + " " + e.originals[1].images[0])
        e.replace(e.nodes[0].id, e.nodes[-1].id, nodes)
        for event in stamp(log, plan_landing(log, e, positions, LandingContext(turn, 4, 1, ("fork",))).events):
            assert log.append(event) == []
    selection = Selection([s for t in (1, 2, 3) for s in turn_positions(log, t)])
    segments, sources = plan_segments(log, selection, 4000)
    tools = SessionTools(SessionMemoryEditor(len(segments)), segments, sources, assigned=1)
    config = CompactionConfig()
    return segment_prompt.task(tools, tools.editor, segments[0], spawn=False, text_chars=task_chars(config),
                               handoff_chars=config.handoffChars)


def checkpoint() -> str:
    summary = tx_.Summary(blocks=[{"type": "text", "text": "User: Fix the import.\n\nAssistant: Fixed: 180 of 180."}],
                          raw_output=[], provider="deepseek-official", model="deepseek-v4-flash")
    message = tx_.checkpoint_message(RC8, tx_.Transaction.new(None, None), summary, read_prompt("checkpoint"))
    return message["content"][0]["text"]


HANDOFF = ("Done: the importer fix (csv.reader records) and its tests. State: the dry run imports 180 of 180. "
           "Unresolved: the dashboard's cached view. Next: refresh monthly_totals and check May.")

#: golden file -> what the engine sends
RENDERS: dict[str, Callable[[], str]] = {
    "turn-worker.system.txt": turn_prompt.persona,
    "turn-worker.tools.txt": lambda: tools_text(turn_prompt.worker_tool_specs()),
    "turn-worker.task.fork-with-hints.txt": turn_task_fork,
    "turn-worker.task.spawn-with-hints.txt": turn_task_first,
    "turn-worker.task.spawn-continuing.txt": turn_task_spawn,
    "turn-worker.task.batch.txt": turn_task_batch,
    "session-worker.system.txt": segment_prompt.persona,
    "session-worker.tools.txt": lambda: tools_text(segment_prompt.worker_tool_specs()),
    "session-worker.task.fork.txt": lambda: session_task(1),
    "session-worker.task.spawn-with-handoff.txt": lambda: session_task(2),
    "session-worker.task.compressed-turns.txt": compressed_turns_task,
    "thought-hints.system.txt": lambda: render_prompt("thought-hints", {}),
    "continuation.reminder.txt": lambda: texts.reminder(120, 84_000, 100, 50) + "\n",
    "continuation.accepted.txt": lambda: texts.accepted() + "\n",
    "continuation.follow-up.txt": lambda: texts.followup(HANDOFF) + "\n",
    "compact-summary.instruction.txt": lambda: render_prompt("compact-summary", {}),
    "checkpoint.txt": checkpoint,
    "memory-tools.txt": lambda: tools_text(declarations_cache(EngineConfig())["publicTools"]),
}


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_each_prompt_renders_as_its_golden_file(name):
    rendered = RENDERS[name]()
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(rendered, encoding="utf-8")
    expected = path.read_text(encoding="utf-8") if path.exists() else ""
    diff = "".join(difflib.unified_diff(expected.splitlines(True), rendered.splitlines(True), f"golden/{name}",
                                        "rendered now"))
    assert rendered == expected, f"{diff}\nIf the change is intended: TM_UPDATE_GOLDEN=1 .venv/bin/python -m pytest " \
                                 f"tests/unit/test_prompt_golden.py -q"


def test_no_golden_file_is_left_without_its_render():
    assert sorted(p.name for p in GOLDEN.glob("*.txt")) == sorted(RENDERS)


def test_the_fixed_session_covers_what_the_tasks_must_show():
    """Each optional block of a task is on in at least one golden render."""
    fork, spawn, batch = turn_task_fork(), turn_task_spawn(), turn_task_batch()
    assert "Thought hints" in fork and "host-context" in fork and "raw reasoning" in fork
    assert "You start fresh" in spawn and "r1" in spawn and "<memory-image" in spawn
    assert "t2.n1" in batch and "t3.n1" in batch
    assert "· user · compressed-turn\nUser: Find out why" in compressed_turns_task()
    assert SessionLog(V02, session_log(V02).events).reload_problems == []
    first, second = session_task(1), session_task(2)
    assert "You start fresh" not in first and "What earlier segments established" not in first
    assert "You start fresh" in second and "What earlier segments established" in second and "<memory-image" in second


def _request(task: str, tool: str) -> FakeRequest:
    body = {"messages": [{"role": "user", "content": task}], "tools": [{"type": "function", "function": {"name": tool}}]}
    return FakeRequest(index=0, kind="turn", path="/chat/completions", headers={}, body=body, time=0.0)


def test_the_scripted_worker_reads_the_catalogs_the_tasks_carry():
    """The stand-in worker (demo, benchmarks, the eval tool) parses these catalog lines."""
    (call,) = worker_responder(_request(turn_task_fork(), "replace_turn_nodes"))["tool_calls"]
    assert call["arguments"]["from"] == "n1" and call["arguments"]["to"] == "n11"
    user, answer = call["arguments"]["nodes"]
    assert user["content"].startswith("The nightly import drops rows") and answer["content"].startswith("Fixed.")
    (call,) = worker_responder(_request(session_task(1), "replace_session_memory"))["tool_calls"]
    assert call["arguments"]["from"] == "P1" and call["arguments"]["expected_revision"] == 0
    asks = call["arguments"]["nodes"][0]["content"]
    assert asks.startswith("The nightly import drops rows") and "runtime context" not in asks
