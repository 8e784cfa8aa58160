"""Whether folding the older history into a checkpoint now pays, and over which span
(docs/decisions.md#a-checkpoint-is-folded-in-the-background-when-it-pays). Pure.

Priced like a turn's worker (`turns.eligibility`), in units of one cached input token:

- saving: the checkpoint replaces S tokens of history with C, on every later request:
  (S - C) x R, R the requests the session is expected to make yet (the turn policy's horizon);
- cost: the segment workers, fresh spawns, read the span uncached in their tasks (S x MISS)
  and write the checkpoint (C x OUTPUT); and the next agent request reads the checkpoint and
  everything after it uncached once (C + T) x (MISS - 1), T the surface after the span.

C is not known before the workers ran: the share this session's checkpoints came out at
(`FOLD_PRIOR` before one landed), never under the checkpoint's framing.

Paying over the horizon is not enough: a fold that pays now would mostly pay again a turn or
two later, folding the same checkpoint with one more turn, and every fold pays its cache break
and re-reads and rewrites the earlier checkpoint whatever it adds. So a fold also waits until
the turns it would fold have cost, since they ended, as much as that fixed part
(`judge`): with a history that grows by about a turn's rewrite each turn, that spacing
makes the sum of folds and carried history least (the economic-order-quantity rule).

The span is the one pressure would fold (from the first content node to a retained tail),
with a tail of `compaction.backgroundRetainRatio` of the window (nothing folded is lost, so it
keeps less than pressure's `retainRatio`), ending before the first turn whose own compression
may still land (`busy`): a landing inside the span would move it under the checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from turn_memory.compaction.policy import select_pressure_range
from turn_memory.compaction.selection import Selection
from turn_memory.host.surface import SessionLog
from turn_memory.host.prices import JOB_TOKENS, MISS, OUTPUT

#: the share of its span a checkpoint keeps, until the session's own checkpoints measured it
FOLD_PRIOR = 0.25


@dataclass(frozen=True)
class FoldFacts:
    #: tokens of the span the checkpoint would replace
    span: int
    #: tokens of the surface after the span (the retained tail and the open turn)
    tail: int
    #: the agent requests the session is expected to make yet
    requests: int
    #: segments the span splits into (one worker each)
    segments: int
    #: what any checkpoint costs with an empty summary
    framing: int
    #: share of its span this session's checkpoints kept (None: none landed yet)
    fold_ratio: float | None = None
    #: what the span's turns cost so far: each node's tokens x the agent requests made since
    #: its turn ended, in cached-token units (`carrying`)
    held: int = 0
    #: tokens of the span that earlier folds already carried (checkpoints, loose nodes)
    carried: int = 0
    #: tokens of the tail from the first turn whose rewrite is still to land: that landing
    #: re-reads them anyway, and a ready fold commits with it (`BackgroundFolds.commits_now`)
    shared: int = 0


def checkpoint_estimate(facts: FoldFacts) -> int:
    ratio = FOLD_PRIOR if facts.fold_ratio is None else min(1.0, max(0.0, facts.fold_ratio))
    return max(facts.framing, int(ratio * facts.span))


def fold_price(facts: FoldFacts) -> tuple[float, float]:
    """(saving, cost) of folding the span now, in cached-token units."""
    checkpoint = checkpoint_estimate(facts)
    saving = max(0, facts.span - checkpoint) * facts.requests
    cost = (MISS * (facts.span + JOB_TOKENS * facts.segments) + OUTPUT * checkpoint
            + (MISS - 1) * (checkpoint + facts.tail))
    return float(saving), cost


@dataclass(frozen=True)
class FoldVerdict:
    """`fold_price`'s saving and cost, and what spacing the folds weighs (`judge`)."""

    saving: float
    cost: float
    #: what a fold costs however much new history it takes: the cost but reading the
    #: never-folded part of the span, which any later fold would read as well, and re-reading
    #: the tail a turn's landing re-reads anyway
    fixed: float
    #: what carrying the part of the span the checkpoint would drop has cost so far
    held: float

    @property
    def starts(self) -> bool:
        """A background fold starts now: it pays over the horizon, and what it would drop has
        cost, since its turns ended, at least a fold's fixed part."""
        return self.saving >= self.cost and self.held >= self.fixed


def judge(facts: FoldFacts) -> FoldVerdict:
    saving, cost = fold_price(facts)
    fixed = cost - MISS * max(0, facts.span - facts.carried) - (MISS - 1) * min(facts.shared, facts.tail)
    dropped = max(0, facts.span - checkpoint_estimate(facts)) / max(1, facts.span)
    return FoldVerdict(saving, cost, fixed, facts.held * dropped)


def carrying(log: SessionLog, prices: Mapping[int, int], span: Sequence[int]) -> tuple[int, int]:
    """(held, carried) of a span (see `FoldFacts`): its turn nodes' tokens x the agent
    requests made since their turn ended, and its tokens that are not a turn's."""
    index = log.index
    later: dict[int, int] = {}
    steps = 0
    for turn in sorted(index.steps, reverse=True):
        later[turn] = steps
        steps += index.steps[turn]
    held = carried = 0
    for seq in span:
        origin, tokens = index.origins.get(seq), prices.get(seq, 0)
        if origin is not None and origin[0] == "turn":
            held += tokens * later.get(origin[1], 0)
        else:
            carried += tokens
    return held, carried


def shared_tail(log: SessionLog, prices: Mapping[int, int], span: Sequence[int], busy: Collection[int]) -> int:
    """Tokens of the surface after `span` from the first node of a `busy` turn on (0: none)."""
    if not span or not busy:
        return 0
    origins, nodes = log.index.origins, log.nodes
    after = nodes[log.index_of(span[-1]) + 1:]
    for i, seq in enumerate(after):
        origin = origins.get(seq)
        if origin is not None and origin[0] == "turn" and origin[1] in busy:
            return sum(prices.get(s, 0) for s in after[i:])
    return 0


def background_span(log: SessionLog, prices: Mapping[int, int], retain_tokens: int,
                    busy: Collection[int]) -> Selection | None:
    """The span a background fold takes now, or None: the pressure span, cut before the first
    node of a `busy` turn (at a unit boundary, tool pairs balanced); never a lone checkpoint."""
    selection = select_pressure_range(log, dict(prices), retain_tokens)
    if selection is None:
        return None
    origins = log.index.origins
    span = selection.shadowed
    for i, seq in enumerate(span):
        origin = origins.get(seq)
        if origin is not None and origin[0] == "turn" and origin[1] in busy:
            span = span[:i]
            break
    if not span or not log.balanced_after(span[-1]):
        return None
    units = {origins.get(s) for s in span}
    if len(units) == 1 and (unit := units.pop()) is not None and unit[0] == "checkpoint":
        return None  # folding a lone checkpoint into itself gains nothing
    return Selection(list(span))


def segments_of(span_tokens: int, segment_tokens: int) -> int:
    return max(1, math.ceil(span_tokens / segment_tokens))
