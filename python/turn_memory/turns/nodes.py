"""The original nodes of one completed turn, as the worker and the landing planner see them.

Each current surface node of the turn becomes an `OriginalNode`: its role, what kind of
node it is, the text the worker reads (tool calls, tool results and images rendered as
canonical markers), its semantic sources, and the event it came from (kept verbatim for
unchanged landing and tool pairing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from turn_memory.host.blocks import render_blocks
from turn_memory.host.markers import is_host_context_at, marker_of
from turn_memory.host.surface import SessionLog

Role = Literal["user", "assistant", "tool"]
Kind = Literal["human", "host-context", "assistant", "tool-result"]


@dataclass(frozen=True)
class OriginalNode:
    index: int
    seq: int
    role: Role
    kind: Kind
    text: str
    #: original events this node's content derives from (a pending marker cites the original user message)
    sources: tuple[int, ...]
    event: dict[str, Any]
    #: assistant tool-call ids this node issues, or the call id a tool result answers
    calls: tuple[str, ...] = ()
    result_for: str | None = None
    has_reasoning: bool = False
    #: canonical `<memory-image …/>` markers of this node's images
    images: tuple[str, ...] = ()

    @property
    def message(self) -> dict[str, Any]:
        data: dict[str, Any] = self.event["data"]
        message: dict[str, Any] = data if self.event["type"] == "user/message" else data["message"]
        return message


def original_nodes(log: SessionLog, seqs: Sequence[int]) -> list[OriginalNode]:
    nodes: list[OriginalNode] = []
    for index, seq in enumerate(seqs):
        event = log.events[seq]
        kind_of_event = event["type"]
        message = event["data"] if kind_of_event == "user/message" else event["data"]["message"]
        blocks = message.get("content") or []
        if kind_of_event == "tool/result" and log.dialect.first_class_tool_results:
            # v02 results carry their blocks directly: show the worker the same text as on rc8
            blocks = [{"type": "tool-result", "toolCallId": message.get("toolCallId"),
                       "isError": log.dialect.tool_result_is_error(message), "content": blocks}]
        text, images, reasoning = render_blocks(blocks)
        sources: tuple[int, ...] = (seq,)
        if marker_of(event) is not None:
            # a marker copy stands for the original user message it replaced (its sources name it)
            sources = tuple(sorted({*event.get("sourceEventSeqs", ()), seq}))
        if kind_of_event == "user/message":
            role: Role = "user"
            kind: Kind = "host-context" if is_host_context_at(log.events, seq) else "human"
            nodes.append(OriginalNode(index, seq, role, kind, text, sources, event, images=tuple(images)))
        elif kind_of_event == "assistant/message":
            calls = tuple(b["id"] for b in message.get("content", []) if b.get("type") == "tool-call")
            nodes.append(OriginalNode(index, seq, "assistant", "assistant", text, sources, event, calls=calls,
                                      has_reasoning=reasoning, images=tuple(images)))
        elif kind_of_event == "tool/result":
            call = (message.get("source") or {}).get("callId")
            nodes.append(OriginalNode(index, seq, "tool", "tool-result", text, sources, event,
                                      result_for=call, images=tuple(images)))
        else:  # system/developer nodes never belong to a turn
            raise ValueError(f"seq {seq}: {kind_of_event} cannot be part of a turn")
    return nodes
