"""The provider that answers the memory's requests: any OpenAI-compatible chat endpoint.

One synchronous call per request (`complete`); the proxy runs it on the request's own
server thread. Messages go out in the OpenAI chat shape the proxy already has them in; an
image is replaced by a short text note unless the provider takes images (DeepSeek's chat
API does not). Usage is what the provider reports, cache hits included where it says
(DeepSeek: `prompt_cache_hit_tokens`; OpenAI: `prompt_tokens_details.cached_tokens`).

A request that times out (no bytes for `timeout_s`), cannot connect, or is answered 408, 409,
429 or 5xx is sent again, up to `retries` times, after 0.5, 1, 2 … 8 s (or the provider's
Retry-After, up to a minute). A provider bills a retried request again if it had begun it,
and the usage reported is the answering attempt's only: `retried` counts them, by purpose.

A request that still cannot connect, or whose key or model the provider refuses (401, 403,
404), raises `ProviderDown`: every later request would fail the same way, so the run stops
there. `unreachable` is the cheap check before a run (a TCP connect to the endpoint), and a
local endpoint (`is_local`) needs no key.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from turn_memory.devtools.price_model import DEEPSEEK, Prices

IMAGE_NOTE = "[image omitted: the evaluation sends this provider text only]"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_RETRIES = 2
#: HTTP answers worth sending the same request again for (as the OpenAI client's own retries)
RETRY_STATUSES = frozenset({408, 409, 429})
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 60.0
CONNECT_TIMEOUT_S = 5.0
#: what a local server is sent when no key is set (the OpenAI client refuses an empty one)
LOCAL_KEY = "local"


class ProviderError(RuntimeError):
    """The provider did not answer (HTTP error, timeout, unreadable reply)."""


class ProviderDown(ProviderError):
    """No request to this provider can succeed (no connection, a refused key or model): the run
    stops at the first one. `fix` says what to change."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def is_local(base_url: str) -> bool:
    """An endpoint on this machine (localhost, 127.0.0.0/8, ::1): it needs no key."""
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unreachable(base_url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the endpoint's host and port take no TCP connection; None when they do, or when a
    proxy from the environment stands between (the client goes through it, this check could not)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{base_url!r} is not an http(s) URL"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        return str(exc)
    if parts.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(parts.hostname):
        return None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"cannot connect to {parts.hostname}:{port}: {exc.strerror or exc}"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: of prompt_tokens, served from the provider's cache
    cached_tokens: int = 0

    def cost(self, prices: Prices = DEEPSEEK) -> float:
        return prices.usd(self.cached_tokens, self.prompt_tokens - self.cached_tokens, self.completion_tokens)


@dataclass
class ChatRequest:
    purpose: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    #: the scripted answerer's and judge's key (the probe being asked); a real model never sees it
    probe: Any = None


@dataclass
class Completion:
    text: str = ""
    reasoning: str = ""
    #: [{"id", "name", "arguments": str}]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def reply(self) -> dict[str, Any]:
        """As a FakeModel reply, streamed back to DSH with the provider's usage."""
        out: dict[str, Any] = {"prompt_tokens": max(1, self.usage.prompt_tokens),
                               "completion_tokens": max(1, self.usage.completion_tokens),
                               "cached_tokens": self.usage.cached_tokens}
        if self.text or not self.tool_calls:
            out["text"] = self.text or "(no answer)"  # DSH refuses an empty final message
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = [{"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in self.tool_calls]
        return out

    def assistant_message(self) -> dict[str, Any]:
        """As the next request's assistant message (the probe loop's own history)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in self.tool_calls]
        return message


class Provider(Protocol):
    @property
    def label(self) -> str:
        """Shown in the report ("scripted", or the model id); read-only, so a property serves."""
        ...

    scripted: bool
    #: purpose -> requests sent again after a failed attempt
    retried: Counter[str]

    def complete(self, request: ChatRequest) -> Completion: ...


def text_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with every image part replaced by IMAGE_NOTE."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            parts = [p if not (isinstance(p, dict) and p.get("type") == "image_url") else {"type": "text", "text": IMAGE_NOTE}
                     for p in content]
            m = {**m, "content": parts}
        out.append(m)
    return out


def _extra(obj: Any, name: str) -> Any:
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value


def _transport_error(exc: BaseException) -> bool:
    """A connection that broke mid-stream (older OpenAI clients let httpx's errors through)."""
    return type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2", "h11")


def _worth_again(exc: Exception) -> bool:
    """Sent again: a timeout, a broken connection, 408, 409, 429 or 5xx (an error the provider
    reports inside its stream is not: it said what is wrong)."""
    import openai

    status = getattr(exc, "status_code", None)
    return isinstance(exc, openai.APIConnectionError) or _transport_error(exc) or (
        isinstance(status, int) and (status in RETRY_STATUSES or status >= 500))


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    try:
        value = float(response.headers.get("retry-after")) if response is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and 0 <= value <= MAX_RETRY_AFTER_S else None


@dataclass
class OpenAIProvider:
    """An OpenAI-compatible endpoint through the `openai` client."""

    base_url: str
    api_key: str
    model: str
    judge_model: str
    images: bool = False
    #: how long a request waits for the provider's next bytes (the first token included)
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: how many times a failed request is sent again
    retries: int = DEFAULT_RETRIES
    scripted: bool = False
    retried: Counter[str] = field(default_factory=Counter)
    _client: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def label(self) -> str:
        return self.model if self.judge_model == self.model else f"{self.model} (judge {self.judge_model})"

    def _openai(self) -> Any:
        if self._client is None:
            from openai import OpenAI  # a second of imports that the scripted run never pays

            # the retries are ours (`complete`), so that each is counted
            self._client = OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=0)
        return self._client

    def complete(self, request: ChatRequest) -> Completion:
        import openai

        kwargs: dict[str, Any] = {
            "model": self.judge_model if request.purpose == "judge" else self.model,
            "messages": request.messages if self.images else text_only(request.messages),
            # streamed: some OpenAI-compatible servers only stream; the last chunk carries the usage
            "stream": True, "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = request.tools
        if request.max_tokens:
            kwargs["max_tokens"] = request.max_tokens
        where = f"{self.base_url} {kwargs['model']}"
        attempt = 0
        while True:
            try:
                return assemble(self._openai().chat.completions.create(**kwargs))
            except Exception as exc:
                if not isinstance(exc, openai.OpenAIError) and not _transport_error(exc):
                    raise  # a bug here, not the provider's failure
                if not _worth_again(exc) or attempt == self.retries:
                    message = f"{where}: {self._failure(exc)}" + (f" (after {attempt + 1} attempts)" if attempt else "")
                    fix = _fix_for(exc)
                    raise (ProviderDown(message, fix) if fix else ProviderError(message)) from None
                wait = _retry_after(exc)
            with self._lock:
                self.retried[request.purpose] += 1
            time.sleep(wait if wait is not None else min(MAX_BACKOFF_S, 0.5 * 2 ** attempt))
            attempt += 1

    def _failure(self, exc: Exception) -> str:
        if "timeout" in type(exc).__name__.lower():
            return f"no answer within {self.timeout_s:g}s"
        return str(exc)


def _fix_for(exc: Exception) -> str | None:
    """The fix when no later request could succeed either; None for a failure of this request only."""
    import openai

    if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
        return "check --base-url, that the server runs and this machine can reach it; or try --model scripted"
    status = getattr(exc, "status_code", None)
    if status in (401, 403):
        return "check the key in --api-key-env's variable"
    if status == 404:
        return "check --base-url and the model names (--model, --judge-model)"
    return None


def assemble(chunks: Any) -> Completion:
    """One Completion from a chat-completions stream: text, reasoning, tool calls, usage."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage = Usage()
    for chunk in chunks:
        if getattr(chunk, "usage", None) is not None:
            u = chunk.usage
            details = getattr(u, "prompt_tokens_details", None)
            cached = _extra(u, "prompt_cache_hit_tokens") or (getattr(details, "cached_tokens", 0) if details else 0) or 0
            usage = Usage(u.prompt_tokens or 0, u.completion_tokens or 0, int(cached))
        for choice in chunk.choices or []:
            delta = choice.delta
            if delta is None:
                continue
            text.append(delta.content or "")
            reasoning.append(_extra(delta, "reasoning_content") or "")
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["name"] = call.function.name or slot["name"]
                    slot["arguments"] += call.function.arguments or ""
    tool_calls = [{**c, "arguments": c["arguments"] or "{}"} for _, c in sorted(calls.items())]
    return Completion("".join(text), "".join(reasoning), tool_calls, usage)
