"""Which completed turns get a compression worker, and when
(docs/decisions.md#a-turn-gets-a-worker-when-its-rewrite-pays).

Pure. A turn in which the model said nothing (no assistant text) cannot be rewritten into a
user -> assistant turn without inventing one: it gets the no-op marker, whatever its
size (`transcript_problem`). Every other turn is marked pending at turn/end and then *held*
(raw, pending) until the compression policy (`choose`) finds it worth a worker — alone or
together with the turns held before it, which then share one worker and land each on its
own. A held turn keeps its raw reasoning and says so (pending): nothing is left looking
compressed that is not, and recovery redoes a held turn like any pending one.

The `value` policy (default) prices a worker against what it saves, in units of one cached
input token (DeepSeek: cache hit 0.028, miss 0.28, output 0.42 USD per million):

- saving: the tokens the rewrite removes, (1 - k) x T, on every later request that carries
  them. How many later requests? The session is expected to go on as long again as it has
  so far (the Lindy prior for a lifetime of unknown length), so as many requests as the
  session has made so far: F = the agent requests of its completed turns. Once the session
  has used a tool, at least `turns.horizonTurns` more turns of the length its turns have had
  (an agent at work goes on for several turns; in a coding session of ~10 steps a turn the
  first turn's worker pays at once, in one of one-call turns none does yet), plus
  `turns.horizonRequests` (`host.prices.expected_requests`).
- cost: the worker reads the turns uncached (T + its task, x MISS), its own prompt cached
  and, where it forks (`turns.workerStart=fork`), the history before the turns cached too;
  it writes the rewrite (k x T x OUTPUT); and the next agent request reads the rewrite
  uncached instead of the raw turns cached (k x T x (MISS - 1)).

k is the share of a turn this session's rewrites kept so far (`KEEP_PRIOR` until one has
landed). Where workers keep assistant nodes (0.2, `turns.assistantNodes`), T in the saving and
the rewrite is only what a worker may rewrite (the turn less its assistant nodes, `fixed`):
a chat turn, nearly all assistant, pays for no worker there. A batch is dispatched when saving >= cost, or when the surface has reached half of
the session-compaction threshold (under the same prior the session doubles again, and would
otherwise cross it: a lossy fold costs more than any worker), or when a turn ended with a
hand-off (the model asked for its compression; its follow-up runs only on the compressed
turn, issue 12). A batch under `turns.minTurnTokens` in all is never dispatched (a worker's
fixed costs dwarf it). How far behind the workers are decides how turns share workers (the
queue: turns dispatched while every slot is busy wait and go together), not whether they
are worth one: a turn that waited lands in the same pre-step as the earlier ones it waited
for, behind their one cache break. `bench/session_cost.py` measures the rule against stock and
the `size` policy (README "What it costs").

The `size` policy dispatches held turns as soon as together they reach `turns.minTurnTokens`;
`turns.minTurnTokens` = 0 dispatches every turn at once, whatever the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from turn_memory.config import TurnConfig
from turn_memory.host.prices import JOB_TOKENS, MISS, OUTPUT, expected_requests
from turn_memory.turns.nodes import OriginalNode

#: the workers' own system prompt and tools, read from the cache (shared by every worker)
WORKER_PREFIX_TOKENS = 2000
#: the share of a turn a rewrite keeps, until the session's own landings measured it
KEEP_PRIOR = 0.3
#: dispatch whatever the price once the surface reaches this share of the compaction threshold
WINDOW_SHARE = 0.5


def transcript_problem(originals: Sequence[OriginalNode]) -> str | None:
    """Why no worker may rewrite this turn at all (it gets the no-op marker), or None."""
    if not any(o.role == "assistant" and o.text.strip() for o in originals):
        return "no assistant transcript"
    return None


@dataclass(frozen=True)
class TurnFacts:
    turn: int
    #: DSH's token estimate of the turn's current surface nodes (`SessionLog.tokens`)
    tokens: int
    #: the turn ended with a hand-off that waits for its compression
    handoff: bool = False
    #: of `tokens`, what no worker may rewrite (assistant nodes where they are kept)
    fixed: int = 0


@dataclass(frozen=True)
class SessionFacts:
    #: agent model requests (steps) of the session's completed turns so far
    agent_requests: int
    #: the session's surface now (DSH's estimate)
    surface_tokens: int
    #: where session compaction runs (window x compaction.thresholdRatio); None: not known yet
    threshold_tokens: int | None = None
    #: share of a turn this session's landed rewrites kept (None: none landed yet)
    keep_ratio: float | None = None
    #: the session has used a tool (`turns.horizonTurns` and `turns.horizonRequests` then count)
    agentic: bool = False
    #: its completed turns (their mean length in requests scales `turns.horizonTurns`)
    completed_turns: int = 0


def horizon(session: SessionFacts, config: TurnConfig) -> int:
    """The agent requests the session is expected to make yet (`host.prices.expected_requests`)."""
    return expected_requests(session.agent_requests, session.agentic, config.horizonRequests,
                             session.completed_turns, config.horizonTurns)


@dataclass(frozen=True)
class Choice:
    #: the turns to compress now (all of the candidates, or none)
    dispatch: tuple[int, ...]
    #: why, for the log: names the numbers that decided
    reason: str
    #: the value policy's estimate, in cached-token units (0 when it did not price)
    saving: float = 0.0
    cost: float = 0.0


def batches(tokens: Sequence[int], config: TurnConfig) -> list[int]:
    """How consecutive turns of these sizes split into jobs (turns per job): one worker takes up
    to `turns.batchTurns` turns, and more than one only while they stay within `turns.batchTokens`."""
    out: list[int] = []
    total = 0
    for size in tokens:
        if out and out[-1] < config.batchTurns and total + size <= config.batchTokens:
            out[-1] += 1
            total += size
        else:
            out.append(1)
            total = size
    return out


def price(tokens: int, session: SessionFacts, jobs: int = 1, fixed: int = 0, expected: int | None = None,
          fork: bool = False) -> tuple[float, float]:
    """(saving, cost) of compressing `tokens` of raw turns, `fixed` of them not rewritable, with
    `jobs` workers, in cached-token units, over `expected` requests to come (`horizon`; None: as
    many again as the session made so far); `fork`: the workers fork the agent, so each also
    reads the history before the turns."""
    k = KEEP_PRIOR if session.keep_ratio is None else min(1.0, max(0.0, session.keep_ratio))
    rewritable = max(0, tokens - fixed)
    saving = (1 - k) * rewritable * (session.agent_requests if expected is None else expected)
    history = (max(0, session.surface_tokens - tokens) if fork else 0) + WORKER_PREFIX_TOKENS
    cost = MISS * (tokens + JOB_TOKENS * jobs) + history * jobs + k * rewritable * (OUTPUT + MISS - 1)
    return saving, cost


def choose(candidates: Sequence[TurnFacts], session: SessionFacts, config: TurnConfig) -> Choice:
    """Whether the held turns and the one just ended (`candidates`, oldest first) get a worker now."""
    turns = tuple(c.turn for c in candidates)
    total = sum(c.tokens for c in candidates)
    held = f"turn{'s' if len(turns) > 1 else ''} {', '.join(map(str, turns))} ({total} tokens)"
    if not candidates:
        return Choice((), "nothing to compress")
    if any(c.handoff for c in candidates):
        return Choice(turns, f"{held}: a hand-off asked for its compression")
    if config.minTurnTokens == 0:
        return Choice(turns, f"{held}: turns.minTurnTokens is 0, every turn gets a worker")
    if total < config.minTurnTokens:
        return Choice((), f"{held} held: below turns.minTurnTokens ({config.minTurnTokens}) together")
    if config.policy == "size":
        return Choice(turns, f"{held}: at least turns.minTurnTokens ({config.minTurnTokens})")
    if session.threshold_tokens and session.surface_tokens >= WINDOW_SHARE * session.threshold_tokens:
        return Choice(turns, f"{held}: the surface ({session.surface_tokens} tokens) is past half of the compaction "
                             f"threshold ({session.threshold_tokens})")
    expected = horizon(session, config)
    saving, cost = price(total, session, len(batches([c.tokens for c in candidates], config)),
                         sum(c.fixed for c in candidates), expected, config.workerStart == "fork")
    numbers = (f"saves ~{saving:,.0f} over the {expected} requests the session is expected to make yet, "
               f"costs ~{cost:,.0f} (cached-token units)")
    if saving >= cost:
        return Choice(turns, f"{held}: {numbers}", saving, cost)
    return Choice((), f"{held} held: {numbers}", saving, cost)
