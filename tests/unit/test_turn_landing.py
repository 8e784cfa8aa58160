"""Landing a compressed turn: what lands on the surface, under each dialect, and that the
host (the surface model, which applies both dialects' append and reload rules) accepts it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surface_builders import LogBuilder
from turn_builders import Shape, add_turn, completed_turn_log
from turn_memory.host.dialect import RUNTIME_CONTEXT_KIND
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog, pairing_problems
from turn_memory.runtime.land import stamp, validate
from turn_memory.turns.editor import EditError, Output, TurnNodeEditor
from turn_memory.turns.landing import (BlockTurn, LandingContext, LandingImpossible, lands_in_place, pending_plan,
                                       plan_block_landing, plan_landing)
from turn_memory.turns.recovery import turn_nodes, turns_to_recover
from turn_memory.turns.nodes import original_nodes

DIALECTS = [pytest.param(RC8, id="rc8"), pytest.param(V02, id="v02")]


def setup(dialect, shape=None, **kw):
    log, positions = completed_turn_log(dialect, shape or Shape(), **kw)
    editor = TurnNodeEditor(2, original_nodes(log, positions))
    return log, positions, editor


def land(log: SessionLog, plan) -> list[dict]:
    events = validate(log, plan)
    for event in events:
        assert not log.append(event)
    return events


def messages(log: SessionLog) -> list[tuple[str, str]]:
    out = []
    for seq in log.nodes:
        m = log.message_of(seq)
        if m is not None:
            out.append((m["role"], "".join(b.get("text", "") for b in m["content"] if b.get("type") == "text")))
    return out


def ctx(workers: int = 1, open_turn: int | None = 3, open_step: int | None = None) -> LandingContext:
    return LandingContext(turn=2, open_turn=open_turn, workers=workers, open_step=open_step)


def open_loop_step(log: SessionLog, turn: int = 3) -> None:
    """The agent loop's first step of the open turn has started (nothing appended in it yet)."""
    assert not log.append({"type": "step/start", "seq": len(log), "time": 1, "data": {"turn": turn, "step": 1}})


def model_view_is_paired(log: SessionLog) -> bool:
    return not pairing_problems(log.dialect, (log.events[s] for s in log.nodes))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_six_nodes_land_as_two_in_place(dialect):
    log, positions, editor = setup(dialect, Shape(steps=[(1, True, False), (1, False, True), (0, False, False)],
                                                  snapshot=False))
    assert len(positions) == 7  # user, assistant+call, result, steer, assistant+call, result, answer
    editor.replace("n1", editor.nodes[-1].id, [Output("user", "Fix the parser (steer: also the lexer)."),
                                               Output("assistant", "Ran tests; fixed empty-input crash in parse().")])
    before = len(log)
    events = land(log, plan_landing(log, editor, positions, ctx()))
    turn_nodes = [s for s in log.nodes if s >= before]
    roles = [r for r, _ in messages(log)[-2:]]
    if dialect is RC8:
        assert [e["type"] for e in events] == ["step/start", "user/message", "assistant/message", "step/end"]
        assert roles == ["user", "assistant"]
        user, assistant = events[1], events[2]
        assert user["surfaceOp"]["start"] == positions[0] and assistant["surfaceOp"]["end"] == positions[-1]
        assert set(positions) <= set(user["sourceEventSeqs"]) | set(assistant["sourceEventSeqs"])
        assert assistant["data"]["step"] == 0 and assistant["data"]["turn"] == 3
        assert marker_of(events[1]) == ("compression", 2)
        assert len(turn_nodes) == 2
    else:  # v02 pre-step: no step may be opened for an appended assistant (0.2.1 reload), so mode 4
        assert [e["type"] for e in events] == ["user/message"]
        assert events[0]["surfaceOp"] == V02.replace_op(positions[0], positions[-1])
        assert "Assistant: Ran tests" in events[0]["data"]["content"][0]["text"]
        assert marker_of(events[0]) == ("compression", 2)
        assert len(turn_nodes) == 1
    SessionLog(dialect, log.events)  # reloads


def test_v02_mode3_in_an_open_loop_step_appends_the_rest_inside_it():
    log, positions, editor = setup(V02, Shape(steps=[(1, False, False), (0, False, False)], snapshot=False))
    open_loop_step(log)
    # keep the assistant's tool call and rewrite its result; fold the rest
    tool = next(n for n in editor.nodes if n.role == "tool")
    editor.replace(tool.id, None, [Output("tool", "[3 files]")])
    first_assistant = editor.nodes[1]
    assert first_assistant.role == "assistant"
    editor.replace(editor.nodes[-1].id, None, [Output("assistant", "Done.")])
    events = land(log, plan_landing(log, editor, positions, ctx(open_step=1)))
    kinds = [e["type"] for e in events]
    # no synthetic step: everything belongs to the loop's open step 1 of turn 3
    assert "step/start" not in kinds and kinds[0] == "user/message"
    assert kinds[1:5] == ["assistant/message", "tool/call", "tool/result", "assistant/message"]
    call = events[1]["data"]["message"]["content"][-1]
    assert call["type"] == "tool-call" and events[2]["data"]["callId"] == call["id"]
    result = events[3]
    assert result["data"]["message"]["toolCallId"] == call["id"] and (result["data"]["turn"], result["data"]["step"]) == (3, 1)
    assert V02.tool_result_blocks(result["data"]["message"]) == [{"type": "text", "text": "[3 files]"}]
    assert model_view_is_paired(log)
    assert SessionLog(V02, log.events).reload_problems == []


def test_v02_mode3_rewritten_tool_result_never_becomes_a_user_message():
    log, positions, editor = setup(V02, Shape(steps=[(1, False, False), (0, False, False)], snapshot=False))
    open_loop_step(log)
    tool = next(n for n in editor.nodes if n.role == "tool")
    editor.replace(tool.id, None, [Output("tool", "[short]")])
    editor.replace(editor.nodes[-1].id, None, [Output("assistant", "Done.")])
    plan = plan_landing(log, editor, positions, ctx(open_step=1))
    assert [e["type"] for e in plan.events].count("tool/result") == 1
    assert all(not (e["type"] == "user/message" and "[short]" in str(e["data"])) for e in plan.events)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_unchanged_turn_lands_as_marker_copy_of_first_user_node(dialect):
    log, positions, editor = setup(dialect, Shape(steps=[(0, False, False)]))
    before = messages(log)
    (event,) = land(log, plan_landing(log, editor, positions, ctx()))
    assert event["type"] == "user/message" and marker_of(event) == ("compression", 2)
    assert messages(log) == before  # same text, same roles, same places


@pytest.mark.parametrize("dialect", DIALECTS)
def test_pending_marker_is_an_exact_content_copy(dialect):
    log, positions = completed_turn_log(dialect, Shape(), pending=False, next_turn_open=False)
    before = messages(log)
    (event,) = land(log, pending_plan(log, positions[0], 2))
    assert marker_of(event) == ("pending", 2) and messages(log) == before


def test_rc8_unchanged_nodes_keep_their_events_and_only_changed_ones_land():
    log, positions, editor = setup(RC8, Shape(steps=[(1, False, False), (0, False, False)]))
    editor.replace("n5", None, [Output("assistant", "Done: parser fixed.")])
    events = land(log, plan_landing(log, editor, positions, ctx()))
    kinds = [e["type"] for e in events]
    # the first user node is re-marked, the final answer rewritten; the tool pair stays verbatim
    assert kinds == ["step/start", "user/message", "assistant/message", "step/end"]
    assert positions[2] in log.nodes and positions[3] in log.nodes


def test_v02_user_only_change_lands_one_to_one():
    log, positions, editor = setup(V02, Shape(steps=[(0, False, False)]))
    editor.replace("n1", None, [Output("user", "Fix the parser, carefully.")])
    events = land(log, plan_landing(log, editor, positions, ctx(open_turn=None)))
    assert [e["type"] for e in events] == ["user/message"]
    assert events[0]["surfaceOp"] == V02.replace_op(positions[0], positions[0])


def test_v02_not_at_tail_degrades_to_one_checkpoint():
    log, positions, editor = setup(V02, Shape(steps=[(1, False, False), (0, False, False)]))
    log.append({"type": "user/message", "seq": len(log), "time": 1, "surfaceOp": "append",
                "data": {"id": "later", "role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": "next"}]}})
    editor.replace("n3", "n5", [Output("assistant", "Ran the tool; fixed.")])
    (event,) = land(log, plan_landing(log, editor, positions, ctx()))[:1]
    assert event["type"] == "user/message" and event["surfaceOp"] == V02.replace_op(positions[0], positions[-1])
    assert "Assistant: Ran the tool; fixed." in event["data"]["content"][0]["text"]


def test_landing_that_shadows_the_retained_snapshot_restates_it_on_rc8():
    log, positions, editor = setup(RC8)
    editor.replace("n1", "n5", [Output("user", "Fix the parser."), Output("assistant", "Fixed.")])
    events = land(log, plan_landing(log, editor, positions, ctx()))
    assert events[-1]["type"] == "user/message" and "runtime context" in events[-1]["data"]["content"][0]["text"]
    assert log.nodes[-1] == events[-1]["seq"]


def test_on_v02_the_loop_restates_a_shadowed_snapshot_itself():
    """0.2.1's loop forgets a retained snapshot that a replacement cites and projects it again
    before its next request; a copy of ours would land before the turn's user message."""
    log, positions, editor = setup(V02)
    editor.replace("n1", "n5", [Output("user", "Fix the parser."), Output("assistant", "Fixed.")])
    events = land(log, plan_landing(log, editor, positions, ctx()))
    assert not any(RUNTIME_CONTEXT_KIND == (e["data"].get("source") or {}).get("kind")
                   for e in events if e["type"] == "user/message")


def test_assistant_rewrites_need_an_open_turn_on_rc8():
    log, positions, editor = setup(RC8, next_turn_open=False)
    editor.replace("n3", "n5", [Output("assistant", "Fixed.")])
    with pytest.raises(Exception, match="open"):
        plan_landing(log, editor, positions, ctx(open_turn=None))


# -- block landings: ready turns that reach the tail land together, each keeping its shape --

def block_log(dialect, shapes: list[Shape]) -> tuple[SessionLog, dict[int, list[int]]]:
    """An earlier raw turn 1, then one pending turn per shape (turns 2, 3, …), then the next
    turn open with the agent loop's first step started: the moment a block lands."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    if dialect.protects_system_head:
        b.system()
    add_turn(b, Shape(steps=[(0, False, False)], snapshot=False), "earlier task")
    for shape in shapes:
        add_turn(b, shape)
    log = SessionLog(dialect, b.events)
    for turn in range(2, b.turn_no + 1):
        for event in stamp(log, pending_plan(log, turn_nodes(log, turn)[0], turn).events):
            assert log.append(event) == []
    log.append({"type": "turn/start", "seq": len(log), "time": 1, "data": {"turn": b.turn_no + 1}})
    open_loop_step(log, b.turn_no + 1)
    return log, {turn: turn_nodes(log, turn) for turn in range(2, b.turn_no + 1)}


def member(log: SessionLog, turn: int, positions: list[int], open_step: int | None = 1) -> BlockTurn:
    editor = TurnNodeEditor(turn, original_nodes(log, positions), id_prefix=f"t{turn}.")
    return BlockTurn(editor, positions, LandingContext(turn, log.index.open_turn, 1, ("fork",), open_step=open_step))


def fold(block: BlockTurn, user: str, assistant: str) -> None:
    nodes = block.editor.nodes
    block.editor.replace(nodes[0].id, nodes[-1].id, [Output("user", user), Output("assistant", assistant)])


def test_v02_turns_that_reach_the_tail_land_as_one_block_each_keeping_its_shape():
    log, turns = block_log(V02, [Shape(), Shape(steps=[(1, False, False), (0, False, False)], snapshot=False)])
    two, three = member(log, 2, turns[2]), member(log, 3, turns[3])
    fold(two, "Fix the parser.", "Fixed parse() on empty input.")
    # turn 3 keeps its tool call, with a shorter result, and rewrites its answer
    tool = next(n for n in three.editor.nodes if n.role == "tool")
    three.editor.replace(tool.id, None, [Output("tool", "[3 files]")])
    three.editor.replace(three.editor.nodes[0].id, three.editor.nodes[0].id, [Output("user", "Check the lexer.")])
    three.editor.replace(three.editor.nodes[-1].id, None, [Output("assistant", "The lexer is fine.")])
    plan = plan_block_landing(log, [two, three])
    assert plan.label == "turns 2, 3 block landing (9 -> 6)" and plan.spans == [turns[2] + turns[3]]
    events = land(log, plan)
    kinds = [e["type"] for e in events]
    assert kinds == ["user/message", "assistant/message", "user/message", "assistant/message", "tool/call",
                     "tool/result", "assistant/message"]
    assert events[0]["surfaceOp"] == V02.replace_op(turns[2][0], turns[3][-1])
    assert set(turns[2] + turns[3]) <= set(events[0]["sourceEventSeqs"])
    assert events[2]["surfaceOp"] == "append" and set(turns[3]) <= set(events[2]["sourceEventSeqs"])
    assert [marker_of(e) for e in events if marker_of(e)] == [("compression", 2), ("compression", 3)]
    assert all((e["data"]["turn"], e["data"]["step"]) == (4, 1) for e in events if e["type"] != "user/message")
    assert messages(log)[-6:] == [("user", "Fix the parser."), ("assistant", "Fixed parse() on empty input."),
                                  ("user", "Check the lexer."), ("assistant", "step 1 answer " + "detail " * 15),
                                  ("tool", "[3 files]"), ("assistant", "The lexer is fine.")]
    # each turn owns its own nodes again: recovery, inspect and the next compression read them so
    assert log.index.turn_nodes(2) == [e["seq"] for e in events[:2]]
    assert log.index.turn_nodes(3) == [e["seq"] for e in events[2:] if e["type"] != "tool/call"]
    assert turns_to_recover(log) == []
    assert model_view_is_paired(log)
    reloaded = SessionLog(V02, log.events)
    assert reloaded.reload_problems == [] and reloaded.index.turn_nodes(3) == log.index.turn_nodes(3)


def test_a_block_that_does_not_reach_the_tail_or_lands_outside_the_loops_step_is_refused():
    log, turns = block_log(V02, [Shape(), Shape(), Shape()])
    two, three = member(log, 2, turns[2]), member(log, 3, turns[3])
    fold(two, "a", "b")
    fold(three, "c", "d")
    before = len(log)
    with pytest.raises(LandingImpossible, match="do not reach the surface tail"):
        plan_block_landing(log, [two, three])  # turn 4 is still raw after them
    four = member(log, 4, turns[4], open_step=None)
    fold(four, "e", "f")
    with pytest.raises(LandingImpossible, match="a step the agent loop opened"):
        plan_block_landing(log, [BlockTurn(m.editor, m.positions, four.ctx) for m in (two, three, four)])
    assert len(log) == before


def test_a_turn_lands_in_place_wherever_it_sits_unless_assistants_must_be_appended():
    log, turns = block_log(V02, [Shape(), Shape()])
    two = member(log, 2, turns[2])
    assert lands_in_place(log, two.editor, 4)  # nothing changed yet: the no-op marker
    two.editor.replace("t2.n1", None, [Output("user", "Fix it.")])
    assert lands_in_place(log, two.editor, 4)  # mode 2
    fold(two, "a", "b")
    assert not lands_in_place(log, two.editor, 4)
    rc8, rc8_turns = block_log(RC8, [Shape()])
    on_rc8 = member(rc8, 2, rc8_turns[2])
    fold(on_rc8, "a", "b")
    assert lands_in_place(rc8, on_rc8.editor, 3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=st.lists(shapes_ := st.builds(Shape, steps=st.lists(st.tuples(st.integers(0, 2), st.booleans(),
                                                                             st.booleans()), min_size=1, max_size=3),
                                            snapshot=st.booleans()), min_size=1, max_size=3),
       folds=st.lists(st.booleans(), min_size=3, max_size=3))
def test_random_blocks_always_land_valid_on_v02(shapes, folds):
    """Any block of finished turns at the tail lands as a plan the host takes and reloads,
    every tool call answered, every turn owning its own nodes."""
    log, turns = block_log(V02, shapes)
    block = [member(log, turn, positions) for turn, positions in turns.items()]
    for m, folded in zip(block, folds):
        if folded or m.editor.final_problems():
            fold(m, f"task {m.ctx.turn}", f"result {m.ctx.turn}")
    events = land(log, plan_block_landing(log, block))
    assert SessionLog(V02, log.events).reload_problems == [] and model_view_is_paired(log)
    assert [marker_of(e)[1] for e in events if marker_of(e)] == list(turns)
    for m in block:
        assert len(log.index.turn_nodes(m.ctx.turn)) == len(m.editor.nodes)


# -- property: random edit sequences never produce a plan the host rejects ----------------
shapes = st.builds(
    Shape,
    steps=st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.booleans()), min_size=1, max_size=4),
    snapshot=st.booleans(),
)
edits = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(1, 4),
                           st.lists(st.sampled_from(["user", "assistant", "tool"]), min_size=4, max_size=4)),
                 max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes, ops=edits, dialect=st.sampled_from([RC8, V02]), tail=st.booleans(), in_step=st.booleans())
def test_random_edits_never_yield_a_plan_the_host_rejects(shape, ops, dialect, tail, in_step):
    """Whatever the worker does, the landing is accepted by the dialect's model (append and
    reload rules, lifecycle included) and the model never sees an unpaired tool call, whether
    it lands in the next turn's pre-step or inside the loop's first step."""
    log, positions = completed_turn_log(dialect, shape, next_turn_open=True)
    if in_step:
        open_loop_step(log)
    if not tail:
        log.append({"type": "user/message", "seq": len(log), "time": 1, "surfaceOp": "append",
                    "data": {"id": "x", "role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": "hi"}]}})
    editor = TurnNodeEditor(2, original_nodes(log, positions))
    for a, b, m, roles in ops:
        i, j = sorted((a % len(editor.nodes), b % len(editor.nodes)))
        before = [(n.id, n.slice) for n in editor.nodes]
        try:
            editor.replace(editor.nodes[i].id, editor.nodes[j].id, [Output(r, f"text {k}") for k, r in enumerate(roles[:m])])
        except EditError:
            assert [(n.id, n.slice) for n in editor.nodes] == before  # a refused edit changes nothing
        # the slices always partition the original positions, in order, without gaps
        flat = [p for n in editor.nodes for p in range(n.slice[0], n.slice[1] + 1)]
        assert flat == list(range(len(positions)))
    if editor.final_problems():  # make it finishable the way a worker would: fold the rest
        editor.replace(editor.nodes[0].id, editor.nodes[-1].id, [Output("user", "task"), Output("assistant", "result")])
    assert not editor.final_problems()
    plan = plan_landing(log, editor, positions, LandingContext(turn=2, open_turn=3, workers=1,
                                                               open_step=1 if in_step else None))
    events = validate(log, plan)  # raises if the host would refuse any event or the reload
    for event in stamp(log, plan.events):
        assert log.append(event) == []
    assert SessionLog(dialect, log.events).reload_problems == []
    assert model_view_is_paired(log)
    assert any(marker_of(e) == ("compression", 2) for e in events)


def test_a_v02_turn_with_the_hosts_tool_registry_message_lands_in_place_around_it():
    """0.2 commits a developer/message inside the step whose tool list changed (the memory tools
    joining the request that first needs them): that turn is still marked and compressed in
    place, the message staying where it is."""
    from turn_memory.turns.compression import split_by_host_message, surface_positions

    b = LogBuilder(V02)
    b.system()
    add_turn(b, Shape(steps=[(0, False, False)], snapshot=False), "earlier task")
    b.turn_no = turn = 2
    b.add("turn/start", {"turn": turn})
    b.step_no = 1
    b.add("step/start", {"turn": turn, "step": 1})
    b.user("please fix the parser " + "with care " * 10)
    b.snapshot()
    developer = b.add("developer/message", {"turn": turn, "step": 1, "message": {
        "id": "dev-1", "role": "developer", "source": {"kind": "tool-registry"},
        "content": [{"type": "text", "text": ""}]}}, op="append")
    b.assistant("reading it " + "detail " * 15, tool_calls=("call-x",))
    b.tool_result("call-x", "output " * 40, call_seq=b.tool_call("call-x"))
    b.add("step/end", {"turn": turn, "step": 1})
    b.step_no = 2
    b.add("step/start", {"turn": turn, "step": 2})
    b.assistant("Fixed the parser.")
    b.add("step/end", {"turn": turn, "step": 2})
    b.add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    b.add("turn/start", {"turn": 3})
    log = SessionLog(V02, b.events)

    positions = surface_positions(log, turn, "test")
    assert positions is not None and developer not in positions and len(positions) == 5
    assert split_by_host_message(log, positions)  # its assistant nodes are kept, whatever the config
    editor = TurnNodeEditor(turn, original_nodes(log, positions), keep_assistants=True)
    editor.replace("n1", "n2", [Output("user", "Fix the parser.")])
    editor.replace("n4", None, [Output("tool", "the parser's output, 40 words")])
    plan = plan_landing(log, editor, positions, LandingContext(turn, 3, 1))
    # what must be unchanged when the shim applies it: the turn's runs on either side of the message
    assert plan.spans == [positions[:2], positions[2:]]
    validate(log, plan)
    events = stamp(log, plan.events)
    for event in events:
        assert log.append(event) == []
    assert developer in log.nodes and log.reload_problems == []
