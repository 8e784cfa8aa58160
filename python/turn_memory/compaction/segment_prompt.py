"""What a session-compaction worker is sent: its fixed system
prompt and tools, the same for every worker (a cached prefix), and its task: its segment,
the segment list, and what earlier segments established. Pure apart from reading the
prompt files."""

from __future__ import annotations

from typing import Any

from turn_memory.compaction.memory import SessionMemoryEditor
from turn_memory.compaction.segments import Segment
from turn_memory.compaction.session_tools import SessionTools, source_heading, tool_specs
from turn_memory.prompts import prompt_sections, render_prompt
from turn_memory.runtime.workers import worker_scope

_role_label = {"user": "User", "assistant": "Assistant"}


def persona() -> str:
    return render_prompt("session-worker-system", {})


def worker_tool_specs() -> list[dict[str, Any]]:
    """A segment worker's tools, with their descriptions from `prompts/session-worker-tools.md` (read fresh)."""
    return worker_scope(tool_specs(prompt_sections("session-worker-tools")))


def task(tools: SessionTools, editor: SessionMemoryEditor, segment: Segment, *, spawn: bool,
         read_limit_chars: int, handoff_chars: int) -> str:
    sources = tools.sources[segment.index]
    images = tools.segment_images(segment.index)  # catalog previews may cut a marker
    # the segment's text as it stands now, for a fork too: its context may hold the turns raw
    # while the surface holds them compressed, and one request should suffice (issue 29)
    body = "\n\n".join(f"{source_heading(n)}\n{n.text}" for n in sources)
    if len(body) > read_limit_chars:
        body = body[:read_limit_chars] + "\n[… more: read_session_source with offset]"
    earlier = [n for n in editor.nodes if n.placeholder is None]
    handoff = "\n\n".join(f"{_role_label[n.role]} ({n.id}): {n.text}" for n in earlier)
    if len(handoff) > handoff_chars:  # the recent causal tail matters most
        handoff = "…" + handoff[-handoff_chars:]
    return render_prompt(
        "session-compaction",
        {"segment_count": str(len(tools.segments)), "segment": str(segment.index),
         "revision": str(editor.revision), "segments": tools.segment_catalog(),
         "sources": body, "handoff": handoff, "images": "\n".join(images)},
        {"spawn": spawn, "handoff": bool(handoff), "images": bool(images)},
    )
