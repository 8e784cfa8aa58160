"""The six session-compaction worker tools, as a worker calls them on a real segmented span."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fake_host import FakeHost
from session_builders import work_session
from surface_builders import checkpoint_message
from turn_builders import Shape, completed_turn_log
from turn_memory.compaction.segment_prompt import worker_tool_specs
from turn_memory.compaction.segmented import SegmentedJob, source_nodes
from turn_memory.compaction.segments import Segment
from turn_memory.compaction.selection import select_manual_range
from turn_memory.compaction.session_tools import TOOL_NAMES, SessionTools, ToolError, source_label
from turn_memory.config import CompactionConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.land import stamp
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import LandingContext, plan_landing
from turn_memory.turns.nodes import original_nodes
from turn_memory.host.tools import preview as _preview

FOLD_P1 = {"expected_revision": 0, "from": "P1", "nodes": [
    {"role": "user", "content": "Fix the Parser on nested input."},
    {"role": "assistant", "content": "Lookahead off by one in src/parser/mod.rs; fixed, 120 tests pass."}]}


def tools_for(turns: int = 4, segment_tokens: int = 4000, read_limit: int = 24000) -> SessionTools:
    """Tools of a job over `turns` completed turns (the last is retained), assigned S1."""
    host = FakeHost(RC8, work_session(RC8, turns, seed=turns).events)
    selection = select_manual_range(host.log, retain_turns=1)
    assert selection is not None
    job = SegmentedJob(host.session, host, CompactionConfig(segmentTokens=segment_tokens), selection)
    job.prepare()
    assert job.tools is not None
    job.tools.read_limit_chars = read_limit
    return job.tools


def state(tools: SessionTools):
    return [(n.id, n.text, n.segments) for n in tools.editor.nodes], tools.editor.revision, set(tools.finished)


def test_tool_specs_name_six_tools_with_descriptions_and_strict_schemas():
    specs = {s["name"]: s for s in worker_tool_specs()}
    # the six editor tools, then read_memory_image which every worker scope also carries
    assert tuple(specs) == (*TOOL_NAMES, "read_memory_image") and len(TOOL_NAMES) == 6
    assert all(s["description"] and s["parameters"]["additionalProperties"] is False for s in specs.values())
    assert specs["replace_session_memory"]["parameters"]["required"] == ["expected_revision", "from", "nodes"]
    assert "expected_revision" in specs["replace_session_memory"]["description"]


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_source_nodes_say_what_the_host_recorded_each_user_node_to_be(dialect):
    """A snapshot that opens a turn carries the turn's pending marker; it is still host context,
    and an earlier checkpoint is the history it stands for."""
    log, positions = completed_turn_log(dialect, Shape(snapshot_first=True))
    checkpoint = {"type": "user/message", "seq": len(log), "time": 1, "surfaceOp": "append",
                  "data": checkpoint_message(dialect, "cmp-1", "User: earlier. Assistant: done.")}
    log.append(checkpoint)
    nodes = source_nodes(log, Segment(1, (*positions[:3], checkpoint["seq"]), 0, (2,)))
    assert [(n.role, n.kind) for n in nodes] == [("user", "host-context"), ("user", "human"), ("assistant", ""),
                                                 ("user", "checkpoint")]
    assert [source_label(n) for n in nodes][:2] == ["S1.1 · turn 2 · user · host-context", "S1.2 · turn 2 · user · human"]


def test_a_turn_landed_as_one_user_message_is_a_compressed_turn_not_the_persons_words():
    """On 0.2 a turn whose compression landed after later turns is one user message standing for
    the whole turn: its kind says so (from the landing's source, or, for one landed before the
    source said so, from its shape), while a turn landed with its shape keeps `human`."""
    log, positions = completed_turn_log(V02, Shape())
    log.append({"type": "user/message", "seq": len(log), "time": 1, "surfaceOp": "append",
                "data": {"id": "u3", "role": "user", "source": {"kind": "user"},
                         "content": [{"type": "text", "text": "and the lexer?"}]}})
    editor = TurnNodeEditor(2, original_nodes(log, positions))
    editor.replace("n1", "n5", [Output("user", "Fix the parser."), Output("assistant", "Fixed parse().")])
    (landed,) = stamp(log, plan_landing(log, editor, positions, LandingContext(2, 3, 1)).events)
    assert log.append(landed) == []
    assert landed["data"]["source"]["form"] == "compressed-turn"
    nodes = source_nodes(log, Segment(1, (landed["seq"], len(log) - 2), 0, (2, 3)))
    assert [source_label(n) for n in nodes] == ["S1.1 · turn 2 · user · compressed-turn", "S1.2 · turn 3 · user · human"]
    assert nodes[0].text == "User: Fix the parser.\n\nAssistant: Fixed parse()."
    legacy = [dict(e) for e in log.events]
    legacy[landed["seq"]] = copy.deepcopy(landed)
    del legacy[landed["seq"]]["data"]["source"]["form"]
    old = SessionLog(V02, legacy)
    assert [n.kind for n in source_nodes(old, Segment(1, (landed["seq"],), 0, (2,)))] == ["compressed-turn"]


def test_segment_catalog_shows_turns_sizes_and_status():
    tools = tools_for(turns=4, segment_tokens=100)  # each turn is over budget: one turn per segment, S1..S3
    text = tools.call("list_session_segments", {})
    lines = text.splitlines()
    assert lines[0] == "3 segments; working checkpoint at revision 0; you are assigned S1."
    assert [line.split(" · ")[0] for line in lines[1:]] == ["- S1", "- S2", "- S3"]
    assert "turns 1-1" in lines[1] and "turns 3-3" in lines[3]
    assert " · 6 nodes · " in lines[1]  # user, 2 x (assistant + call, result), answer
    assert "assigned to you" in lines[1] and "pending" in lines[2] and "pending" in lines[3]
    assert "first: Turn 1: the" in lines[1] and "last: Fixed" in lines[1]
    tools.call("replace_session_memory", FOLD_P1)
    tools.call("finish_session_segment", {})
    tools.assigned = 2
    lines = tools.call("list_session_segments", "{}").splitlines()
    assert "revision 1" in lines[0] and "assigned S2" in lines[0]
    assert "done" in lines[1] and "assigned to you" in lines[2] and "pending" in lines[3]


def test_read_source_defaults_to_the_assigned_segment_and_selects_by_ids_or_range():
    tools = tools_for(turns=3, segment_tokens=100)
    whole = tools.call("read_session_source", {})
    heads = [line for line in whole.splitlines() if line.startswith("### ")]
    assert heads[:3] == ["### S1.1 · turn 1 · user · human", "### S1.2 · turn 1 · assistant", "### S1.3 · turn 1 · tool"]
    assert "[reasoning]" in whole and "[tool call bash" in whole and "Compiling src/" in whole
    other = tools.call("read_session_source", {"segment": "S2"})
    assert other.startswith("### S2.1 · turn 2 · user · human") and "Turn 2:" in other
    picked = tools.call("read_session_source", {"ids": ["S1.4", "S1.1"]})
    assert [line for line in picked.splitlines() if line.startswith("### ")] == ["### S1.1 · turn 1 · user · human", "### S1.4 · turn 1 · assistant"]
    ranged = tools.call("read_session_source", {"from": "S1.2", "to": "S1.3"})
    assert [line for line in ranged.splitlines() if line.startswith("### ")] == ["### S1.2 · turn 1 · assistant", "### S1.3 · turn 1 · tool"]
    assert tools.call("read_session_source", {"from": "S1.3"}).startswith("### S1.3 · turn 1 · tool")


@pytest.mark.parametrize("args, message", [
    ({"ids": ["S1.99"]}, r"unknown source ids \['S1.99'\]; this segment has S1.1..S1.6"),
    ({"ids": ["S2.1"]}, "unknown source ids"),  # another segment's node needs segment=S2
    ({"from": "S1.5", "to": "S1.2"}, "runs backwards"),
    ({"from": "S1.1", "to": "S1.42"}, "unknown range"),
    ({"segment": "S9"}, "unknown segment 'S9'; segments are S1..S2"),
    ({"segment": "parser"}, "unknown segment 'parser'"),
    ({"ids": ["S1.1"], "from": "S1.1"}, "give ids or from/to, not both"),
    ({"to": "S1.2"}, "to needs from"),
    ({"offset": -1}, "invalid arguments: offset"),
    ({"lines": 3}, "invalid arguments: lines"),
    ("{not json", "arguments are not valid JSON"),
])
def test_bad_source_reads_are_clear_errors(args, message):
    tools = tools_for(turns=3, segment_tokens=100)
    before = state(tools)
    with pytest.raises(ToolError, match=message):
        tools.call("read_session_source", args)
    assert state(tools) == before


def test_reads_page_by_offset_and_pages_reassemble_the_whole():
    tools = tools_for(turns=3, segment_tokens=100)
    full = tools.call("read_session_source", {})
    assert "[truncated" not in full
    tools.read_limit_chars = 1000
    pages, offset = [], 0
    while True:
        page = tools.call("read_session_source", {"offset": offset})
        body, sep, note = page.partition("\n\n[truncated at character ")
        pages.append(body)
        if not sep:
            break
        assert note.startswith(f"{offset + 1000} of {len(full)}; repeat the call with offset={offset + 1000}]")
        offset += 1000
    assert len(pages) == -(-len(full) // 1000) and "".join(pages) == full
    with pytest.raises(ToolError, match=f"offset 999999 is past the end \\({len(full)} characters\\)"):
        tools.call("read_session_source", {"offset": 999999})


def test_read_memory_catalog_then_full_text_and_replaced_ids_explained():
    tools = tools_for(turns=4, segment_tokens=100)
    catalog = tools.call("read_session_memory", {})
    assert catalog.splitlines()[0] == "Working checkpoint, revision 0:"
    assert "- P1 · user · from S1 · placeholder · [segment S1: not processed yet]" in catalog
    reply = tools.call("replace_session_memory", FOLD_P1)
    assert reply.startswith("Accepted at revision 1: created M1, M2.")
    assert "- M2 · assistant · from S1 · Lookahead off by one" in reply and "- P2 · user · from S2 · placeholder" in reply
    full = tools.call("read_session_memory", {"ids": ["M2", "M1", "M2"]})
    assert full.index("### M2 · assistant") < full.index("### M1 · user") and full.count("### M2") == 1
    assert "src/parser/mod.rs; fixed, 120 tests pass." in full  # not a preview: the whole text
    ranged = tools.call("read_session_memory", {"from": "M2", "to": "P3"})
    assert [line for line in ranged.splitlines() if line.startswith("### ")] == \
        ["### M2 · assistant", "### P2 · user", "### P3 · user"]
    with pytest.raises(ToolError, match=r"P1 no longer exists \(replaced by M1, M2\)"):
        tools.call("read_session_memory", {"ids": ["P1"]})
    with pytest.raises(ToolError, match="unknown memory node id 'Z1'"):
        tools.call("read_session_memory", {"from": "M1", "to": "Z1"})
    tools.read_limit_chars = 60
    page = tools.call("read_session_memory", {"offset": 60})
    assert page.startswith(tools.memory_catalog()[60:120]) and "repeat the call with offset=120" in page


def test_search_finds_nodes_with_every_word_case_insensitively():
    tools = tools_for(turns=4, segment_tokens=100)
    tools.call("replace_session_memory", FOLD_P1)
    hits = tools.call("search_session_memory", {"query": "PARSER nested"})
    assert len(hits.splitlines()) == 1 and hits.startswith("- M1 · user · …")  # M2 lacks "nested"
    both = tools.call("search_session_memory", {"query": "parser"})
    assert [line.split(" · ")[0] for line in both.splitlines()] == ["- M1", "- M2"]
    assert tools.call("search_session_memory", {"query": "lexer table"}) == \
        "No memory node contains all of: lexer, table."
    limited = tools.call("search_session_memory", {"query": "parser", "limit": 1})
    assert limited.splitlines()[-1] == "(1 more)" and len(limited.splitlines()) == 2
    for bad in ({"query": ""}, {}, {"query": "x", "limit": 0}, {"query": "x", "limit": 51}):
        with pytest.raises(ToolError, match="invalid arguments"):
            tools.call("search_session_memory", bad)


def test_search_snippet_shows_the_match_in_a_long_node():
    tools = tools_for(turns=3)
    long = "Background. " * 40 + "The flaky test is test_unicode_escape, a known issue." + " More." * 40
    tools.call("replace_session_memory", {"expected_revision": 0, "from": "P1", "nodes": [
        {"role": "user", "content": "Fix things."}, {"role": "assistant", "content": long}]})
    hit = tools.call("search_session_memory", {"query": "unicode_escape"})
    assert "test_unicode_escape" in hit and len(hit) < 300


@pytest.mark.parametrize("args, message", [
    ({**FOLD_P1, "expected_revision": 3}, "expected_revision 3 is stale"),
    ({**FOLD_P1, "from": "P2"}, "P2 stand for segments not processed yet"),
    ({**FOLD_P1, "to": "P2"}, "P2 stand for segments not processed yet"),
    ({**FOLD_P1, "from": "M1"}, "unknown memory node id 'M1'"),
    ({**FOLD_P1, "nodes": []}, "invalid arguments: nodes"),
    ({**FOLD_P1, "nodes": [{"role": "system", "content": "x"}]}, "invalid arguments: nodes.0.role"),
    ({**FOLD_P1, "nodes": [{"role": "user", "content": "x", "extra": 1}]}, "invalid arguments: nodes.0.extra"),
    ({**FOLD_P1, "nodes": [{"role": "user", "content": " "}]}, r"nodes\[0\] has empty content"),
    ({"from": "P1", "nodes": FOLD_P1["nodes"]}, "invalid arguments: expected_revision"),
    ({"expected_revision": 0, "nodes": FOLD_P1["nodes"]}, "invalid arguments: from"),
    ({**FOLD_P1, "expected_revision": "zero"}, "invalid arguments: expected_revision"),
    (json.dumps(FOLD_P1)[:-3], "arguments are not valid JSON"),
    ("", "invalid arguments"),
])
def test_bad_replacements_are_clear_errors_and_change_nothing(args, message):
    tools = tools_for(turns=4, segment_tokens=100)
    before = state(tools)
    with pytest.raises(ToolError, match=message):
        tools.call("replace_session_memory", args)
    assert state(tools) == before


def test_replace_accepts_json_text_arguments():
    tools = tools_for()
    reply = tools.call("replace_session_memory", json.dumps(FOLD_P1))
    assert reply.startswith("Accepted at revision 1") and tools.editor.segment_done(1)


def test_finishing_before_the_segment_is_covered_is_refused():
    tools = tools_for(turns=4, segment_tokens=100)
    with pytest.raises(ToolError, match="segment S1 is not covered yet: replace its placeholder P1"):
        tools.call("finish_session_segment", {})
    assert tools.finished == set()
    with pytest.raises(ToolError, match="invalid arguments"):
        tools.call("finish_session_segment", {"summary": "done"})
    tools.call("replace_session_memory", FOLD_P1)
    assert tools.call("finish_session_segment", "") == "Segment S1 accepted. Your work is done."
    assert tools.finished == {1}
    # the next worker's segment is not covered by the previous one's memory
    tools.assigned = 2
    with pytest.raises(ToolError, match="segment S2 is not covered yet"):
        tools.call("finish_session_segment", {})


def test_unknown_tool_and_unexpected_list_arguments_are_errors():
    tools = tools_for()
    with pytest.raises(ToolError, match="unknown tool read_turn_nodes"):
        tools.call("read_turn_nodes", {})
    with pytest.raises(ToolError, match="invalid arguments: arguments"):
        tools.call("list_session_segments", [1, 2])
    with pytest.raises(ToolError, match="invalid arguments: force"):
        tools.call("list_session_segments", {"force": True})


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \n\t\u2028\x1cé")), max_size=1500) | st.text(max_size=600),
       st.integers(1, 200))
def test_previews_collapse_whitespace_and_cut_at_the_limit(text, limit):
    flat = " ".join(text.split())  # what a preview is, however long the node
    assert _preview(text, limit) == (flat if len(flat) <= limit else flat[: limit - 1] + "…")
