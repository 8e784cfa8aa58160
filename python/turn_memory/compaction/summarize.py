"""Ask the user's configured model (through DSH's own llm service) for a checkpoint summary.

The request replays the shadowed span as the conversation saw it — same system prompt,
same tools — then appends the instruction, so the provider can reuse its prefix cache.
"""

from __future__ import annotations

from typing import Any, Mapping

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions, LlmRequest
from turn_memory.bridge.server import RemoteError, ShimTimeout
from turn_memory.compaction.selection import Selection, compressed_view, first_content_index
from turn_memory.compaction.transaction import Summary
from turn_memory.host.llm_stream import StreamAssembler
from turn_memory.host.routes import request_header, route
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.interfaces import ReadyTurn


class SummaryFailed(Exception):
    pass


def summary_request(log: SessionLog, selection: Selection, agent: AgentOptions, instruction: str,
                    max_tokens: int | None, ready: Mapping[int, ReadyTurn] | None = None) -> LlmRequest:
    """`ready`: turns whose finished compression has not landed: summarized in that form."""
    header = request_header(log) or {}
    provider, model = route(log, agent)
    compressed, skipped = compressed_view(ready)
    messages: list[dict[str, Any]] = []
    for seq in selection.shadowed:
        if seq in compressed:  # one user message with the roles written out (as a 0.2 mode-4 landing)
            label = {"user": "User", "assistant": "Assistant", "tool": "Tool result"}
            text = "\n\n".join(f"{label.get(role, role)}: {text}" for role, text in compressed[seq])
            messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        elif seq not in skipped and (m := log.message_of(seq)) is not None:
            messages.append(m)
    if first_content_index(log) == 1:  # a protected system head is the prompt, not history
        head = log.message_of(log.nodes[0])
        if head is not None:
            messages.insert(0, head)
    messages.append({"role": "user", "content": [{"type": "text", "text": instruction}]})
    return LlmRequest(
        provider=provider, model=model, messages=messages,
        system=header.get("system"), tools=header.get("tools"),
        maxTokens=max_tokens, purpose="compaction",
    )


async def summarize(port: HostPort, session_id: str, request: LlmRequest, timeout: float) -> Summary:
    assembler = StreamAssembler()
    try:
        await port.llm_stream(session_id, request, assembler.extend, timeout)
    except (RemoteError, ShimTimeout) as exc:
        raise SummaryFailed(f"summary request failed: {exc}") from exc
    out = assembler.result()
    kind = out.finish.get("kind")
    if kind in ("error", "aborted"):
        failure = out.finish.get("failure") or {}
        raise SummaryFailed(f"summary request {kind}: {failure.get('message', 'no detail')}")
    if kind == "max-tokens":
        raise SummaryFailed("summary truncated at the token cap (incomplete checkpoint)")
    if any(b.get("type") == "image" for b in out.blocks):
        raise SummaryFailed("summary cannot contain image output")
    text = out.text_blocks
    if not any(b.get("text", "").strip() for b in text):
        raise SummaryFailed("summary request produced no text")
    return Summary(blocks=text, raw_output=out.blocks, provider=request.provider, model=request.model,
                   max_tokens=request.maxTokens, usage=out.usage)
