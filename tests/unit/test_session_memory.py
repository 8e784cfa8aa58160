"""SessionMemoryEditor: the working checkpoint workers edit, one segment at a time."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from turn_memory.compaction.memory import MemoryEditError, SessionMemoryEditor

U = ("user", "The user asked to fix the parser.")
A = ("assistant", "Fixed parse() on nested input; 120 tests pass.")


def snapshot(editor: SessionMemoryEditor):
    return [(n.id, n.role, n.text, n.segments, n.placeholder) for n in editor.nodes], editor.revision


def ids(editor: SessionMemoryEditor) -> list[str]:
    return [n.id for n in editor.nodes]


def done_s1(segments: int = 3) -> SessionMemoryEditor:
    """Segment 1 folded into M1 (user), M2 (assistant)."""
    editor = SessionMemoryEditor(segments)
    assert editor.replace(1, 0, "P1", None, [U, A]) == ["M1", "M2"]
    return editor


def test_starts_as_one_placeholder_per_segment():
    editor = SessionMemoryEditor(3)
    assert ids(editor) == ["P1", "P2", "P3"] and editor.revision == 0
    assert [n.placeholder for n in editor.nodes] == [1, 2, 3]
    assert [n.segments for n in editor.nodes] == [frozenset({1}), frozenset({2}), frozenset({3})]
    assert "S2" in editor.nodes[1].text and "not processed" in editor.nodes[1].text
    assert not editor.complete and not any(editor.segment_done(i) for i in (1, 2, 3))


def test_an_accepted_replacement_bumps_the_revision_and_records_provenance():
    editor = done_s1()
    assert editor.revision == 1 and ids(editor) == ["M1", "M2", "P2", "P3"]
    assert [(n.role, n.text) for n in editor.nodes[:2]] == [U, A]
    assert all(n.segments == frozenset({1}) and n.placeholder is None for n in editor.nodes[:2])
    assert editor.segment_done(1) and not editor.segment_done(2)
    # segment 2 merges the earlier memory with its own: the result derives from both
    new = editor.replace(2, 1, "M2", "P2", [("assistant", "Fixed the parser, then the lexer.")])
    assert new == ["M3"] and editor.revision == 2
    assert ids(editor) == ["M1", "M3", "P3"] and editor.nodes[1].segments == frozenset({1, 2})
    # refining own memory later: ids keep counting, provenance carries over
    assert editor.replace(2, 2, "M3", None, [A, A]) == ["M4", "M5"]
    assert editor.nodes[1].segments == frozenset({1, 2}) and editor.revision == 3
    editor.replace(3, 3, "P3", None, [U])
    assert editor.complete


def test_a_stale_revision_is_refused_with_the_current_one():
    editor = done_s1()
    before = snapshot(editor)
    with pytest.raises(MemoryEditError, match=r"expected_revision 0 is stale.*revision 1"):
        editor.replace(2, 0, "P2", None, [U])
    with pytest.raises(MemoryEditError, match="stale"):
        editor.replace(2, 2, "P2", None, [U])  # from the future is just as wrong
    assert snapshot(editor) == before


def test_unknown_and_replaced_ids_are_refused_with_a_useful_message():
    editor = done_s1()
    with pytest.raises(MemoryEditError, match="unknown memory node id 'M9'"):
        editor.replace(2, 1, "M9", None, [U])
    with pytest.raises(MemoryEditError, match=r"P1 no longer exists \(replaced by M1, M2\).*read_session_memory"):
        editor.replace(2, 1, "P1", "P2", [U])
    with pytest.raises(MemoryEditError, match="P1 no longer exists"):
        editor.index_of("P1")
    with pytest.raises(MemoryEditError, match="runs backwards"):
        editor.replace(2, 1, "P2", "M1", [U])


def test_placeholders_of_unprocessed_segments_cannot_be_touched():
    editor = SessionMemoryEditor(3)
    before = snapshot(editor)
    with pytest.raises(MemoryEditError, match="P2 stand for segments not processed yet"):
        editor.replace(1, 0, "P1", "P2", [U])
    with pytest.raises(MemoryEditError, match="P2, P3 stand for"):
        editor.replace(1, 0, "P1", "P3", [U])
    # nor an earlier segment's placeholder from a later segment's worker
    with pytest.raises(MemoryEditError, match="P1 stand for"):
        editor.replace(2, 0, "P1", "P2", [U])
    assert snapshot(editor) == before


def test_while_the_placeholder_exists_the_range_must_include_it():
    editor = done_s1()
    before = snapshot(editor)
    with pytest.raises(MemoryEditError, match="your segment S2 is still its placeholder P2: the range must include it"):
        editor.replace(2, 1, "M1", "M2", [U])
    assert snapshot(editor) == before


def test_afterwards_the_range_must_include_memory_from_the_assigned_segment():
    editor = done_s1()
    editor.replace(2, 1, "P2", None, [A])  # M3, from S2
    before = snapshot(editor)
    with pytest.raises(MemoryEditError, match="must include memory derived from your segment S2"):
        editor.replace(2, 2, "M1", "M2", [U])
    assert snapshot(editor) == before
    # including its own node makes the same edit legal, and the merge derives from both
    editor.replace(2, 2, "M2", "M3", [A])
    assert editor.nodes[-2].segments == frozenset({1, 2})


@pytest.mark.parametrize("outputs, message", [
    ([], "at least one node"),
    ([("user", "   \n")], r"nodes\[0\] has empty content"),
    ([U, ("assistant", "")], r"nodes\[1\] has empty content"),
    ([("system", "be nice")], r"nodes\[0\]\.role must be 'user' or 'assistant'"),
    ([U, ("tool", "output")], r"nodes\[1\]\.role"),
])
def test_bad_nodes_are_refused_and_change_nothing(outputs, message):
    editor = SessionMemoryEditor(2)
    before = snapshot(editor)
    with pytest.raises(MemoryEditError, match=message):
        editor.replace(1, 0, "P1", None, outputs)
    assert snapshot(editor) == before


def test_neighbourhood_is_the_nodes_around_the_given_ids():
    editor = done_s1(4)
    assert [n.id for n in editor.neighbourhood(["M2"])] == ["M1", "M2", "P2"]
    assert [n.id for n in editor.neighbourhood(["M1"], radius=0)] == ["M1"]
    assert [n.id for n in editor.neighbourhood(["P4"], radius=2)] == ["P2", "P3", "P4"]


# -- random operation sequences ---------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.data())
def test_random_edit_sequences_keep_the_invariants(segment_count, data):
    editor = SessionMemoryEditor(segment_count)
    accepted = 0
    processed: set[int] = set()
    dead: list[str] = []
    for _ in range(data.draw(st.integers(0, 20), label="steps")):
        segment = data.draw(st.integers(1, segment_count), label="segment")
        live = ids(editor)
        # mostly plausible calls (around the segment's own memory), sometimes anything at all
        own = [n.id for n in editor.nodes if segment in n.segments]
        start = data.draw(st.sampled_from(own) if own and data.draw(st.booleans()) else st.sampled_from(live + dead),
                          label="from")
        end = data.draw(st.one_of(st.none(), st.sampled_from(live + dead)), label="to")
        revision = editor.revision + data.draw(st.sampled_from([0, 0, 0, 0, 0, -1, 1]), label="revision offset")
        role = st.sampled_from(["user", "assistant"] * 4 + ["tool"])
        text = st.sampled_from(["x", "note", "decided to use a lexer table", "the build failed: E0425"] * 2 + ["  "])
        outputs = data.draw(st.lists(st.tuples(role, text), min_size=data.draw(st.sampled_from([0, 1, 1, 1, 1])),
                                     max_size=3), label="nodes")
        before = snapshot(editor)
        try:
            new = editor.replace(segment, revision, start, end, outputs)
        except MemoryEditError:
            assert snapshot(editor) == before  # every refusal leaves nodes and revision unchanged
        else:
            accepted += 1
            processed.add(segment)
            dead += [i for i in live if i not in ids(editor)]
            assert new and all(editor.nodes[editor.index_of(i)].segments >= {segment} for i in new)
        # invariants
        assert editor.revision == accepted
        assert len(set(ids(editor))) == len(editor.nodes)
        assert all(n.segments for n in editor.nodes)  # every node knows where it comes from
        holders = [n.placeholder for n in editor.nodes if n.placeholder is not None]
        assert holders == sorted(set(range(1, segment_count + 1)) - processed)  # only unprocessed, in order
        assert all(n.segments == frozenset({n.placeholder}) for n in editor.nodes if n.placeholder is not None)
        assert all(n.text.strip() and n.role in ("user", "assistant") for n in editor.nodes)
        assert editor.complete == (len(processed) == segment_count)
    event(f"accepted {min(accepted, 3)}+")
