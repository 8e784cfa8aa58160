"""A DeepSeek-style prefix-cache price model over the requests a scripted model received.

Pure and deterministic; the session benchmark (`bench/session_cost.py`) prices every request
the `FakeModel` recorded with it. The model, and the approximations it makes:

* **Tokens.** A request is serialized in a canonical order - its tools (name, description,
  parameter schema, in the order sent), then its messages in order (the system prompt is the
  leading message; role, text, reasoning, tool calls, tool-call ids) - and counted at
  :data:`CHARS_PER_TOKEN` characters per token, the heuristic DSH's own token meter uses
  (`turn_memory.host.tokens`). No real tokenizer: the ratios between two variants priced the
  same way are what the model is for, not exact bills.
* **Cache.** As DeepSeek's context cache documents it (api-docs.deepseek.com, Context
  Caching: "Cache Persistence and Hit Rules"): each request persists *cache prefix units*, and
  a later request hits on the longest unit it matches in full, from the first token;
  everything after that misses. The units a request persists here: its whole input (the
  "end position of the user input": a request that extends an earlier one, the common case
  of an agent's next request, reads all of it from the cache, whatever its length), and
  its prefixes at fixed intervals of :data:`BLOCK_TOKENS` tokens (the "fixed token
  intervals", which is what a request that shares only the start of an earlier one hits).
  Not modelled: the unit at the end of the model's output (the request text holds no
  output) and the common prefixes the provider persists after seeing two requests diverge
  (a third request then hits them). A unit is matched by a hash chain over the intervals
  before it, so only an identical prefix from the very first token hits. Every request's
  units join the cache right after it is priced, in arrival order (the provider's
  cache fills within seconds; requests of one session are seconds apart). All requests share
  one cache domain: DeepSeek caches per account, and the agent, its workers and the title
  request all use the same key.
* **Output.** The scripted reply's text, reasoning and tool calls (name + arguments), at the
  same characters per token.
* **Prices** (USD per million tokens): cache hit 0.028, miss 0.28, output 0.42.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

CHARS_PER_TOKEN = 4
BLOCK_TOKENS = 64


@dataclass(frozen=True)
class Prices:
    """USD per million tokens."""

    hit: float = 0.028
    miss: float = 0.28
    output: float = 0.42

    def usd(self, hit: int, miss: int, output: int) -> float:
        """What a request of these token counts costs."""
        return (hit * self.hit + miss * self.miss + output * self.output) / 1e6


DEEPSEEK = Prices()


def tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            # an image is priced by a stable stand-in of its bytes, not its base64 length
            url = str((part.get("image_url") or {}).get("url", ""))
            parts.append(f"[image {hashlib.sha256(url.encode()).hexdigest()[:16]}]")
        else:
            parts.append(json.dumps(part, ensure_ascii=False))
    return "".join(parts)


def canonical_text(tools: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]) -> str:
    """One request as the text the cache sees: tools, then messages (system first), in order.

    `tools` and `messages` are the OpenAI chat view (`FakeRequest.tools` / `.messages`), the
    same for both DSH wire protocols.
    """
    out: list[str] = []
    for tool in tools:
        fn = tool.get("function", tool)
        out.append(f"<tool>{fn.get('name', '')}\n{fn.get('description', '')}\n"
                   f"{json.dumps(fn.get('parameters', {}), ensure_ascii=False)}\n")
    for m in messages:
        out.append(f"<|{m.get('role', '')}|>")
        if m.get("reasoning_content"):
            out.append(f"<think>{m['reasoning_content']}</think>")
        out.append(_content_text(m.get("content")))
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            out.append(f"<call {call.get('id', '')}>{fn.get('name', '')}({fn.get('arguments', '')})")
        if m.get("tool_call_id"):
            out.append(f"<result {m['tool_call_id']}>")
        out.append("\n")
    return "".join(out)


def output_tokens(reply: Mapping[str, Any] | None) -> int:
    """Output tokens of a scripted reply (text, reasoning, tool calls); at least 1."""
    if not reply:
        return 1
    chars = len(reply.get("text") or "") + len(reply.get("reasoning") or "")
    for call in reply.get("tool_calls") or []:
        args = call.get("arguments", {})
        chars += len(call.get("name", "")) + len(args if isinstance(args, str) else json.dumps(args))
    return max(1, -(-chars // CHARS_PER_TOKEN))


class PrefixCache:
    """Which prefix of a text an earlier text persisted as a unit (see the module docstring)."""

    def __init__(self, block_tokens: int = BLOCK_TOKENS, chars_per_token: int = CHARS_PER_TOKEN) -> None:
        self.block_chars = block_tokens * chars_per_token
        self.block_tokens = block_tokens
        self._seen: set[bytes] = set()
        #: each earlier request's whole input, keyed by the chain digest of its whole
        #: intervals (b"" for none): what is left past them, shorter than one interval
        self._inputs: dict[bytes, set[str]] = {}

    def _chain(self, text: str) -> list[bytes]:
        digests, h = [], b""
        for start in range(0, len(text) - self.block_chars + 1, self.block_chars):
            h = hashlib.blake2b(h + text[start:start + self.block_chars].encode(), digest_size=16).digest()
            digests.append(h)
        return digests

    def lookup_and_add(self, text: str) -> int:
        """Tokens of `text` that hit (the longest earlier unit it matches in full); then cache it."""
        chain = self._chain(text)
        units = 0
        for digest in chain:
            if digest not in self._seen:
                break
            units += 1
        hit = units * self.block_tokens
        # an earlier whole input that `text` extends ends inside the interval after the matched
        # ones (had it a whole interval more, that interval would have matched too)
        at = units * self.block_chars
        for rest in self._inputs.get(chain[units - 1] if units else b"", ()):
            if text.startswith(rest, at):
                hit = max(hit, tokens(text[:at + len(rest)]))
        self._seen.update(chain)
        whole = len(text) // self.block_chars
        self._inputs.setdefault(chain[whole - 1] if whole else b"", set()).add(text[whole * self.block_chars:])
        return hit


def interval_tokens(text: str) -> int:
    """Tokens of the whole fixed-interval units of `text`: what a later request that shares
    `text` as its start, then goes on differently, reads from the cache at least."""
    return len(text) // (BLOCK_TOKENS * CHARS_PER_TOKEN) * BLOCK_TOKENS


@dataclass
class PricedRequest:
    index: int
    #: what the caller grouped it as, e.g. "agent", "worker", "title"
    label: str
    prompt_tokens: int
    hit_tokens: int
    output_tokens: int
    cost_usd: float

    @property
    def miss_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens


@dataclass
class Request:
    """What the price model needs of one request."""

    text: str
    output_tokens: int
    label: str = "agent"


def price(requests: Iterable[Request], prices: Prices = DEEPSEEK, cache: PrefixCache | None = None) -> list[PricedRequest]:
    """Price requests in arrival order against one shared prefix cache."""
    cache = cache or PrefixCache()
    out = []
    for i, r in enumerate(requests):
        prompt = tokens(r.text)
        hit = min(prompt, cache.lookup_and_add(r.text))
        cost = prices.usd(hit, prompt - hit, r.output_tokens)
        out.append(PricedRequest(i, r.label, prompt, hit, r.output_tokens, cost))
    return out


@dataclass
class Bill:
    """Requests added up: their tokens, and per label (what each was for: "agent", "worker", or
    an eval purpose such as "probe") how many there were and what they cost.

    The session benchmark asks what each label cost (`cost_by_label`, `share`); the eval asks
    how many requests of each purpose and what the summed tokens cost at a price list (`cost`,
    `upper_bound`, `to_json`).
    """

    requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    output_tokens: int = 0
    #: each request's own price, summed
    cost_usd: float = 0.0
    requests_by_label: dict[str, int] = field(default_factory=dict)
    cost_by_label: dict[str, float] = field(default_factory=dict)

    def add(self, label: str, prompt: int, hit: int, output: int, cost_usd: float | None = None) -> None:
        """Count one request; `cost_usd` defaults to its price at DeepSeek's list prices."""
        hit = min(hit, prompt)  # an estimate or a provider may claim more cached than sent
        if cost_usd is None:
            cost_usd = DEEPSEEK.usd(hit, prompt - hit, output)
        self.requests += 1
        self.prompt_tokens += prompt
        self.hit_tokens += hit
        self.output_tokens += output
        self.cost_usd += cost_usd
        self.requests_by_label[label] = self.requests_by_label.get(label, 0) + 1
        self.cost_by_label[label] = self.cost_by_label.get(label, 0.0) + cost_usd

    @property
    def miss_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    @property
    def hit_ratio(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def share(self, label: str) -> float:
        """The part of the cost that `label`'s requests make."""
        return self.cost_by_label.get(label, 0.0) / self.cost_usd if self.cost_usd else 0.0

    def cost(self, prices: Prices = DEEPSEEK) -> float:
        """The summed tokens at `prices` (the same as `cost_usd` when each request was priced at them)."""
        return prices.usd(self.hit_tokens, self.miss_tokens, self.output_tokens)

    def upper_bound(self, prices: Prices = DEEPSEEK) -> float:
        """Every prompt token a cache miss."""
        return prices.usd(0, self.prompt_tokens, self.output_tokens)

    def to_json(self, prices: Prices = DEEPSEEK) -> dict[str, Any]:
        """The eval report's `usage`."""
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens, "cached_tokens": self.hit_tokens,
                "output_tokens": self.output_tokens, "cost_usd": round(self.cost(prices), 4),
                "by_purpose": dict(sorted(self.requests_by_label.items()))}


def bill(priced: Iterable[PricedRequest]) -> Bill:
    b = Bill()
    for p in priced:
        b.add(p.label, p.prompt_tokens, p.hit_tokens, p.output_tokens, p.cost_usd)
    return b
