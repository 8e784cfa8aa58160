"""What a session-compaction worker is sent: its fixed system
prompt and tools, the same for every worker (a cached prefix), and its task: its segment,
the segment list, and what earlier segments established. Pure apart from reading the
prompt files."""

from __future__ import annotations

from typing import Any

from turn_memory.compaction.memory import SessionMemoryEditor
from turn_memory.compaction.segments import Segment
from turn_memory.compaction.session_tools import SessionTools, source_heading, tool_specs
from turn_memory.host.tokens import estimate_text
from turn_memory.prompts import prompt_sections, render_prompt
from turn_memory.runtime.workers import worker_scope

_role_label = {"user": "User", "assistant": "Assistant"}

#: a segment's memory aims at this share of its sources' tokens. With no target a capable model
#: (relayed, checkout-timeouts on 0.2.1) kept 26% of already-compressed sources, 1.94x stock's
#: summary, where both answered all 14 probes: the checkpoint is an index and the state reached,
#: and every turn stays readable in full (`read_session_history`)
TARGET_SHARE = 0.15
#: the least a segment is asked for (a line per turn and the state of the work)
TARGET_MIN_TOKENS = 200


def target_tokens(source_tokens: int, checkpoint_tokens: int = 0) -> int:
    """The length a segment's memory nodes aim at (the prompt's target; the editor enforces only
    "shorter than the sources"). An earlier checkpoint among the sources counts whole: it is
    already an index, and a background fold that takes it with each new turn would otherwise
    shrink it to a share of itself at every fold, losing a little more of the oldest history
    each time."""
    carried = min(checkpoint_tokens, source_tokens)
    return max(TARGET_MIN_TOKENS, round((carried + (source_tokens - carried) * TARGET_SHARE) / 50) * 50)


def persona() -> str:
    return render_prompt("session-worker-system", {})


def worker_tool_specs() -> list[dict[str, Any]]:
    """A segment worker's tools, with their descriptions from `prompts/session-worker-tools.md` (read fresh)."""
    return worker_scope(tool_specs(prompt_sections("session-worker-tools")))


def task(tools: SessionTools, editor: SessionMemoryEditor, segment: Segment, *, spawn: bool,
         text_chars: int, handoff_chars: int) -> str:
    """A segment worker's task; it carries up to `text_chars` of the segment's text."""
    sources = tools.sources[segment.index]
    images = tools.segment_images(segment.index)  # catalog previews may cut a marker
    # the segment's text as it stands now, for a fork too: its context may hold the turns raw
    # while the surface holds them compressed, and one request should suffice (issue 29)
    body = "\n\n".join(f"{source_heading(n)}\n{n.text}" for n in sources)
    if len(body) > text_chars:
        body = body[:text_chars] + f"\n[… cut at character {text_chars} of {len(body)}: read the rest with " \
                                   f"read_session_source, offset={text_chars}]"
    checkpoint_tokens = sum(estimate_text(n.text) for n in sources if n.kind == "checkpoint")
    earlier = [n for n in editor.nodes if n.placeholder is None]
    handoff = "\n\n".join(f"{_role_label[n.role]} ({n.id}): {n.text}" for n in earlier)
    if len(handoff) > handoff_chars:  # the recent causal tail matters most
        handoff = "…" + handoff[-handoff_chars:]
    return render_prompt(
        "session-compaction",
        {"segment_count": str(len(tools.segments)), "segment": str(segment.index),
         "revision": str(editor.revision), "segments": tools.segment_catalog(),
         "sources": body, "handoff": handoff, "images": "\n".join(images),
         "source_tokens": f"{segment.tokens:,}", "target_tokens": f"{target_tokens(segment.tokens, checkpoint_tokens):,}",
         "checkpoint_tokens": f"{checkpoint_tokens:,}"},
        {"spawn": spawn, "handoff": bool(handoff), "images": bool(images), "checkpoint": checkpoint_tokens > 0},
    )
