"""Runs of consecutive surface nodes that share an origin unit (a turn, a checkpoint, a
loose node). Pure.

Origins come from `host.turn_index` (the one home of node ownership), so unit boundaries are
stable under turn-memory rewrites, which is what range selection needs: both ends of a
compaction range on complete-turn or standalone-checkpoint boundaries, never the open turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from turn_memory.host.turn_index import UnitKey


@dataclass(frozen=True)
class Unit:
    key: UnitKey
    #: indexes into the surface nodes list, [first, last]
    first: int
    last: int

    @property
    def is_turn(self) -> bool:
        return self.key[0] == "turn"


def surface_units(nodes: Sequence[int], origins: dict[int, UnitKey], start: int = 0) -> list[Unit]:
    """Maximal runs of consecutive surface nodes (from index `start`) sharing an origin."""
    units: list[Unit] = []
    for index in range(start, len(nodes)):
        key = origins.get(nodes[index], ("loose", nodes[index]))
        if units and units[-1].key == key:
            units[-1] = Unit(key, units[-1].first, index)
        else:
            units.append(Unit(key, index, index))
    return units
