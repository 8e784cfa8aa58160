"""DSH token-meter's fixed heuristic, reproduced so the engine prices nodes as the host does.

JavaScript string length counts UTF-16 code units, so lengths are measured that way.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

CHARS_PER_TOKEN = 4
BLOCK_OVERHEAD = 4
ROLE_OVERHEAD = 4


def js_len(text: str) -> int:
    if text.isascii():  # one code unit per character; skips an encode of the whole text
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def estimate_text(text: str) -> int:
    """A text's tokens, as the meter counts a string (no block or role overhead)."""
    return -(-js_len(text) // CHARS_PER_TOKEN)  # ceil in integers


def estimate_content(blocks: Iterable[dict[str, Any]]) -> int:
    tokens = 0
    for block in blocks:
        kind = block.get("type")
        if kind == "text" or kind == "reasoning":
            # _chars and js_len's ASCII case inlined: this runs for every message of every
            # log `inspect` reads. (n + 3) // 4 is ceil(n / 4) for n >= 0.
            text = block.get("text", "")
            tokens += ((len(text) if text.isascii() else js_len(text)) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN \
                + BLOCK_OVERHEAD
        elif kind == "tool-call":
            tokens += estimate_text(block.get("name", "")) + estimate_text(block.get("arguments", "")) + BLOCK_OVERHEAD
        elif kind == "tool-result":
            tokens += estimate_content(block.get("content", [])) + BLOCK_OVERHEAD
        else:
            tokens += BLOCK_OVERHEAD + estimate_text(json.dumps(block, separators=(",", ":"), ensure_ascii=False))
    return tokens


def estimate_header(header: dict[str, Any]) -> int:
    """A request envelope's system prompt and tool declarations, as the meter prices them
    (`estimateSystemTokens` + `estimateToolsTokens`)."""
    system = header.get("system")
    tools = header.get("tools")
    return (estimate_text(system) + ROLE_OVERHEAD if isinstance(system, str) else 0) \
        + (estimate_text(json.dumps(tools, separators=(",", ":"), ensure_ascii=False)) + BLOCK_OVERHEAD
           if tools else 0)


def estimate_message(message: dict[str, Any]) -> int:
    return estimate_content(message.get("content", [])) + ROLE_OVERHEAD
