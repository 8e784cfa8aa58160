"""Assemble DSH `StreamChunk`s (forwarded by the shim) into content blocks.

Mirrors the host's BlockAssembler semantics: a `block-end` carries the authoritative
block; deltas only fill blocks that never ended; `finish` carries why the stream stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Partial:
    block_type: str
    text: str = ""
    call_id: str | None = None
    call_name: str | None = None
    arguments: str = ""
    block: dict[str, Any] | None = None


@dataclass
class Assembled:
    blocks: list[dict[str, Any]]
    finish: dict[str, Any]
    usage: dict[str, Any] | None = None

    @property
    def text_blocks(self) -> list[dict[str, Any]]:
        return [b for b in self.blocks if b.get("type") == "text"]

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.text_blocks)


@dataclass
class StreamAssembler:
    _partials: dict[int, _Partial] = field(default_factory=dict)
    _order: list[int] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish: dict[str, Any] | None = None

    def _ensure(self, index: int, block_type: str) -> _Partial:
        partial = self._partials.get(index)
        if partial is None:
            partial = self._partials[index] = _Partial(block_type)
            self._order.append(index)
        return partial

    def push(self, chunk: dict[str, Any]) -> None:
        kind = chunk.get("type")
        if kind == "block-start":
            self._ensure(chunk["index"], chunk.get("blockType", "text"))
        elif kind in ("text-delta", "reasoning-delta"):
            partial = self._ensure(chunk["index"], "text" if kind == "text-delta" else "reasoning")
            if partial.block is None:
                partial.text += chunk.get("text", "")
        elif kind == "tool-call-delta":
            partial = self._ensure(chunk["index"], "tool-call")
            if partial.block is None:
                partial.call_id = chunk.get("id", partial.call_id)
                partial.call_name = chunk.get("name") or partial.call_name
                partial.arguments += chunk.get("argumentsDelta", "")
        elif kind == "block-end":
            partial = self._ensure(chunk["index"], chunk["block"].get("type", "text"))
            if partial.block is None:
                partial.block = chunk["block"]
        elif kind == "usage":
            self.usage = chunk.get("usage")
        elif kind == "finish":
            self.finish = chunk.get("reason")

    def extend(self, chunks: list[dict[str, Any]]) -> None:
        for chunk in chunks:
            self.push(chunk)

    def result(self) -> Assembled:
        blocks = []
        for index in self._order:
            p = self._partials[index]
            if p.block is not None:
                blocks.append(p.block)
            elif p.block_type in ("text", "reasoning"):
                blocks.append({"type": p.block_type, "text": p.text})
            elif p.block_type == "tool-call":
                blocks.append({"type": "tool-call", "id": p.call_id or f"call-{index}",
                               "name": p.call_name or "", "arguments": p.arguments})
        finish = self.finish or {"kind": "stop"}
        if finish.get("kind") == "max-tokens":
            blocks = [b for b in blocks if b.get("type") != "tool-call"]
        return Assembled(blocks, finish, self.usage)
