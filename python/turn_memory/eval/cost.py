"""What a run will cost before it starts (an estimate), and what it cost after (measured). Pure.

The estimate is arithmetic over each scenario's size (`raw_tokens`, turns and their steps,
probes, long thoughts) and the run's turn-memory config, priced at DeepSeek's list prices
(`devtools.price_model`). Two plans:

* **expected**: what the compression policy will do with turns of these sizes. The policy
  itself (`turns.eligibility.choose`) is run over the scenario's turns, sized evenly: it
  holds turns until a worker pays for itself (or the surface nears the compaction threshold),
  then `turns.batchTurns`/`batchTokens` split the held turns into jobs. A worker makes
  `WORKER_REQUESTS` request (its prompt asks for the edits and the finish in one reply); a
  `/compact`, or the window's pressure, gets a segment worker per `compaction.segmentTokens`
  of the surface the policy left. A turn-memory answer with history makes `PROBE_LOOKUPS`
  history read. Priced with the provider's prefix cache as it is expected to hit.
* **at most**: every turn its own worker of `HIGH_WORKER_REQUESTS` requests, a `/compact`
  over a quarter of the raw history, `HIGH_PROBE_LOOKUPS` history reads per answer, and no
  cache hit. Not a hard bound: a worker that is refused and retried, a longer answer, or a
  provider retry (billed again) costs more.

Shared assumptions (per scenario): a worker's prompt is its system prompt and tools
(`WORKER_OVERHEAD`), the session before its turns (a cache hit: the previous worker sent it)
and its turns; it keeps `KEPT` of them. Stock summarizes once at `/compact` over the raw
history (nothing cached: the agent's own requests never reach the provider), or, without
`/compact`, once per `compaction.thresholdRatio` of the window. A thought hint per reasoning
block of `thoughtHints.minimumChars` or more. Every probe is asked from memory on both
engines and, where turn-memory offers `read_session_history`, once more with it; each from
the same snapshot (cached after the first); the judge makes one short request per answer.

Both plans come in two parts (`PARTS`): what turn-memory adds to a session (its turn and
session workers, thought hints) and what the evaluation itself costs (stock's summary, the
probe answers, the judge). This module is the one estimate: the command prints it, `--estimate`
prints it alone, and docs/eval.md quotes the shipped suite's figures (a test keeps them equal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from turn_memory.config import EngineConfig
from turn_memory.devtools.price_model import Bill
from turn_memory.eval import routing
from turn_memory.eval.provider import Usage
from turn_memory.eval.scenario import Scenario
from turn_memory.turns import eligibility

WORKER_REQUESTS = 1
HIGH_WORKER_REQUESTS = 2
WORKER_OVERHEAD = 4_000
KEPT = 0.25
#: what a segment worker writes, of its segment
SEGMENT_KEPT = 1 / 3
SUMMARY_OUTPUT = 2_000
HINT_OVERHEAD = 1_200
HINT_OUTPUT = 400
#: the snapshot's system prompt and tool list
SNAPSHOT_OVERHEAD = 8_000
PROBE_LOOKUPS = 1
HIGH_PROBE_LOOKUPS = 2
PROBE_OUTPUT = 400
LOOKUP_OUTPUT = 60
JUDGE_PROMPT = 1_200
JUDGE_OUTPUT = 120


@dataclass(frozen=True)
class Planned:
    """One estimated request: prompt tokens (of them, expected cache hits) and output."""

    purpose: str
    prompt: int
    hit: int
    output: int


#: what turn-memory adds to a session; every other request is the evaluation's own
TURN_MEMORY_WORK = frozenset({routing.TURN_WORKER, routing.SESSION_WORKER, routing.HINT})
TURN_MEMORY, EVALUATION = "turn_memory", "evaluation"
#: the two parts of a run's cost, as the estimate and the report name them
PARTS = {TURN_MEMORY: "turn-memory's own work (turn and session workers, thought hints: what it adds to a session)",
         EVALUATION: "the evaluation itself (stock's summary, probe answers, judge)"}


def part_of(purpose: str) -> str:
    return TURN_MEMORY if purpose in TURN_MEMORY_WORK else EVALUATION


@dataclass
class Estimate:
    expected: Bill
    #: the high plan, priced with no cache hits (`upper_bound`)
    high: Bill
    #: each plan by part (`PARTS`)
    expected_parts: dict[str, Bill] = field(default_factory=dict)
    high_parts: dict[str, Bill] = field(default_factory=dict)

    def cost(self) -> float:
        return self.expected.cost()

    def upper_bound(self) -> float:
        return self.high.upper_bound()

    def part(self, name: str) -> tuple[Bill, Bill]:
        """(expected, at most) of one part."""
        return self.expected_parts.get(name, Bill()), self.high_parts.get(name, Bill())

    def to_json(self) -> dict:
        parts = {}
        for name in PARTS:
            expected, high = self.part(name)
            parts[name] = {"requests": expected.requests, "cost_usd": round(expected.cost(), 4),
                           "at_most": {"requests": high.requests, "cost_usd": round(high.upper_bound(), 4)}}
        return {**self.expected.to_json(), "at_most": {
            "requests": self.high.requests, "prompt_tokens": self.high.prompt_tokens,
            "output_tokens": self.high.output_tokens, "cost_usd": round(self.upper_bound(), 4),
            "by_purpose": dict(sorted(self.high.requests_by_label.items()))}, "parts": parts}


@dataclass
class PolicyPlan:
    """What the compression policy does with a scenario's turns (sized evenly)."""

    #: the turns of each turn-worker job, in dispatch order
    jobs: list[list[int]]
    #: the turns still held (raw) after the last turn
    held: list[int]
    #: the segments (tokens each) of the session compactions the window's pressure starts
    pressure_segments: list[int]
    #: the surface after the last turn, before any `/compact`
    surface: int


def turn_tokens(scenario: Scenario) -> int:
    return max(scenario.raw_tokens, 1) // len(scenario.turns)


def _segments(tokens: int, segment_tokens: int) -> list[int]:
    full, rest = divmod(tokens, segment_tokens)
    return [segment_tokens] * full + ([rest] if rest else [])


def policy_plan(scenario: Scenario, config: EngineConfig) -> PolicyPlan:
    size = turn_tokens(scenario)
    threshold = int(scenario.window * config.compaction.thresholdRatio)
    jobs: list[list[int]] = []
    held: list[int] = []
    pressure: list[int] = []
    surface = requests = 0
    keep: float | None = None
    for n, turn in enumerate(scenario.turns, start=1):
        requests += len(turn.steps)
        surface += size
        held.append(n)
        if config.turns.enabled:
            choice = eligibility.choose([eligibility.TurnFacts(t, size) for t in held],
                                        eligibility.SessionFacts(requests, surface, threshold, keep), config.turns)
            if choice.dispatch:
                for count in eligibility.batches([size] * len(held), config.turns):
                    jobs.append(held[:count])
                    held = held[count:]
                surface -= int((1 - KEPT) * size * len(choice.dispatch))
                keep = KEPT
        if config.compaction.auto and surface >= threshold:
            retained = int(config.compaction.retainRatio * scenario.window)
            folded = _segments(max(0, surface - retained), config.compaction.segmentTokens)
            pressure += folded
            surface = retained + sum(int(SEGMENT_KEPT * s) for s in folded)
            held = []
    return PolicyPlan(jobs, held, pressure, surface)


def _worker(out: list[Planned], purpose: str, history: int, tokens: int, kept: int, requests: int) -> None:
    """A worker's requests: the first sends the history (hit) and the tokens; a later one
    re-sends the first (hit) plus the worker's own edits."""
    first = WORKER_OVERHEAD + history + tokens
    out.append(Planned(purpose, first, history, kept + 100))
    for _ in range(requests - 1):
        out.append(Planned(purpose, first + kept, first, 50))


def planned_requests(scenario: Scenario, config: EngineConfig | None = None, *, high: bool = False) -> list[Planned]:
    config = config or EngineConfig()
    raw = max(scenario.raw_tokens, 1)
    size = turn_tokens(scenario)
    out: list[Planned] = []
    # turn-memory: turn workers, session workers (pressure, /compact), thought hints
    if high:
        worker_requests, lookups = HIGH_WORKER_REQUESTS, HIGH_PROBE_LOOKUPS
        jobs, pressure, surface = [[n] for n in range(1, len(scenario.turns) + 1)], [], int(KEPT * raw)
    else:
        worker_requests, lookups = WORKER_REQUESTS, PROBE_LOOKUPS
        plan = policy_plan(scenario, config)
        jobs, pressure, surface = plan.jobs, plan.pressure_segments, plan.surface
    for job in jobs:
        history = int(KEPT * size * (job[0] - 1))
        _worker(out, routing.TURN_WORKER, history, size * len(job), int(KEPT * size * len(job)), worker_requests)
    segments = pressure + (_segments(surface, config.compaction.segmentTokens) if scenario.compact else [])
    for segment in segments:
        _worker(out, routing.SESSION_WORKER, 0, segment, int(SEGMENT_KEPT * segment), worker_requests)
    if scenario.compact:
        surface = sum(int(SEGMENT_KEPT * s) for s in _segments(surface, config.compaction.segmentTokens))
    if config.thoughtHints.enabled and config.turns.enabled:
        for block in scenario.reasoning_blocks():
            if len(block) >= config.thoughtHints.minimumChars:
                out.append(Planned(routing.HINT, HINT_OVERHEAD + len(block) // 4, HINT_OVERHEAD, HINT_OUTPUT))
    # stock: its summaries
    threshold = int(scenario.window * config.compaction.thresholdRatio)
    summaries = 1 if scenario.compact else max(1, math.ceil(raw / threshold))
    out += [Planned(routing.SUMMARY, min(raw, threshold) + SNAPSHOT_OVERHEAD, 0, SUMMARY_OUTPUT)] * summaries
    # the probes and the judge, both engines
    stock_snapshot = SNAPSHOT_OVERHEAD + SUMMARY_OUTPUT + (
        0 if scenario.compact else int(config.compaction.retainRatio * scenario.window))
    memory_snapshot = SNAPSHOT_OVERHEAD + surface
    for i, _ in enumerate(scenario.probes):
        # from memory, both engines: one answer, no tool
        out.append(Planned(routing.PROBE, stock_snapshot, stock_snapshot if i else 0, PROBE_OUTPUT))
        out.append(Planned(routing.PROBE, memory_snapshot, memory_snapshot if i else 0, PROBE_OUTPUT))
        answers = 2
        if config.sessionHistory.enabled:  # turn-memory with read_session_history (its tool list: no hit at first)
            prompt, hit = memory_snapshot, memory_snapshot if i else 0
            for lookup in range(lookups + 1):
                out.append(Planned(routing.PROBE, prompt, hit, PROBE_OUTPUT if lookup == lookups else LOOKUP_OUTPUT))
                hit, prompt = prompt, prompt + size  # the next request re-sends this one, plus a read turn
            answers += 1
        out += [Planned(routing.JUDGE, JUDGE_PROMPT, 0, JUDGE_OUTPUT)] * answers
    return out


def _bill(planned: Iterable[Planned]) -> Bill:
    bill = Bill()
    for p in planned:
        bill.add(p.purpose, p.prompt, p.hit, p.output)
    return bill


def estimate(scenarios: Iterable[Scenario], config: EngineConfig | None = None) -> Estimate:
    scenarios = list(scenarios)
    expected = [p for s in scenarios for p in planned_requests(s, config)]
    high = [p for s in scenarios for p in planned_requests(s, config, high=True)]
    return Estimate(_bill(expected), _bill(high),
                    {name: _bill(p for p in expected if part_of(p.purpose) == name) for name in PARTS},
                    {name: _bill(p for p in high if part_of(p.purpose) == name) for name in PARTS})


def measured(usages: Iterable[tuple[str, Usage]]) -> Bill:
    """The provider's reported usage, as a bill."""
    return _bill(Planned(purpose, u.prompt_tokens, u.cached_tokens, u.completion_tokens) for purpose, u in usages)


def measured_parts(usages: Iterable[tuple[str, Usage]]) -> dict[str, Bill]:
    """The reported usage by part (`PARTS`)."""
    usages = list(usages)
    return {name: measured((purpose, u) for purpose, u in usages if part_of(purpose) == name) for name in PARTS}
