"""Lazy images: canonical markers, what a worker may do with them, and
read_memory_image for the main agent and inside worker scopes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fake_host import FakeHost
from session_builders import SessionBuilder, image_ref
from surface_builders import LogBuilder
from turn_memory.compaction.scope import CompactionScope
from turn_memory.bridge.protocol import AgentOptions, ToolResult
from turn_memory.catalog import public_tools, worker_tools
from turn_memory.compaction.manual import compact_now
from turn_memory.config import EngineConfig
from turn_memory.host.blocks import render_blocks
from turn_memory.host.dialects import RC8
from turn_memory.host.images import ImageRef, marker_ref, markers_in
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.public_tools import PublicCall, PublicTools
from turn_memory.runtime.workers import WorkerRegistry
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.tools import ToolError, WorkerTools

SHOT = "sha256:" + "a" * 64
PLOT = "sha256:" + "b" * 64
SHOT_MARKER = f'<memory-image ref="{SHOT}" type="image/png" size="640x480" bytes="51234" name="screen.png" />'
PLOT_MARKER = f'<memory-image ref="{PLOT}" type="image/png" size="640x480" bytes="51234" name="plot.png" />'


def image_block(attachment: str, name: str | None = "screen.png") -> dict[str, Any]:
    return {"type": "image", "attachment": image_ref(attachment, name)}


def image_turn_log() -> tuple[SessionLog, list[int]]:
    """One completed turn: the user sends a screenshot, a tool returns a plot, the assistant answers."""
    b = LogBuilder(RC8)
    seqs = b.turn("why does the chart look wrong? " + "details " * 30)
    b.events[seqs["user"]]["data"]["content"].append(image_block(SHOT))
    result = b.events[seqs["tool_result"]]["data"]["message"]["content"][0]
    result["content"].append(image_block(PLOT, "plot.png"))
    log = SessionLog(RC8, b.events)
    return log, [seqs[k] for k in ("user", "call_assistant", "tool_result", "answer")]


def turn_tools() -> WorkerTools:
    log, positions = image_turn_log()
    return WorkerTools(TurnNodeEditor(1, original_nodes(log, positions)))


def fold(tools: WorkerTools, user: str, assistant: str) -> None:
    tools.call("replace_turn_nodes", {"from": "n1", "to": "n4", "nodes": [
        {"role": "user", "content": user}, {"role": "assistant", "content": assistant}]})


# -- markers -----------------------------------------------------------------------------

def test_a_marker_carries_id_type_size_bytes_and_an_escaped_name():
    ref = ImageRef.from_block(image_block(SHOT, 'a "quoted" <b>&c.png'))
    assert ref is not None
    assert ref.marker == (f'<memory-image ref="{SHOT}" type="image/png" size="640x480" bytes="51234" '
                          'name="a &quot;quoted&quot; &lt;b&gt;&amp;c.png" />')
    # the escaped marker is still found whole in text, and its ref reads back
    assert markers_in(f"see {ref.marker} here") == [ref.marker] and marker_ref(ref.marker) == SHOT
    assert ImageRef.from_block(image_block(SHOT, None)).marker.endswith('bytes="51234" />')  # type: ignore[union-attr]


def test_image_blocks_render_as_markers_wherever_they_nest():
    text, images, _ = render_blocks([
        {"type": "text", "text": "look"}, image_block(SHOT),
        {"type": "tool-result", "toolCallId": "c1", "content": [image_block(PLOT, "plot.png")]},
    ])
    assert images == [SHOT_MARKER, PLOT_MARKER]
    assert SHOT_MARKER in text and PLOT_MARKER in text and "unknown" not in text
    # a marker already in text (a checkpoint, a landed turn) must survive the next rewrite too
    assert render_blocks([{"type": "text", "text": f"earlier: {SHOT_MARKER}"}])[1] == [SHOT_MARKER]


# -- turn workers ---------------------------------------------------------------------------

def test_a_turn_worker_that_drops_a_marker_cannot_finish_until_it_puts_it_back():
    tools = turn_tools()
    fold(tools, f"Why does the chart look wrong? {SHOT_MARKER}", "The plot was fine; fixed the axis.")
    with pytest.raises(ToolError) as refused:
        tools.call("finish_turn_compression", {})
    assert "image markers were dropped" in str(refused.value) and PLOT_MARKER in str(refused.value)
    assert SHOT_MARKER not in str(refused.value)
    # moved into the assistant node: accepted
    tools.call("replace_turn_nodes", {"from": "r2", "nodes": [
        {"role": "assistant", "content": f"Plotted it {PLOT_MARKER}; the axis was inverted, fixed."}]})
    assert "Accepted" in tools.call("finish_turn_compression", {})


def test_an_altered_or_invented_marker_is_refused():
    tools = turn_tools()
    altered = PLOT_MARKER.replace("plot.png", "chart.png")
    fold(tools, f"Why is the chart wrong? {SHOT_MARKER}", f"Plot {altered} showed an inverted axis; fixed.")
    with pytest.raises(ToolError) as refused:
        tools.call("finish_turn_compression", {})
    assert PLOT_MARKER in str(refused.value)  # the original is missing
    assert "not in the source" in str(refused.value) and altered in str(refused.value)


def test_unchanged_nodes_keep_their_images_and_merging_markers_is_fine():
    tools = turn_tools()
    # only the tool traffic is folded; the user node with the screenshot stays as it is
    tools.call("replace_turn_nodes", {"from": "n2", "to": "n4", "nodes": [
        {"role": "assistant", "content": f"Plotted the data {PLOT_MARKER}: inverted axis, fixed."}]})
    assert "Accepted" in tools.call("finish_turn_compression", {})
    tools = turn_tools()
    fold(tools, "Why does the chart look wrong?", f"Screens {SHOT_MARKER} {PLOT_MARKER}: axis inverted, fixed.")
    assert "Accepted" in tools.call("finish_turn_compression", {})


# -- read_memory_image ------------------------------------------------------------------------

def host_with_images() -> FakeHost:
    log, _ = image_turn_log()
    return FakeHost(RC8, log.events)


def call_public(host: FakeHost, args: Any) -> ToolResult:
    tools = PublicTools(public_tools())
    call = PublicCall(session=host.session, args=args, turn=2, call_id="call-1", agent_options=AgentOptions(),
                      config=EngineConfig(), port=host)
    return asyncio.run(tools.call("read_memory_image", call))


@pytest.mark.parametrize("ref", [SHOT, f"  {SHOT} ", SHOT_MARKER])
def test_read_memory_image_resolves_a_bare_id_or_a_whole_marker(ref):
    answer = call_public(host_with_images(), {"ref": ref})
    assert not answer.is_error and answer.image == image_ref(SHOT) and SHOT_MARKER in answer.text


def test_read_memory_image_finds_images_inside_tool_results_and_json_string_args():
    answer = call_public(host_with_images(), json.dumps({"ref": PLOT}))
    assert not answer.is_error and answer.image == image_ref(PLOT, "plot.png")


@pytest.mark.parametrize("args, message", [
    ({"ref": "sha256:" + "f" * 64}, "no image with ref"),  # forged, or another session's
    ({"ref": SHOT.upper()}, "no image with ref"),
    ({"ref": "<memory-image type=\"image/png\" />"}, "has no ref"),
    ({"ref": ""}, "ref is empty"),
    ({}, "invalid arguments"),
    ({"ref": SHOT, "path": "/etc/passwd"}, "invalid arguments"),
])
def test_read_memory_image_refuses_anything_not_in_this_sessions_log(args, message):
    answer = call_public(host_with_images(), args)
    assert answer.is_error and message in answer.text and answer.image is None


def test_an_image_shadowed_by_a_landing_is_still_readable():
    host = host_with_images()
    # the whole history is folded into a checkpoint that keeps only the marker
    plan_seq = len(host.log)
    nodes = list(host.log.nodes)
    host.host_append("user/message", {"id": "cp", "role": "user", "source": {"kind": "user"},
                                      "content": [{"type": "text", "text": f"checkpoint {SHOT_MARKER}"}]},
                     surfaceOp=RC8.replace_op(nodes[0], nodes[-1]), sourceEventSeqs=nodes)
    host._forward()
    assert host.log.nodes == [plan_seq]
    answer = call_public(host, {"ref": SHOT})
    assert not answer.is_error and answer.image == image_ref(SHOT)


def test_public_specs_offer_read_memory_image_with_its_prompt_description():
    (spec,) = [s for s in PublicTools(public_tools()).specs(EngineConfig()) if s.name == "read_memory_image"]
    assert spec.parameters["required"] == ["ref"] and "marker" in spec.description


class _Job:
    def __init__(self, session: Any):
        self.session = session
        self.calls: list[str] = []

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        self.calls.append(name)
        return ToolResult("editor tool")


def test_workers_call_read_memory_image_for_the_session_they_edit():
    host = host_with_images()
    registry = WorkerRegistry(worker_tools())
    job = _Job(host.session)
    registry.add("job-1", job)
    answer = registry.call("job-1", "w1", "read_memory_image", {"ref": PLOT_MARKER})
    assert not answer.is_error and answer.image == image_ref(PLOT, "plot.png") and job.calls == []
    forged = registry.call("job-1", "w1", "read_memory_image", {"ref": "sha256:" + "0" * 64})
    assert forged.is_error and not forged.conclude
    assert registry.call("job-1", "w1", "list_turn_nodes", {}).text == "editor tool"
    registry.remove("job-1")
    assert registry.call("job-1", "w1", "read_memory_image", {"ref": SHOT}).conclude  # the job is over


def test_a_one_shot_summary_that_drops_markers_gets_them_back_from_the_host():
    b = SessionBuilder(RC8, 5)
    b.preamble()
    b.work_turn(image=SHOT)
    b.work_turn()
    b.work_turn()
    host = FakeHost(RC8, b.events)  # its summarizer answers "SUMMARY": no marker
    config = EngineConfig.model_validate({"compaction": {"method": "summary"}})
    asyncio.run(compact_now(CompactionScope(host.session, host, config, AgentOptions(provider="p", model="m"),
                                            WorkerRegistry()), "cmd-1"))
    checkpoint = host.log.message_of(host.log.nodes[0])["content"][0]["text"]
    assert "SUMMARY" in checkpoint and SHOT_MARKER in checkpoint
