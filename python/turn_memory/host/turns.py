"""Which turn each surface node belongs to, and the session's lifecycle state.

A surface node appended inside `turn/start … turn/end` belongs to that turn. A replacement
belongs to whatever it replaced (the origin of its first shadowed node) — except a session
checkpoint, which is a standalone unit. Turn boundaries are therefore stable under
turn-memory rewrites, which is what range selection needs: both ends of a compaction
range on complete-turn or standalone-checkpoint boundaries, never the open turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from turn_memory.host.dialect import Dialect
from turn_memory.host.turn_index import LANDING_STEP, LifecycleState, OriginFold, UnitKey

__all__ = ["LANDING_STEP", "LifecycleState", "Unit", "UnitKey", "lifecycle_state", "node_origins", "open_step_of",
           "surface_units"]


@dataclass(frozen=True)
class Unit:
    key: UnitKey
    #: indexes into the surface nodes list, [first, last]
    first: int
    last: int

    @property
    def is_turn(self) -> bool:
        return self.key[0] == "turn"


def lifecycle_state(events: Sequence[dict[str, Any]]) -> LifecycleState:
    """The lifecycle state at the end of `events`, scanning back (up to the whole log when
    there is no end-seed); a `SessionLog` keeps it incrementally (`log.index.lifecycle`)."""
    open_turn: int | None = None
    turn_known = compaction_known = False
    unmatched: dict[str, Any] | None = None
    end_seed: int | None = None
    for event in reversed(events):
        kind = event["type"]
        if end_seed is None and kind == "session/end-seed":
            end_seed = event["seq"]
        if not compaction_known and kind in ("compaction/start", "compaction/end"):
            compaction_known = True
            unmatched = event if kind == "compaction/start" else None
        if not turn_known and kind in ("turn/start", "turn/end"):
            turn_known = True
            open_turn = event["data"]["turn"] if kind == "turn/start" else None
        if turn_known and compaction_known and end_seed is not None:
            break
    return LifecycleState(open_turn, unmatched, end_seed)


def open_step_of(events: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    """(turn, step) of the step open at the end of the log, if any."""
    for event in reversed(events):
        kind = event["type"]
        if kind in ("step/end", "turn/end", "turn/start"):
            return None
        if kind == "step/start":
            return event["data"]["turn"], event["data"]["step"]
    return None


def node_origins(events: Sequence[dict[str, Any]], dialect: Dialect) -> dict[int, UnitKey]:
    """Origin unit of every surface-eligible event, by seq (one pass over the log); a
    `SessionLog` keeps the same map incrementally (`log.index.origins`)."""
    fold = OriginFold(dialect)
    for event in events:
        fold.feed(event)
    return fold.origins


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
