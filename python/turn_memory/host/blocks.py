"""Content blocks as text a worker reads: tool calls, tool results and images rendered as
canonical markers. Pure; turn workers, session workers and
read_session_history all render blocks this way."""

from __future__ import annotations

import json
from typing import Any, Sequence

from turn_memory.host.images import ImageRef, markers_in


def image_marker(block: dict[str, Any]) -> str:
    """The canonical lazy marker of an image block (docs/decisions.md#images-fold-into-markers-that-can-be-reopened)."""
    ref = ImageRef.from_block(block)
    # a block without a usable ref cannot be read back: say so instead of inventing an id
    return ref.marker if ref is not None else "[image block without an attachment reference]"


def render_blocks(blocks: Sequence[dict[str, Any]]) -> tuple[str, list[str], bool]:
    """Text of content blocks for a worker; returns (text, image markers, has reasoning).

    The markers are those of image blocks and those already in the text (a checkpoint or a
    landed turn carries earlier images as markers): every one must survive a rewrite.
    """
    parts: list[str] = []
    images: list[str] = []
    reasoning = False
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(block.get("text", ""))
            images += markers_in(block.get("text", ""))
        elif kind == "reasoning":
            reasoning = True
            parts.append(f"[reasoning]\n{block.get('text', '')}\n[/reasoning]")
        elif kind == "tool-call":
            parts.append(f"[tool call {block.get('name')} id={block.get('id')}] {block.get('arguments', '')}")
        elif kind == "tool-result":
            inner, inner_images, _ = render_blocks(block.get("content") or [])
            images += inner_images
            error = " error" if block.get("isError") else ""
            parts.append(f"[tool result id={block.get('toolCallId')}{error}]\n{inner}")
        elif kind == "image":
            marker = image_marker(block)
            if ImageRef.from_block(block) is not None:
                images.append(marker)
            parts.append(marker)
        else:
            parts.append(f"[{kind} block] {json.dumps(block, ensure_ascii=False)[:400]}")
    return "\n".join(p for p in parts if p), images, reasoning
