"""Split a selected surface span into segments of complete units within a token budget.

A unit (a complete turn, a standalone checkpoint, a loose node) is never split; a unit
larger than the budget is a segment of its own. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from turn_memory.host.units import Unit


@dataclass(frozen=True)
class Segment:
    index: int  # 1-based
    #: surface seqs of the segment's source nodes, in order
    seqs: tuple[int, ...]
    tokens: int
    #: turn numbers the segment covers (empty for checkpoints / loose nodes only)
    turns: tuple[int, ...]

    @property
    def id(self) -> str:
        return f"S{self.index}"


def split_segments(nodes: Sequence[int], units: Sequence[Unit], tokens: dict[int, int], budget: int) -> list[Segment]:
    segments: list[Segment] = []
    seqs: list[int] = []
    turns: list[int] = []
    total = 0

    def close() -> None:
        nonlocal seqs, turns, total
        if seqs:
            segments.append(Segment(len(segments) + 1, tuple(seqs), total, tuple(turns)))
        seqs, turns, total = [], [], 0

    for unit in units:
        unit_seqs = list(nodes[unit.first:unit.last + 1])
        unit_tokens = sum(tokens.get(s, 0) for s in unit_seqs)
        if seqs and total + unit_tokens > budget:
            close()
        seqs += unit_seqs
        total += unit_tokens
        if unit.is_turn:
            turns.append(unit.key[1])
    close()
    return segments
