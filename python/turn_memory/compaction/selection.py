"""Choose the surface span a manual compaction folds into one checkpoint.

From the first non-system node up to a retained tail of complete turns; both ends on unit
boundaries (complete turns or standalone checkpoints), tool pairs balanced on both sides,
never the open turn. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from turn_memory.host.surface import SessionLog
from turn_memory.host.units import surface_units
from turn_memory.runtime.interfaces import ReadyTurn


@dataclass(frozen=True)
class Selection:
    shadowed: list[int]

    @property
    def start(self) -> int:
        return self.shadowed[0]

    @property
    def end(self) -> int:
        return self.shadowed[-1]


def first_content_index(log: SessionLog) -> int:
    """Skip a protected system head (v02 node 0 may only be replaced by a system/message)."""
    nodes = log.nodes
    if log.dialect.protects_system_head and nodes and log.events[nodes[0]]["type"] == "system/message":
        return 1
    return 0


def select_manual_range(log: SessionLog, retain_turns: int) -> Selection | None:
    nodes = log.nodes
    state = log.index.lifecycle
    units = surface_units(nodes, log.index.origins, first_content_index(log))
    if state.open_turn is not None:
        units = [u for u in units if u.key != ("turn", state.open_turn)]
    turn_units = [i for i, u in enumerate(units) if u.is_turn]
    # keep the last `retain_turns` complete turns, but always fold at least one turn
    retain = min(retain_turns, max(0, len(turn_units) - 1))
    end_unit = (turn_units[-retain] - 1) if retain else len(units) - 1
    while end_unit >= 0:
        first, last = units[0].first, units[end_unit].last
        if log.balanced_before(nodes[first]) and log.balanced_after(nodes[last]):
            span = nodes[first:last + 1]
            if not (len(span) == 1 and units[0].key[0] == "checkpoint"):
                return Selection(list(span))
            return None
        end_unit -= 1
    return None


def compressed_view(ready: Mapping[int, ReadyTurn] | None) -> tuple[dict[int, list[tuple[str, str]]], set[int]]:
    """Where a checkpoint reads ready turns in their compressed form: (first seq of each such
    turn -> its compressed nodes, the turn's other seqs, which are read as part of that)."""
    turns = (ready or {}).values()
    return {positions[0]: nodes for positions, nodes in turns}, {seq for positions, _ in turns for seq in positions[1:]}
