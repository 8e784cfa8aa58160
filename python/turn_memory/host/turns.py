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

from turn_memory.host.dialect import OUR_PLUGIN, Dialect

#: ("turn", n) | ("checkpoint", seq) | ("loose", seq)
UnitKey = tuple[str, int]

#: turn-memory lands a compressed turn inside a short step numbered 0 of the open turn
#: (the agent loop numbers its own steps from 1); nodes appended there belong to the turn
#: whose replacement opened the landing, not to the open turn
LANDING_STEP = 0


@dataclass(frozen=True)
class Unit:
    key: UnitKey
    #: indexes into the surface nodes list, [first, last]
    first: int
    last: int

    @property
    def is_turn(self) -> bool:
        return self.key[0] == "turn"


@dataclass(frozen=True)
class LifecycleState:
    open_turn: int | None
    #: the latest compaction/start without a matching compaction/end, if any
    unmatched_compaction: dict[str, Any] | None
    latest_end_seed: int | None

    @property
    def compaction_locked(self) -> bool:
        """An unmatched start locks compaction, unless a later restart (end-seed) orphaned it."""
        start = self.unmatched_compaction
        return start is not None and not (self.latest_end_seed is not None and self.latest_end_seed > start["seq"])


def lifecycle_state(events: Sequence[dict[str, Any]]) -> LifecycleState:
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
    """Origin unit of every surface-eligible event, by seq (one pass over the log).

    A landing of an earlier turn inside the open turn appends nodes that belong to the
    landed turn: on rc8 inside the landing step (`LANDING_STEP`); on 0.2 inside the loop's
    own step, right after the replacement that heads it, until the loop commits its own
    first node of the step (system prompt, the turn's user message, runtime context).
    """
    origins: dict[int, UnitKey] = {}
    open_turn: int | None = None
    landing: UnitKey | None = None
    in_landing = False
    window: UnitKey | None = None  # 0.2: the landed turn a run of appended nodes belongs to
    for event in events:
        kind = event["type"]
        if kind == "turn/start":
            open_turn, window = event["data"]["turn"], None
        elif kind == "turn/end":
            open_turn, window = None, None
        elif kind in ("step/start", "step/end"):
            window = None
            if (event.get("data") or {}).get("step") == LANDING_STEP:
                in_landing, landing = kind == "step/start", None
        op = event.get("surfaceOp")
        if op is None:
            continue
        seq = event["seq"]
        if op == "append":
            if in_landing and landing is not None:
                origins[seq] = landing
            elif window is not None and _landed_node(event, dialect):
                origins[seq] = window
            else:
                window = None
                # 0.2's system prompt (surface node 0, committed inside turn 1's step) is no turn's content
                own = open_turn is not None and kind != "system/message"
                origins[seq] = ("turn", open_turn) if own else ("loose", seq)
            continue
        message = event["data"] if kind == "user/message" else (event["data"] or {}).get("message", {})
        bounds = dialect.op_range(op)
        if dialect.is_checkpoint_source(message.get("source")) or bounds is None:
            origins[seq] = ("checkpoint", seq)
            window = None
        else:
            origins[seq] = origins.get(bounds[0], ("loose", seq))
            if in_landing:
                landing = origins[seq]
            elif origins[seq][0] == "turn" and origins[seq][1] != open_turn and open_turn is not None:
                window = origins[seq]
    return origins


def _landed_node(event: dict[str, Any], dialect: Dialect) -> bool:
    """An appended node of a landing: never one the agent loop commits on its own."""
    kind, data = event["type"], event.get("data") or {}
    if kind in ("assistant/message", "tool/result"):
        return True
    if kind == "user/message":  # ours, or a copy (a snapshot the landing restated at the tail)
        return dialect.is_plugin_source(data.get("source"), OUR_PLUGIN) or bool(event.get("sourceEventSeqs"))
    return False


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
