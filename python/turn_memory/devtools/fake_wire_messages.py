"""The fake model's Anthropic-Messages encoder: what DSH 0.2.1's default ``deepseek-official``
route calls (``POST {DEEPSEEK_BASE_URL}/v1/messages``; details in docs/v021-messages-route.md).

Two halves:

* :func:`chat_view` normalizes a Messages request into the OpenAI-style view the rest of the
  project reads (``FakeRequest.messages`` / ``.tools``), in rc.8's chat-completions
  conventions. The top-level ``system`` becomes a leading ``role: system`` message. A wire
  ``user`` message becomes ``role: tool`` messages (one per ``tool_result`` block,
  ``tool_call_id`` = ``tool_use_id``) and ``role: user`` messages, one per text block: 0.2.1
  merges consecutive same-role messages into one wire message (the user's words, the
  runtime-context snapshot, a compaction instruction arrive as blocks of one ``user``
  message) and a host message is mostly one text block, so each text block starts a user
  message - except the handle text 0.2.1 puts right before each image, which stays with its
  image. (A host message of several text blocks, e.g. stock compaction's checkpoint -
  preamble, summary, closing tag - so shows as several user messages; ``all_text()`` and
  substring rules are unaffected.) Text-only content is one string, content with images a
  list of ``{"type": "text"}`` / ``{"type": "image_url", "image_url": {"url": "data:…"}}``
  parts. An assistant message becomes ``content`` (its text), ``reasoning_content`` (its
  ``thinking`` blocks) and ``tool_calls`` (``tool_use`` blocks, ``arguments`` =
  ``json.dumps(input)``); tools become ``{"type": "function", "function": {...}}``.
* :func:`sse_frames` streams a scripted reply as Messages SSE (``event:`` + ``data:``):
  ``message_start`` (input usage), ``ping``, one content block per part - ``thinking``
  (``thinking_delta`` pieces, then one ``signature_delta``), ``text`` (``text_delta``),
  each ``tool_use`` (``input_json_delta`` pieces) - each closed by ``content_block_stop``,
  then ``message_delta`` (``stop_reason``, output usage) and ``message_stop``.

Stdlib only; imports nothing from ``fake_model`` (which imports this).
"""
from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Iterator, Mapping

PROTOCOL = "messages"
OVERFLOW_MESSAGE = "This model's maximum context length is 1000 tokens; your request is longer (fake)."

# Anthropic error types by HTTP status. 0.2.1 classifies on status first and reads the type
# only where the status says nothing (dsh-llm-deepseek providerError), so these only make the
# body look like the real thing; an unlisted 4xx gets a neutral type (host: HTTP_<status>).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}

# OpenAI-style finish reasons a script may use -> Messages stop_reason. Native stop reasons
# (end_turn, tool_use, max_tokens, stop_sequence) pass through unchanged.
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _pieces(s: str, n: int) -> list[str]:
    return [s[i:i + n] for i in range(0, len(s), n)]


# --------------------------------------------------------------------------- request -> view

def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or [] if isinstance(b, dict)]


def _image_url(source: Mapping[str, Any]) -> str:
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'application/octet-stream')};base64,{source.get('data', '')}"
    if source.get("type") == "url":
        return str(source.get("url", ""))
    if source.get("type") == "file":
        return f"file-id:{source.get('file_id', '')}"  # Files API reference (the fake serves no /v1/files)
    return ""


def _content(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """rc.8's wire form: text-only -> one string; anything else -> a list of parts."""
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if b.get("type") == "text":
            parts.append({"type": "text", "text": str(b.get("text", ""))})
        elif b.get("type") == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(b.get("source") or {})}})
        else:
            parts.append(dict(b))  # e.g. tool_addition / tool_removal in a system update
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _assistant(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    reasoning = "".join(str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking")
    calls = [{"id": b.get("id", ""), "type": "function",
              "function": {"name": b.get("name", ""), "arguments": json.dumps(b.get("input") or {})}}
             for b in blocks if b.get("type") == "tool_use"]
    out: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def _tool(block: Mapping[str, Any]) -> dict[str, Any]:
    out = {"role": "tool", "tool_call_id": block.get("tool_use_id", ""),
           "content": _content(_blocks(block.get("content")))}
    if block.get("is_error") is True:
        out["is_error"] = True
    return out


def _user(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One wire user message -> tool messages and user messages (see module doc)."""
    out: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []

    def flush() -> None:
        if group:
            out.append({"role": "user", "content": _content(group)})
            group.clear()

    for i, b in enumerate(blocks):
        if b.get("type") == "tool_result":
            flush()
            out.append(_tool(b))
            continue
        is_handle = i + 1 < len(blocks) and blocks[i + 1].get("type") == "image"
        if b.get("type") == "text" and not is_handle:
            flush()  # a text block starts a message; an image's handle text stays with its image
        group.append(b)
    flush()
    return out


def chat_view(body: Mapping[str, Any]) -> dict[str, Any]:
    """``{"messages": [...], "tools": [...]}`` in the OpenAI chat shape (see module doc)."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _content(_blocks(system))})
    for m in body.get("messages") or []:
        role, blocks = m.get("role"), _blocks(m.get("content"))
        if role == "assistant":
            messages.append(_assistant(blocks))
        elif role == "user":
            messages.extend(_user(blocks))
        else:  # "system": an in-history system-prompt update or developer message
            messages.append({"role": str(role), "content": _content(blocks)})
    tools = [{"type": "function", "function": {"name": t.get("name", ""), "description": t.get("description", ""),
                                               "parameters": t.get("input_schema") or {}}}
             for t in body.get("tools") or [] if isinstance(t, dict)]
    return {"messages": messages, "tools": tools}


# --------------------------------------------------------------------------- reply -> wire

def error_body(status: int, reply: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body of a scripted non-2xx answer, in the Messages error envelope.

    The overflow message names the "maximum context length", which 0.2.1's
    ``isContextWindowExceededError`` recognizes, so a 400 carrying it becomes
    ``CONTEXT_WINDOW_EXCEEDED`` (Anthropic's own "prompt is too long: N tokens > M maximum"
    would be a plain ``INVALID_REQUEST`` there).
    """
    if reply.get("error"):
        error = dict(reply["error"])
    elif reply.get("context_overflow"):
        error = {"type": "invalid_request_error", "message": OVERFLOW_MESSAGE}
    else:
        error = {"type": ERROR_TYPES.get(status, "api_error" if status >= 500 else "error"),
                 "message": f"scripted failure (HTTP {status})"}
    return {"type": "error", "error": error}


def _frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def error_frame(status: int, reply: Mapping[str, Any]) -> bytes:
    """The same error inside a stream whose 200 is already sent (an `error` event)."""
    return _frame(error_body(status, reply))


def fake_signature(model: str, thinking: str) -> str:
    """A stable stand-in for the provider's opaque thinking signature (0.2.1 replays it)."""
    return "fake-sig-" + hashlib.sha256(f"{model}\0{thinking}".encode()).hexdigest()[:24]


def events(model: str, reply: Mapping[str, Any], usage: Mapping[str, int], chunk_size: int = 16) -> Iterator[dict]:
    """The Messages stream events of one reply, in order."""
    pt, ct, cached = usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"]
    yield {"type": "message_start", "message": {
        "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": pt - cached, "output_tokens": 0,
                  "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}}}
    yield {"type": "ping"}
    index = 0
    reasoning = reply.get("reasoning") or ""
    if reasoning:
        yield {"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}}
        for p in _pieces(reasoning, chunk_size):
            yield {"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": p}}
        yield {"type": "content_block_delta", "index": index,
               "delta": {"type": "signature_delta", "signature": fake_signature(model, reasoning)}}
        yield {"type": "content_block_stop", "index": index}
        index += 1
    text = reply.get("text") or ""
    if text:
        yield {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
        for p in _pieces(text, chunk_size):
            yield {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}
        yield {"type": "content_block_stop", "index": index}
        index += 1
    calls = reply.get("tool_calls") or []
    for call in calls:
        args = call.get("arguments", {})
        args = args if isinstance(args, str) else json.dumps(args)
        yield {"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:20],
            "name": call["name"], "input": {}}}
        for p in _pieces(args, chunk_size):
            yield {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}}
        yield {"type": "content_block_stop", "index": index}
        index += 1
    if reply.get("truncate"):
        return
    finish = reply.get("finish") or ("tool_calls" if calls else "stop")
    yield {"type": "message_delta", "delta": {"stop_reason": STOP_REASONS.get(finish, finish), "stop_sequence": None},
           "usage": {"output_tokens": ct}}
    yield {"type": "message_stop"}


def sse_frames(model: str, reply: Mapping[str, Any], usage: Mapping[str, int],
               chunk_size: int = 16) -> Iterator[bytes]:
    for event in events(model, reply, usage, chunk_size):
        yield _frame(event)
