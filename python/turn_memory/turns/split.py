"""How many workers rewrite one turn, and which part each takes
(docs/decisions.md#a-turn-one-worker-cannot-keep-up-with-is-split-between-workers).

Pure. A worker writes at a speed the session measures (tokens it wrote per second of its run);
when what one turn's rewrite is expected to write takes longer than the session's turns do
(the time between two turn ends), the turn is cut into parts and each part gets a worker of
its own, in parallel; the parts land together, as one turn. Cuts fall only before an
assistant node whose earlier tool calls are all answered, so every part holds whole steps
and each worker's edits stay valid on their own.
"""

from __future__ import annotations

import math
import statistics
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
    cut points), each about an equal share of `sizes` (tokens a worker may rewrite, per position)."""
    points = cut_points(originals)
    parts = max(1, min(parts, len(points) + 1))
    total = sum(sizes)
    before = {i: sum(sizes[:i]) for i in points}  # tokens ahead of each cut
    starts = [0]
    for j in range(1, parts):
        # the cut nearest to j/parts of the turn, after the previous one, leaving one cut per later part
        left = [i for i in points if i > starts[-1]][:len(points) - (parts - 1 - j)]
        if not left:
            break
        starts.append(min(left, key=lambda i: abs(before[i] - total * j / parts)))
    # a part with less than half an equal share (nothing to rewrite, or a short answer after one
    # big result) joins the part before it: its worker's own request would cost more than it saves
    bounds = [*starts, len(sizes)]
    floor = total / parts / 2
    starts = [s for k, s in enumerate(starts) if k == 0 or (total > 0 and sum(list(sizes)[s:bounds[k + 1]]) >= floor)]
    ends = [s - 1 for s in starts[1:]] + [len(originals) - 1]
    return list(zip(starts, ends))


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


def parts_needed(write_tokens: float, speed: float | None, turn_seconds: float | None, cap: int) -> int:
    """Workers one turn needs so that its rewrite is ready within one turn's time: 1 until the
    session measured both how fast its workers write (tokens/s) and how long its turns take,
    and never so many that a part writes less than `MIN_PART_TOKENS`."""
    if not speed or not turn_seconds or speed <= 0 or turn_seconds <= 0:
        return 1
    worth = int(write_tokens // MIN_PART_TOKENS)
    return max(1, min(cap, worth, math.ceil(write_tokens / speed / turn_seconds)))


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
