"""TurnNodeEditor and the worker tools: what the worker can and cannot do to a turn."""

from __future__ import annotations

import pytest

from turn_builders import Shape, completed_turn_log
from turn_memory.host.dialects import RC8, V02
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.prompt import worker_tool_specs
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.tools import ToolError, WorkerTools


def tools_for(shape: Shape | None = None) -> WorkerTools:
    log, positions = completed_turn_log(RC8, shape or Shape())
    return WorkerTools(TurnNodeEditor(2, original_nodes(log, positions)))


def state(tools: WorkerTools) -> list[tuple[str, str, tuple[int, int]]]:
    return [(n.id, n.text, n.slice) for n in tools.editor.nodes]


def test_catalog_lists_every_node_with_kind_and_capacity():
    tools = tools_for()
    text = tools.call("list_turn_nodes", {})
    # user, snapshot, assistant+call, tool result, final assistant
    assert [line.split(" · ")[0] for line in text.splitlines()[1:]] == ["- n1", "- n2", "- n3", "- n4", "- n5"]
    assert "host-context" in text and "raw reasoning (must be rewritten)" in text and "capacity 1" in text


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
@pytest.mark.parametrize("first", [False, True], ids=["snapshot-after", "snapshot-first"])
def test_the_catalog_kinds_follow_the_sources_not_the_position(dialect, first):
    """The pending marker copies the turn's first user node; when the host's snapshot opens
    the turn, the copy still lists as host context and the person's words as human."""
    log, positions = completed_turn_log(dialect, Shape(snapshot_first=first))
    text = WorkerTools(TurnNodeEditor(2, original_nodes(log, positions))).call("list_turn_nodes", {})
    lines = [line.split(" · ") for line in text.splitlines()[1:]]
    users = [(parts[2], parts[-1].split()[0]) for parts in lines if parts[1] == "user"]
    expected = [("host-context", "Current"), ("human", "please")]
    assert users == (expected if first else expected[::-1])


def test_joint_replacement_gives_new_ids_and_partitions_positions():
    tools = tools_for()
    reply = tools.call("replace_turn_nodes", {"from": "n1", "to": "n5", "nodes": [
        {"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "Fixed it: X."}]})
    assert "n1..n5 -> r1, r2" in reply
    nodes = tools.editor.nodes
    assert [n.id for n in nodes] == ["r1", "r2"]
    assert nodes[0].slice == (0, 2) and nodes[1].slice == (3, 4)  # ordered, gap-free partition
    assert nodes[0].sources == nodes[1].sources  # both derive from the whole range
    # a replaced node can be refined again, and its old ids are gone
    tools.call("replace_turn_nodes", {"from": "r2", "nodes": [
        {"role": "assistant", "content": "Tried A, failed."}, {"role": "assistant", "content": "Then B worked."}]})
    assert [n.id for n in tools.editor.nodes] == ["r1", "r3", "r4"]
    with pytest.raises(ToolError, match="n3 no longer exists: it was replaced by r1, r2"):
        tools.call("read_turn_nodes", {"ids": ["n3"]})


@pytest.mark.parametrize("args, message", [
    ({"from": "n9", "nodes": [{"role": "user", "content": "x"}]}, "unknown node id"),
    ({"from": "n4", "to": "n2", "nodes": [{"role": "user", "content": "x"}]}, "runs backwards"),
    ({"from": "n3", "to": "n4", "nodes": [{"role": "assistant", "content": "a"}] * 3}, "capacity 2"),
    ({"from": "n1", "nodes": [{"role": "assistant", "content": "x"}]}, "must start with a user node"),
    ({"from": "n5", "nodes": [{"role": "user", "content": "x"}]}, "must end with an assistant node"),
    ({"from": "n3", "nodes": [{"role": "assistant", "content": "x"}]}, "tool result whose call is gone"),
    ({"from": "n2", "to": "n3", "nodes": [{"role": "tool", "content": "x"}]}, "only valid as a one-to-one"),
    ({"from": "n2", "nodes": [{"role": "assistant", "content": "   "}]}, "empty content"),
    ({"from": "n2", "nodes": [{"role": "system", "content": "x"}]}, "invalid arguments"),
    ({"from": "n2", "nodes": []}, "invalid arguments"),
    ({"start": "n2", "nodes": [{"role": "user", "content": "x"}]}, "invalid arguments"),
    ("{not json", "not valid JSON"),
])
def test_invalid_replace_is_a_clear_error_and_changes_nothing(args, message):
    tools = tools_for()
    before = state(tools)
    with pytest.raises(ToolError, match=message):
        tools.call("replace_turn_nodes", args)
    assert state(tools) == before and tools.editor.revision == 0


def test_tool_result_content_rewrite_is_one_to_one():
    tools = tools_for()
    tools.call("replace_turn_nodes", {"from": "n4", "nodes": [{"role": "tool", "content": "ok (40 lines elided)"}]})
    rewritten = tools.editor.nodes[3]
    assert rewritten.role == "tool" and rewritten.result_for is not None and rewritten.changed


def test_reads_are_bounded_and_continue_by_offset():
    tools = tools_for()
    tools.read_limit_chars = 200
    page = tools.call("read_turn_nodes", {"from": "n1", "to": "n5"})
    assert "[truncated at character 200" in page
    nxt = tools.call("read_turn_nodes", {"from": "n1", "to": "n5", "offset": 200})
    assert nxt and nxt != page
    with pytest.raises(ToolError, match="either ids"):
        tools.call("read_turn_nodes", {})
    with pytest.raises(ToolError, match="1 to 64"):
        tools.call("read_turn_nodes", {"ids": [f"n{i}" for i in range(65)]})
    with pytest.raises(ToolError, match="past the end"):
        tools.call("read_turn_nodes", {"ids": ["n1"], "offset": 10**6})


def test_unchanged_reasoning_blocks_finish():
    tools = tools_for()
    with pytest.raises(ToolError, match="raw reasoning"):
        tools.call("finish_turn_compression", {})
    tools.call("replace_turn_nodes", {"from": "n3", "to": "n4", "nodes": [
        {"role": "assistant", "content": "Ran the tests: parser fails on empty input."}]})
    assert "Accepted" in tools.call("finish_turn_compression", {})


def test_turn_without_reasoning_may_finish_unchanged():
    tools = tools_for(Shape(steps=[(1, False, False), (0, False, False)]))
    assert "Accepted" in tools.call("finish_turn_compression", {})
    assert not tools.editor.changed


def test_tool_specs_have_schemas_and_descriptions_from_the_prompt_file():
    specs = {s["name"]: s for s in worker_tool_specs()}
    # the four editor tools, plus read_memory_image which every worker scope also carries
    assert set(specs) == {"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression",
                          "read_memory_image"}
    assert specs["replace_turn_nodes"]["parameters"]["required"] == ["from", "nodes"]
    assert all(s["description"] for s in specs.values())


def test_a_rewrite_longer_than_what_it_replaces_cannot_finish():
    tools = tools_for(Shape(steps=[(0, False, False)]))
    tools.call("replace_turn_nodes", {"from": "n3", "nodes": [{"role": "assistant", "content": "padding " * 400}]})
    with pytest.raises(ToolError, match="longer than what they replace"):
        tools.call("finish_turn_compression", {})


# -- assistant nodes kept (a 0.2 host: `turns.assistantNodes` auto) -------------------------------


def kept_tools() -> WorkerTools:
    log, positions = completed_turn_log(V02, Shape())
    return WorkerTools(TurnNodeEditor(2, original_nodes(log, positions), keep_assistants=True))


def test_with_assistants_kept_the_catalog_marks_them_fixed_and_asks_no_reasoning_rewrite():
    text = kept_tools().call("list_turn_nodes", {})
    states = [(parts[1], parts[3]) for parts in (line.split(" · ") for line in text.splitlines()[1:])]
    assert states == [("user", "unchanged"), ("user", "unchanged"), ("assistant", "fixed"), ("tool", "unchanged"),
                      ("assistant", "fixed")]
    assert "raw reasoning" in text and "must be rewritten" not in text


@pytest.mark.parametrize("args, message", [
    ({"from": "n1", "to": "n5", "nodes": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]},
     "n3, n5 are assistant nodes: on this host assistant nodes stay as they are"),
    ({"from": "n5", "nodes": [{"role": "assistant", "content": "Done."}]}, "n5 is an assistant node"),
    ({"from": "n1", "to": "n2", "nodes": [{"role": "assistant", "content": "a"}]},
     r"nodes\[0\] has role 'assistant': user nodes can only become user nodes here"),
    ({"from": "n4", "nodes": [{"role": "user", "content": "the listing"}]},
     "a tool node is rewritten on its own here"),
])
def test_with_assistants_kept_a_replacement_touching_them_is_refused_and_changes_nothing(args, message):
    tools = kept_tools()
    before = state(tools)
    with pytest.raises(ToolError, match=message):
        tools.call("replace_turn_nodes", args)
    assert state(tools) == before


def test_with_assistants_kept_user_nodes_merge_and_tool_results_shrink_and_the_turn_is_final():
    tools = kept_tools()
    tools.call("replace_turn_nodes", {"from": "n1", "to": "n2", "nodes": [{"role": "user", "content": "Fix the parser."}]})
    tools.call("replace_turn_nodes", {"from": "n4", "nodes": [{"role": "tool", "content": "2 files: a.txt b.txt"}]})
    editor = tools.editor
    assert [(n.role, n.changed, n.slice) for n in editor.nodes] == [
        ("user", True, (0, 1)), ("assistant", False, (2, 2)), ("tool", True, (3, 3)), ("assistant", False, (4, 4))]
    assert editor.final_problems() == []  # n3's reasoning stays: it cannot be rewritten here


def test_a_saved_rewrite_of_assistants_does_not_restore_where_they_are_kept():
    log, positions = completed_turn_log(V02, Shape())
    free = TurnNodeEditor(2, original_nodes(log, positions))
    free.replace("n1", "n5", [Output("user", "Fix it."), Output("assistant", "Fixed.")])
    kept = TurnNodeEditor.restore(2, original_nodes(log, positions), free.dump(), keep_assistants=True)
    assert kept.final_problems() == ["r1, r2 replace assistant nodes, which stay as they are on this host"]


def test_with_assistants_kept_a_turn_that_ends_in_a_tool_result_keeps_it_last():
    """A hand-off turn ends with its call's result: where the assistant nodes stay, nothing can
    end it with an assistant node, so its last result is rewritten in place and stays last."""
    log, positions = completed_turn_log(V02, Shape(steps=[(1, False, False)]))
    originals = original_nodes(log, positions)
    assert [o.role for o in originals][-2:] == ["assistant", "tool"]
    kept = TurnNodeEditor(2, originals, keep_assistants=True)
    kept.replace("n4", None, [Output("tool", "handed off")])
    assert kept.final_problems() == []
    folded = TurnNodeEditor(2, originals)  # where assistants may be rewritten, the rule stands
    assert folded.final_problems() == ["the turn must end with an assistant node (n4 is tool)"]
