"""One turn's surface nodes at a point of the log, as short previews. Pure.

"Before" is the turn as the agent wrote it (the log up to turn-memory's first marker for
it); "after" is what the model saw of it once compressed (up to the checkpoint that later
folded it, or the end of the log). Ownership of nodes is the host model's (`node_origins`),
the same fold `inspect` streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from turn_memory.devtools.fake_model import is_runtime_context
from turn_memory.host.dialect import Dialect
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import estimate_message
from turn_memory.host.turn_index import node_origins


@dataclass(frozen=True)
class NodeView:
    role: str
    preview: str
    tokens: int


def _preview(message: dict[str, Any], width: int) -> str:
    """Its text, clipped, then a tag per tool call (so a long text never hides the call)."""
    texts: list[str] = []
    tags: list[str] = []
    for block in message.get("content") or []:
        kind = block.get("type")
        if kind in ("text", "reasoning"):
            texts.append(str(block.get("text", "")))
        elif kind == "tool-call":
            tags.append(f"[{block.get('name')} call, {len(str(block.get('arguments', ''))):,} chars]")
        elif kind == "tool-result":
            texts += [str(b.get("text", "")) for b in block.get("content") or [] if b.get("type") == "text"]
    tag = " ".join(tags)
    room = width - len(tag) - (1 if tag and texts else 0)
    return " ".join(p for p in (clip(" ".join(texts), max(room, 12)) if texts else "", tag) if p)


def _role(message: dict[str, Any]) -> str:
    blocks = message.get("content") or []
    if any(b.get("type") == "tool-result" for b in blocks):
        return "tool"  # rc.8 carries a tool result in a user message
    text = " ".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    if message.get("role") == "user" and is_runtime_context(text):
        return "context"  # DSH's runtime-context snapshot, not the user's words
    return str(message.get("role"))


def clip(text: str, width: int) -> str:
    """At most `width` characters, cut at a word boundary."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1].rsplit(" ", 1)[0]
    return cut.rstrip(",.;:") + "…"


def turn_nodes(events: Sequence[dict[str, Any]], dialect: Dialect, turn: int, upto: int,
               width: int = 60) -> list[NodeView]:
    """The turn's surface nodes in the log's first `upto` events."""
    prefix = list(events[:upto])
    log = SessionLog(dialect, prefix)
    origins = node_origins(prefix, dialect)
    views = []
    for seq in log.nodes:
        if origins.get(seq) != ("turn", turn):
            continue
        message = log.message_of(seq)
        if message is None or message.get("role") not in ("user", "assistant", "tool"):
            continue
        views.append(NodeView(_role(message), _preview(message, width), estimate_message(message)))
    return views
