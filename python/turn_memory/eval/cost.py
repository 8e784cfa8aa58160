"""What a run will cost before it starts (an estimate), and what it cost after (measured). Pure.

The estimate is arithmetic over each scenario's size (`raw_tokens`, turns, probes, long
thoughts), with the assumptions below; every request is priced at DeepSeek's list prices
(`devtools.price_model`), once with the provider's prefix cache as this model expects it to
hit, and once as an upper bound with every prompt token a miss. What the run really cost is
the provider's reported usage, priced the same way.

Assumptions (per scenario, turn sizes taken as equal):
* turn workers: a turn of at least `MIN_TURN_TOKENS` gets one worker making
  `WORKER_REQUESTS` requests; its prompt is the session so far (compressed to `KEPT` of
  its raw size) plus the turn plus `WORKER_OVERHEAD`; the session so far was already sent
  with the previous turn's worker (a cache hit), the rest misses; a later request of the
  same worker re-sends the first (hits) plus the worker's own edits; it writes `KEPT` of
  the turn;
* `/compact` with turn-memory: a segment worker per `SEGMENT_TOKENS` of the compressed
  surface, `WORKER_REQUESTS` requests each; with stock: one summary request over the raw
  history (nothing of it cached: the agent's own requests never reach the provider), a
  session without `/compact` gets one summary per `window x 0.8` of raw history;
* thought hints: one request per reasoning block of `HINT_MIN_CHARS` or more;
* probes: every probe's requests start with the same snapshot (cached after the first);
  turn-memory's answers make `PROBE_LOOKUPS` history reads of one turn each;
* the judge: one short request per probe and engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from turn_memory.devtools.price_model import DEEPSEEK, Prices
from turn_memory.eval import routing
from turn_memory.eval.provider import Usage
from turn_memory.eval.scenario import Scenario

MIN_TURN_TOKENS = 600
WORKER_REQUESTS = 2
WORKER_OVERHEAD = 4_000
KEPT = 0.25
SEGMENT_TOKENS = 32_000
SUMMARY_OUTPUT = 2_000
HINT_MIN_CHARS = 2_000
HINT_OVERHEAD = 1_200
HINT_OUTPUT = 400
#: the snapshot's system prompt and tool list
SNAPSHOT_OVERHEAD = 8_000
PROBE_LOOKUPS = 2
PROBE_OUTPUT = 400
JUDGE_PROMPT = 1_200
JUDGE_OUTPUT = 120


@dataclass(frozen=True)
class Planned:
    """One estimated request: prompt tokens (of them, expected cache hits) and output."""

    purpose: str
    prompt: int
    hit: int
    output: int


@dataclass
class Bill:
    requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    output_tokens: int = 0
    by_purpose: dict[str, int] = field(default_factory=dict)

    def add(self, purpose: str, prompt: int, hit: int, output: int) -> None:
        self.requests += 1
        self.prompt_tokens += prompt
        self.hit_tokens += min(hit, prompt)
        self.output_tokens += output
        self.by_purpose[purpose] = self.by_purpose.get(purpose, 0) + 1

    def cost(self, prices: Prices = DEEPSEEK) -> float:
        miss = self.prompt_tokens - self.hit_tokens
        return (self.hit_tokens * prices.hit + miss * prices.miss + self.output_tokens * prices.output) / 1e6

    def upper_bound(self, prices: Prices = DEEPSEEK) -> float:
        """Every prompt token a cache miss."""
        return (self.prompt_tokens * prices.miss + self.output_tokens * prices.output) / 1e6

    def to_json(self, prices: Prices = DEEPSEEK) -> dict:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens, "cached_tokens": self.hit_tokens,
                "output_tokens": self.output_tokens, "cost_usd": round(self.cost(prices), 4),
                "by_purpose": dict(sorted(self.by_purpose.items()))}


def planned_requests(scenario: Scenario) -> list[Planned]:
    raw = max(scenario.raw_tokens, 1)
    turns = len(scenario.turns)
    per_turn = raw / turns
    out: list[Planned] = []
    # turn-memory: per-turn workers, then /compact's segment workers
    if per_turn >= MIN_TURN_TOKENS:
        for n in range(turns):
            before = int(KEPT * per_turn * n)
            first = WORKER_OVERHEAD + before + int(per_turn)
            out.append(Planned(routing.TURN_WORKER, first, before, int(KEPT * per_turn) + 100))
            for _ in range(WORKER_REQUESTS - 1):
                out.append(Planned(routing.TURN_WORKER, first + int(KEPT * per_turn), first, 50))
    surface = int(KEPT * raw)
    for _ in range(max(1, math.ceil(surface / SEGMENT_TOKENS)) if scenario.compact else 0):
        prompt = WORKER_OVERHEAD + surface
        out.append(Planned(routing.SESSION_WORKER, prompt, 0, surface // 3))
        out.append(Planned(routing.SESSION_WORKER, prompt + surface // 3, prompt, 50))
    for block in scenario.reasoning_blocks():
        if len(block) >= HINT_MIN_CHARS:
            out.append(Planned(routing.HINT, HINT_OVERHEAD + len(block) // 4, HINT_OVERHEAD, HINT_OUTPUT))
    # stock: its summaries
    summaries = 1 if scenario.compact else max(1, math.ceil(raw / (0.8 * scenario.window)))
    for _ in range(summaries):
        out.append(Planned(routing.SUMMARY, min(raw, int(0.8 * scenario.window)) + SNAPSHOT_OVERHEAD, 0, SUMMARY_OUTPUT))
    # the probes and the judge, both engines
    stock_snapshot = SNAPSHOT_OVERHEAD + SUMMARY_OUTPUT + int(0.16 * min(raw, scenario.window))
    memory_snapshot = SNAPSHOT_OVERHEAD + min(surface, SEGMENT_TOKENS // 4 if scenario.compact else surface)
    for i, _ in enumerate(scenario.probes):
        out.append(Planned(routing.PROBE, stock_snapshot, 0 if i == 0 else stock_snapshot, PROBE_OUTPUT))
        prompt, hit = memory_snapshot, memory_snapshot if i else 0
        for lookup in range(PROBE_LOOKUPS + 1):
            out.append(Planned(routing.PROBE, prompt, hit, PROBE_OUTPUT if lookup == PROBE_LOOKUPS else 60))
            hit, prompt = prompt, prompt + int(per_turn)  # the next request re-sends this one, plus a read turn
        out += [Planned(routing.JUDGE, JUDGE_PROMPT, 0, JUDGE_OUTPUT)] * 2
    return out


def estimate(scenarios: Iterable[Scenario]) -> Bill:
    bill = Bill()
    for scenario in scenarios:
        for p in planned_requests(scenario):
            bill.add(p.purpose, p.prompt, p.hit, p.output)
    return bill


def measured(usages: Iterable[tuple[str, Usage]]) -> Bill:
    """The provider's reported usage, as a bill."""
    bill = Bill()
    for purpose, u in usages:
        bill.add(purpose, u.prompt_tokens, u.cached_tokens, u.completion_tokens)
    return bill
