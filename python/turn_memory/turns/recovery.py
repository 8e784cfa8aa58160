"""What a completed turn's durable state says about it (design D-008, D-015). Pure.

- Turns with a `pending` marker and no `compression` marker anywhere in the log were cut
  off between turn/end and landing: redo them.
- A `compression` marker whose turn still shows raw reasoning on the surface is a stale
  no-op from a reasoning-unaware version: redo it too.
- A turn that ended with a hand-off still awaiting its automatic continuation (D-013) is
  redone when it has not landed: the follow-up waits for that landing.
- Marker-free turns are never backfilled: they predate the plugin (or were never ours) —
  except turns that ended after the shim began watching the session in this process
  (`live_from`): the plugin saw them end while its engine was still starting or restarting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from turn_memory.continuation.state import awaiting_followup
from turn_memory.host.surface import SessionLog
from turn_memory.host.turns import node_origins
from turn_memory.turns.markers import marker_of


@dataclass(frozen=True)
class TurnMarks:
    completed: set[int]
    pending: set[int]
    landed: set[int]


def scan_marks(events: Sequence[dict[str, Any]]) -> TurnMarks:
    completed, pending, landed = set(), set(), set()
    for event in events:
        if event["type"] == "turn/end":
            completed.add(event["data"]["turn"])
        elif (mark := marker_of(event)) is not None:
            (pending if mark[0] == "pending" else landed).add(mark[1])
    return TurnMarks(completed, pending, landed)


#: the nodes a turn consists of; v02's system/developer messages are host scaffolding the
#: loop writes inside a step (turn 1 opens with the system prompt, surface node 0, which only
#: a system/message may replace), never part of what a turn said
TURN_NODE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})


def turn_nodes(log: SessionLog, turn: int) -> list[int]:
    """The current surface nodes of `turn`, in order (empty when shadowed by a checkpoint)."""
    origins = node_origins(log.events, log.dialect)
    return [seq for seq in log.nodes
            if origins.get(seq) == ("turn", turn) and log.events[seq]["type"] in TURN_NODE_TYPES]


def _has_raw_reasoning(log: SessionLog, seqs: list[int]) -> bool:
    for seq in seqs:
        event = log.events[seq]
        if event["type"] == "assistant/message":
            if any(b.get("type") == "reasoning" for b in event["data"]["message"].get("content", [])):
                return True
    return False


def turns_to_recover(log: SessionLog, live_from: int | None = None) -> list[int]:
    marks = scan_marks(log.events)
    redo = {t for t in marks.pending - marks.landed if t in marks.completed}
    if live_from is not None:
        for event in log.events[live_from:]:
            if event["type"] == "turn/end" and event["data"]["turn"] not in marks.landed:
                redo.add(event["data"]["turn"])
    redo.update(r.turn for r in awaiting_followup(log.events) if r.turn not in marks.landed)
    for turn in marks.landed & marks.completed:
        if _has_raw_reasoning(log, turn_nodes(log, turn)):
            redo.add(turn)
    return sorted(redo)
