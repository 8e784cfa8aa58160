"""Which reasoning blocks deserve a hint, and how a block is identified. Pure.

A block is known twice: live, from the stream's `block-end` chunk (rc8 persists it as an
`assistant/chunk` event), and durably, inside the step's `assistant/message`. Both give the
same key — (turn, step, digest of the text) — so a hint started live is never requested
again when the turn's durable messages are scanned at turn end or after a restart.
"""

from __future__ import annotations

from typing import Any, Sequence

from turn_memory.host.reasoning import HintKey, ReasoningBlock

def is_long(block: ReasoningBlock, minimum_chars: int) -> bool:
    return len(block.text.strip()) >= minimum_chars


def live_block(event: dict[str, Any]) -> ReasoningBlock | None:
    """The reasoning block a `block-end` chunk event carries (rc8 persists live chunks)."""
    if event.get("type") != "assistant/chunk":
        return None
    data = event.get("data")
    if not isinstance(data, dict):
        return None  # elided by the shim: not a reasoning block-end
    return stream_block(int(data["turn"]), int(data["step"]), data.get("chunk") or {})


def stream_block(turn: int, step: int, chunk: dict[str, Any]) -> ReasoningBlock | None:
    """The reasoning block a stream `block-end` chunk closes (0.2.x: an assistant-stream frame)."""
    block = chunk.get("block") if chunk.get("type") == "block-end" else None
    if not isinstance(block, dict) or block.get("type") != "reasoning" or not isinstance(block.get("text"), str):
        return None
    return ReasoningBlock(turn, step, block["text"])


def _message_blocks(data: dict[str, Any]) -> list[ReasoningBlock]:
    content = (data.get("message") or {}).get("content") or []
    return [ReasoningBlock(int(data["turn"]), int(data.get("step", 0)), b["text"]) for b in content
            if isinstance(b, dict) and b.get("type") == "reasoning" and isinstance(b.get("text"), str)]


def open_turn_blocks(events: Sequence[dict[str, Any]]) -> list[ReasoningBlock]:
    """The finished reasoning blocks of the turn still open at the end of `events`, if any.

    For an engine that connects mid-turn: the whole log arrives as one replay, and the open
    turn's thoughts are still worth indexing before its end.
    """
    found: list[ReasoningBlock] = []
    for event in reversed(events):
        kind, data = event.get("type"), event.get("data")
        if kind == "turn/end":
            return []
        if not isinstance(data, dict):
            continue
        if kind == "turn/start":
            return [b for b in found if b.turn == data.get("turn")]
        block = live_block(event)
        if block is not None:
            found.insert(0, block)
        elif kind == "assistant/message" and isinstance(data.get("turn"), int):
            found[:0] = _message_blocks(data)
    return []


def durable_blocks(events: Sequence[dict[str, Any]], turn: int,
                   span: tuple[int, int | None] | None = None) -> list[ReasoningBlock]:
    """Every reasoning block of `turn`'s assistant messages, in log order.

    Scans back from the end only as far as the turn's `turn/start`, or only the turn's own
    `span` (seqs of its turn/start and turn/end, from the log's index): a turn end, or a
    turn recovered long after it ended, costs the length of that turn, not of the session.
    """
    found: list[ReasoningBlock] = []
    if span is not None:
        start, end = span
        events = events[start:end + 1 if end is not None else len(events)]
    for event in reversed(events):
        kind, data = event.get("type"), event.get("data")
        if not isinstance(data, dict):
            continue
        if kind == "turn/start" and data.get("turn") == turn:
            break
        if kind == "assistant/message" and data.get("turn") == turn:
            found[:0] = _message_blocks(data)
    return found


def long_blocks(blocks: Sequence[ReasoningBlock], minimum_chars: int) -> list[ReasoningBlock]:
    """The blocks worth a hint, once each (a repeated identical block is one hint)."""
    seen: set[HintKey] = set()
    out = []
    for block in blocks:
        if is_long(block, minimum_chars) and block.key not in seen:
            seen.add(block.key)
            out.append(block)
    return out
