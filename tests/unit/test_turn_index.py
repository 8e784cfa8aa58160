"""The log's incremental turn index answers exactly what a full scan of the log answers, at
every point of logs of both dialects: in-place landings, 0.2's structured and checkpoint
landings, no-op and pending markers, session checkpoints, a hand-off. (The timing side is
`bench/recovery.py`.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pytest

from turn_builders import Shape, completed_turn_log
from turn_memory.devtools.synthetic_log import write_synthetic_log
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.continuations import ContinuationLedger, awaiting_followup
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import estimate_message
from turn_memory.host.turn_index import LANDING_STEP, TURN_NODE_TYPES, LifecycleState, has_reasoning, node_origins
from turn_memory.logs.reader import read_session_log
from turn_memory.runtime.land import validate
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import LandingContext, pending_plan, plan_landing
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turns_to_recover


# -- full passes over a log: what the incremental index must always equal ------------------
@dataclass(frozen=True)
class TurnMarks:
    completed: set[int]
    pending: set[int]
    landed: set[int]


def scan_marks(events: Sequence[dict[str, Any]]) -> TurnMarks:
    """A full pass (the log's index keeps the same sets: `turn_ends`, `pending`, `landed`)."""
    completed, pending, landed = set(), set(), set()
    for event in events:
        if event["type"] == "turn/end":
            completed.add(event["data"]["turn"])
        elif (mark := marker_of(event)) is not None:
            (pending if mark[0] == "pending" else landed).add(mark[1])
    return TurnMarks(completed, pending, landed)


def lifecycle_state(events: Sequence[dict[str, Any]]) -> LifecycleState:
    """The lifecycle state at the end of `events`, scanning back (up to the whole log when
    there is no end-seed); a `SessionLog` keeps it incrementally (`log.index.lifecycle`)."""
    open_turn: int | None = None
    turn_known = compaction_known = False
    unmatched: dict[str, Any] | None = None
    end_seed: int | None = None
    for event in reversed(events):
        kind = event["type"]
        if end_seed is None and kind == "session/end-seed":
            end_seed = event["seq"]
        if not compaction_known and kind in ("compaction/start", "compaction/end"):
            compaction_known = True
            unmatched = event if kind == "compaction/start" else None
        if not turn_known and kind in ("turn/start", "turn/end"):
            turn_known = True
            open_turn = event["data"]["turn"] if kind == "turn/start" else None
        if turn_known and compaction_known and end_seed is not None:
            break
    return LifecycleState(open_turn, unmatched, end_seed)


def open_step_of(events: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    """(turn, step) of the step open at the end of the log, if any."""
    for event in reversed(events):
        kind = event["type"]
        if kind in ("step/end", "turn/end", "turn/start"):
            return None
        if kind == "step/start":
            return event["data"]["turn"], event["data"]["step"]
    return None


def scan_turn_nodes(log: SessionLog, origins, turn: int) -> list[int]:
    return [s for s in log.nodes if origins.get(s) == ("turn", turn) and log.events[s]["type"] in TURN_NODE_TYPES]


def scan_recover(log: SessionLog, live_from: int | None) -> list[int]:
    """The recovery scan as a full pass over the log (what it was before the index)."""
    marks = scan_marks(log.events)
    origins = node_origins(log.events, log.dialect)
    redo = {t for t in marks.pending - marks.landed if t in marks.completed}
    if live_from is not None:
        redo.update(e["data"]["turn"] for e in log.events[live_from:]
                    if e["type"] == "turn/end" and e["data"]["turn"] not in marks.landed)
    redo.update(r.turn for r in awaiting_followup(log.events) if r.turn not in marks.landed)
    redo.update(t for t in marks.landed & marks.completed
                if any(has_reasoning(log.events[s]) for s in scan_turn_nodes(log, origins, t)))
    return sorted(redo)


def check(log: SessionLog) -> None:
    index, events = log.index, log.events
    origins = node_origins(events, log.dialect)
    assert index.origins == origins
    turns = {e["data"]["turn"] for e in events if e["type"] == "turn/start"}
    for turn in turns:
        nodes = scan_turn_nodes(log, origins, turn)
        assert index.turn_nodes(turn) == nodes, turn
        assert index.has_raw_reasoning(turn) == any(has_reasoning(events[s]) for s in nodes), turn
    assert index.lifecycle == lifecycle_state(events)
    assert index.open_step == open_step_of(events)
    marks = scan_marks(events)
    assert (index.completed, index.pending, index.landed) == (marks.completed, marks.pending, marks.landed)
    # the agent loop's steps of completed turns (its model requests), not turn-memory's landing steps
    assert index.completed_steps() == sum(1 for e in events if e["type"] == "step/start"
                                          and e["data"]["step"] != LANDING_STEP and e["data"]["turn"] in marks.completed)
    for live_from in (None, 0, len(events) // 2, len(events)):
        assert turns_to_recover(log, live_from, ContinuationLedger.of(events)) == scan_recover(log, live_from)
    for seq in log.nodes:
        message = log.message_of(seq)
        assert log.price(seq) == (estimate_message(message) if message is not None else None)


def check_every_prefix(events: list[dict], dialect) -> None:
    log = SessionLog(dialect)
    for event in events:
        log.append(event)
        check(log)


def land_plan(log: SessionLog, plan) -> None:
    for event in validate(log, plan):
        assert not log.append(event)


def request_turn(log: SessionLog, turn: int) -> None:
    """A completed turn that ends with a successful continuation call."""
    def add(kind, data, **surface):
        log.append({"type": kind, "seq": len(log), "time": 1, "data": data, **surface})

    add("step/start", {"turn": turn, "step": 1})
    add("user/message", {"id": "u-h", "role": "user", "source": {"kind": "user"},
                         "content": [{"type": "text", "text": "go on"}]}, surfaceOp="append")
    add("assistant/message", log.dialect.assistant_data(turn, 1, {
        "id": "a-h", "role": "assistant", "source": {"kind": "model", "provider": "p", "model": "m"},
        "content": [{"type": "tool-call", "id": "call-h", "name": "continue_after_turn_compression",
                     "arguments": '{"handoff": "next: the printer"}'}]}), surfaceOp="append")
    add("tool/call", {"turn": turn, "step": 1, "callId": "call-h", "name": "continue_after_turn_compression",
                      "arguments": '{"handoff": "next: the printer"}'})
    add("tool/result", {"turn": turn, "step": 1, "message": log.dialect.tool_result_message(
        "t-h", "call-h", [{"type": "text", "text": "ok"}])}, surfaceOp="append")
    add("step/end", {"turn": turn, "step": 1})
    add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


@pytest.mark.parametrize("dialect,mode", [(RC8, "in place"), (V02, "structured"), (V02, "checkpoint")],
                         ids=["rc8", "v02-mode3", "v02-mode4"])
def test_the_index_equals_a_full_scan_through_landings_and_a_handoff(dialect, mode):
    shape = Shape(steps=[(1, True, False), (1, False, True), (0, False, False)])
    log, positions = completed_turn_log(dialect, shape, prior_turns=2)  # pending marker, turn 4 open
    open_step = None
    if mode == "structured":  # inside the loop's first step of turn 4, the turn still the tail
        log.append({"type": "step/start", "seq": len(log), "time": 1, "data": {"turn": 4, "step": 1}})
        open_step = 1
    elif mode == "checkpoint":  # past it: one user checkpoint
        log.append({"type": "step/start", "seq": len(log), "time": 1, "data": {"turn": 4, "step": 1}})
        log.append({"type": "step/end", "seq": len(log), "time": 1, "data": {"turn": 4, "step": 1}})
    editor = TurnNodeEditor(3, original_nodes(log, positions))
    editor.replace("n2", f"n{len(positions)}", [Output("assistant", "Fixed the parser and the lexer.")])
    land_plan(log, plan_landing(log, editor, positions, LandingContext(3, 4, 1, ("fork",), open_step=open_step)))
    if mode == "in place":  # and a no-op on an earlier turn (its reasoning-free nodes stay)
        earlier = TurnNodeEditor(2, original_nodes(log, log.index.turn_nodes(2)))
        land_plan(log, plan_landing(log, earlier, log.index.turn_nodes(2), LandingContext(2, 4, 1)))
    if log.index.open_step is not None:
        log.append({"type": "step/end", "seq": len(log), "time": 1, "data": {"turn": 4, "step": log.index.open_step[1]}})
    request_turn(log, 4)
    assert [r.turn for r in ContinuationLedger.of(log.events).awaiting()] == [4]
    check_every_prefix(log.events, dialect)


def test_the_index_equals_a_full_scan_on_a_long_session_with_checkpoints(tmp_path):
    path = tmp_path / "s.jsonl.zstd"
    write_synthetic_log(path, turns=45, checkpoint_every=12)
    _, events = read_session_log(path)
    slim = [e if e["type"] != "assistant/chunk" else {**e, "data": None} for e in events]
    log = SessionLog(RC8)
    checkpoints = 0
    for event in slim:
        log.append(event)
        checkpoints += event["type"] == "compaction/end"
        if event["type"] in ("turn/end", "compaction/end", "step/end") and event["seq"] % 7 == 0:
            check(log)
    check(log)
    assert checkpoints >= 2 and log.index.pending - log.index.landed  # it has what the scan looks for


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_a_pending_marker_written_after_the_next_turn_began_keeps_that_turns_nodes_its_own(dialect):
    """Under load the pending marker of turn 2 (written at its turn/end, asynchronously) can
    reach the log after turn 3's user message: the loop's nodes after it are still turn 3's,
    so turn 3 stays one contiguous run of nodes and gets compressed (it used to be handed to
    turn 2, and turn 3 was skipped as "not contiguous")."""
    import orjson

    from turn_memory.inspection.fold import Fold
    log, positions = completed_turn_log(dialect, Shape(), prior_turns=1, pending=False)

    def add(kind: str, data: dict, **surface: Any) -> None:
        log.append({"type": kind, "seq": len(log), "time": 1, "data": data, **surface})

    add("step/start", {"turn": 3, "step": 1})
    add("user/message", {"id": "u-3", "role": "user", "source": {"kind": "user"},
                         "content": [{"type": "text", "text": "third task"}]}, surfaceOp="append")
    user3 = len(log) - 1
    land_plan(log, pending_plan(log, positions[0], 2))  # turn 2's marker, late
    add("assistant/message", dialect.assistant_data(3, 1, {
        "id": "a-3", "role": "assistant", "source": {"kind": "model", "provider": "p", "model": "m"},
        "content": [{"type": "text", "text": "probing"}, {"type": "tool-call", "id": "call-3", "name": "bash",
                                                          "arguments": "{}"}]}), surfaceOp="append")
    add("tool/call", {"turn": 3, "step": 1, "callId": "call-3", "name": "bash", "arguments": "{}"})
    add("tool/result", {"turn": 3, "step": 1, "message": dialect.tool_result_message(
        "t-3", "call-3", [{"type": "text", "text": "ok"}])}, surfaceOp="append")
    add("step/end", {"turn": 3, "step": 1})
    add("turn/end", {"turn": 3, "reason": {"kind": "completed"}})

    third = log.index.turn_nodes(3)
    assert third[0] == user3 and [log.events[s]["type"] for s in third] == [
        "user/message", "assistant/message", "tool/result"]
    at = log.index_of(third[0])
    assert log.nodes[at:at + len(third)] == third  # contiguous: a job would compress it
    assert len(log.index.turn_nodes(2)) == len(positions)
    check(log)
    fold = Fold(dialect)
    fold.feed_lines([orjson.dumps(e) for e in log.events], lambda i: i)
    assert (fold.turns[3].nodes, fold.turns[2].nodes) == (3, len(positions))  # `turn-memory inspect` agrees
