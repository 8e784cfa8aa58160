"""When session compaction runs, and over which span (design D-005). Pure.

Pressure: the session's measured tokens against the routed model's context window; the
default trigger is 80%. The span runs from the first content node to a retained tail of at
least 16% of the window, both ends on unit boundaries (complete turns or standalone
checkpoints), tool pairs balanced, never the open turn. Context overflow ignores the
threshold and keeps only the open turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from turn_memory.compaction.selection import Selection, first_content_index
from turn_memory.host.surface import SessionLog
from turn_memory.host.units import Unit, surface_units


@dataclass(frozen=True)
class Pressure:
    tokens: int
    window: int
    threshold_ratio: float

    @property
    def threshold(self) -> int:
        return int(self.window * self.threshold_ratio)

    @property
    def over(self) -> bool:
        return self.tokens >= self.threshold


def compactable_units(log: SessionLog) -> tuple[list[Unit], list[Unit]]:
    """(closed units in surface order, units of the open turn)."""
    open_turn = log.index.open_turn
    units = surface_units(log.nodes, log.index.origins, first_content_index(log))
    open_units = [u for u in units if open_turn is not None and u.key == ("turn", open_turn)]
    return [u for u in units if u not in open_units], open_units


def select_pressure_range(log: SessionLog, node_tokens: dict[int, int], retain_tokens: int) -> Selection | None:
    """The oldest span to fold, keeping a tail of at least `retain_tokens` (0: only the open turn)."""
    closed, open_units = compactable_units(log)
    nodes = log.nodes
    tail = sum(node_tokens.get(nodes[i], 0) for u in open_units for i in range(u.first, u.last + 1))
    cut = len(closed)  # units [cut:] are retained
    while cut > 0 and tail < retain_tokens:
        cut -= 1
        unit = closed[cut]
        tail += sum(node_tokens.get(nodes[i], 0) for i in range(unit.first, unit.last + 1))
    while cut > 0:
        first, last = closed[0].first, closed[cut - 1].last
        if log.balanced_before(nodes[first]) and log.balanced_after(nodes[last]):
            span = list(nodes[first:last + 1])
            if cut == 1 and closed[0].key[0] == "checkpoint":
                return None  # folding a lone checkpoint into itself gains nothing
            return Selection(span)
        cut -= 1
    return None
