"""How many workers rewrite one turn, and which part each takes
(docs/decisions.md#a-turn-one-worker-cannot-keep-up-with-is-split-between-workers).

Pure. A worker writes at a speed the session measures (tokens it wrote per second of its run);
when what one turn's rewrite is expected to write takes longer than the session's turns do
(the time between two turn ends), the turn is cut into the fewest parts whose biggest one
worker writes in time, and each part gets a worker of its own, in parallel; the parts land
together, as one turn. Cuts fall only before an
assistant node whose earlier tool calls are all answered, so every part holds whole steps
and each worker's edits stay valid on their own.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from turn_memory.turns.nodes import OriginalNode


def cut_points(originals: Sequence[OriginalNode]) -> list[int]:
    """Positions a part may start at: an assistant node after the turn's opening user nodes,
    with every tool call before it answered."""
    points: list[int] = []
    open_calls: set[str] = set()
    for i, node in enumerate(originals):
        if i > 0 and node.role == "assistant" and not open_calls and originals[i - 1].role != "assistant" \
                and any(o.role == "assistant" for o in originals[:i]):
            points.append(i)
        open_calls.update(node.calls)
        if node.result_for is not None:
            open_calls.discard(node.result_for)
    return points


def split(originals: Sequence[OriginalNode], sizes: Sequence[int], parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous ranges of positions [first, last] (fewer where the turn has fewer
    cut points) whose biggest holds as little of `sizes` (tokens a worker may rewrite, per
    position) as the cut points allow: the turn is ready when its slowest part is."""
    points = cut_points(originals)
    parts = max(1, min(parts, len(points) + 1))
    total = sum(sizes)
    starts = _balanced(points, sizes, parts)
    # a part with less than half an equal share (nothing to rewrite, or a short answer after one
    # big result) joins the part before it: its worker's own request would cost more than it saves
    bounds = [*starts, len(sizes)]
    floor = total / parts / 2
    starts = [s for k, s in enumerate(starts) if k == 0 or (total > 0 and sum(list(sizes)[s:bounds[k + 1]]) >= floor)]
    ends = [s - 1 for s in starts[1:]] + [len(originals) - 1]
    return list(zip(starts, ends))


def _balanced(points: Sequence[int], sizes: Sequence[int], parts: int) -> list[int]:
    """The starts of `parts` parts (0 and `parts - 1` of `points`) with the smallest biggest
    part; among those, the most even (least sum of squared sizes)."""
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    starts, end = [0, *points], len(sizes)

    @functools.cache
    def best(i: int, left: int) -> tuple[int, int, tuple[int, ...]]:
        """(biggest, squares, starts) for `left` parts from starts[i] to the end."""
        if left == 1:
            size = prefix[end] - prefix[starts[i]]
            return size, size * size, (starts[i],)
        found: tuple[int, int, tuple[int, ...]] | None = None
        for k in range(i + 1, len(starts) - left + 2):  # the next part's start, leaving one per later part
            size = prefix[starts[k]] - prefix[starts[i]]
            if found is not None and size > found[0]:
                break  # a longer first part only makes the biggest bigger
            biggest, squares, rest = best(k, left - 1)
            option = (max(size, biggest), squares + size * size, (starts[i], *rest))
            found = option if found is None else min(found, option)
        assert found is not None
        return found

    return list(best(0, parts)[2])


@dataclass(frozen=True)
class Budget:
    """A turn too big for one worker in time: each part should hold at most `tokens` of what a
    worker may rewrite (what one worker writes within one of the session's turns, at the
    session's share kept), with at most `most` parts."""
    most: int
    tokens: float


def budget(rewritable: float, share: float, speed: float | None, turn_seconds: float | None, cap: int) -> Budget | None:
    """None while one worker will do: its rewrite (`share` of the turn's `rewritable` tokens)
    is written within one turn's time at `speed` (tokens/s), or the session has not measured
    its speed and pace yet, or parts would write less than `MIN_PART_TOKENS` each."""
    if not speed or not turn_seconds or speed <= 0 or turn_seconds <= 0 or share <= 0:
        return None
    write = share * rewritable
    most = min(cap, int(write // MIN_PART_TOKENS))
    if most < 2 or write / speed <= turn_seconds:
        return None
    return Budget(most, speed * turn_seconds / share)


def plan(originals: Sequence[OriginalNode], sizes: Sequence[int], within: Budget) -> list[tuple[int, int]]:
    """The fewest parts whose biggest fits `within.tokens` (every worker ready within one turn's
    time), or `within.most` parts where none does."""
    # the fewest parts that fit: fill each part up to the budget from the turn's start (a step
    # bigger than the budget alone in its part), then cut that many parts as evenly as the steps allow
    points = cut_points(originals)
    parts, held = 1, 0
    for start, end in zip([0, *points], [*points, len(sizes)]):
        step = sum(sizes[start:end])
        if held and held + step > within.tokens:
            parts, held = parts + 1, 0
        held += step
    return split(originals, sizes, max(2, min(parts, within.most)))


def model_speed(events: Sequence[dict[str, Any]], price: Callable[[int], int | None], recent: int = 20) -> float | None:
    """Tokens per second the session's own model wrote over its `recent` last agent steps (what
    their assistant messages hold, over the time from each step's start): how fast a forked
    worker on the same route writes, before any worker of the session has been measured."""
    answered: dict[tuple[Any, Any], tuple[float, int]] = {}
    tokens = seconds = 0.0
    steps = 0
    for event in reversed(events):  # newest first; a step's start comes before its answer
        if steps >= recent:
            break
        data = event.get("data") or {}
        key, when = (data.get("turn"), data.get("step")), event.get("time")
        if not isinstance(when, (int, float)):
            continue
        if event["type"] == "assistant/message" and event.get("surfaceOp") == "append":
            answered[key] = (when, price(event["seq"]) or 0)
        elif event["type"] == "step/start" and key in answered:
            end, size = answered.pop(key)
            tokens, seconds, steps = tokens + size, seconds + max(0.0, (end - when) / 1000), steps + 1
    return tokens / seconds if steps and seconds > 0 else None


#: each part of a split turn writes at least this many tokens: a worker writing less spends
#: most of its time starting (the host copies the whole conversation into a fork), which
#: another worker does not shorten, and forks started together hold up the agent's own step
#: (bench/soak.py: ~120-token rewrites measured at ~6 tokens/s per worker, split three ways at
#: every turn, held the next turn's first step 1-5 s on 0.2 late in a 300-turn session)
MIN_PART_TOKENS = 500


def turn_duration(events: Sequence[dict[str, Any]], turn: int) -> float | None:
    """Seconds from turn `turn`'s start to its end (the session's pace before two turns ended)."""
    times = {e["type"]: e.get("time") for e in events
             if e["type"] in ("turn/start", "turn/end") and (e.get("data") or {}).get("turn") == turn}
    start, end = times.get("turn/start"), times.get("turn/end")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
        return (end - start) / 1000
    return None


#: the session's pace is the median of this many recent gaps between turn ends
RECENT = 5


def turn_seconds(turn_ends: Sequence[float], recent: int = RECENT) -> float | None:
    """The session's pace: the median time between its recent turn ends (None before two)."""
    gaps = [b - a for a, b in zip(turn_ends, turn_ends[1:])][-recent:]
    return statistics.median(gaps) if gaps else None
