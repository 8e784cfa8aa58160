"""The fake model's OpenAI chat-completions encoder (DeepSeek-flavoured), used by DSH 0.1.0-rc.8.

``POST /chat/completions`` and ``/v1/chat/completions``. The request body needs no
normalization: it already is the view :class:`~turn_memory.devtools.fake_model.FakeRequest`
exposes. A reply streams as ``data: {chat.completion.chunk}`` frames: the role delta,
``reasoning_content`` deltas, ``content`` deltas, per-call ``tool_calls`` deltas (the first
names the call with empty arguments, then argument fragments), one ``finish_reason`` chunk, a
usage-only chunk (``choices: []``) and ``data: [DONE]``.

Stdlib only; imports nothing from ``fake_model`` (which imports this).
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator, Mapping

PROTOCOL = "openai"
OVERFLOW_MESSAGE = "This model's maximum context length is 1000 tokens; your request is longer (fake)."


def _pieces(s: str, n: int) -> list[str]:
    return [s[i:i + n] for i in range(0, len(s), n)]


def error_body(status: int, reply: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body of a scripted non-2xx answer (``status`` or ``context_overflow`` replies)."""
    if reply.get("error"):
        return {"error": reply["error"]}
    if reply.get("context_overflow"):
        return {"error": {"message": OVERFLOW_MESSAGE, "type": "invalid_request_error",
                          "code": "context_length_exceeded"}}
    return {"error": {"message": f"scripted failure (HTTP {status})", "type": "server_error"}}


def error_frame(status: int, reply: Mapping[str, Any]) -> bytes:
    """The same error inside a stream whose 200 is already sent (the OpenAI SDK throws on it)."""
    return b"data: " + json.dumps(error_body(status, reply)).encode() + b"\n\n"


def data_payloads(model: str, reply: Mapping[str, Any], usage: Mapping[str, int],
                  chunk_size: int = 16) -> Iterator[str]:
    """The SSE ``data:`` payloads of one streamed reply, ``[DONE]`` last."""
    cid = "chatcmpl-" + uuid.uuid4().hex[:12]

    def chunk(delta: dict | None = None, finish: str | None = None, usage_obj: dict | None = None) -> str:
        out: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                               "model": model, "choices": []}
        if delta is not None:
            out["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        if usage_obj is not None:
            out["usage"] = usage_obj
        return json.dumps(out)

    yield chunk({"role": "assistant", "content": ""})
    for p in _pieces(reply.get("reasoning") or "", chunk_size):
        yield chunk({"reasoning_content": p})
    for p in _pieces(reply.get("text") or "", chunk_size):
        yield chunk({"content": p})
    calls = reply.get("tool_calls") or []
    for i, call in enumerate(calls):
        args = call.get("arguments", {})
        args = args if isinstance(args, str) else json.dumps(args)
        # First delta names the call (id + name, empty args), then argument fragments.
        yield chunk({"tool_calls": [{"index": i, "id": call.get("id") or "call_" + uuid.uuid4().hex[:12],
                                     "type": "function", "function": {"name": call["name"], "arguments": ""}}]})
        for p in _pieces(args, chunk_size):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
    if reply.get("truncate"):
        return
    yield chunk({}, reply.get("finish") or ("tool_calls" if calls else "stop"))
    pt, ct, cached = usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"]
    yield chunk(usage_obj={"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct,
                           "prompt_cache_hit_tokens": cached, "prompt_cache_miss_tokens": pt - cached})
    yield "[DONE]"


def sse_frames(model: str, reply: Mapping[str, Any], usage: Mapping[str, int],
               chunk_size: int = 16) -> Iterator[bytes]:
    for payload in data_payloads(model, reply, usage, chunk_size):
        yield b"data: " + payload.encode() + b"\n\n"
