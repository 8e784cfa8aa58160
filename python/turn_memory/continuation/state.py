"""What the append-only log says about long-turn continuation. Pure.

- The open turn's work is counted in its append-origin model-visible nodes still on the
  surface; runtime-context snapshots, checkpoints and turn-memory landings are not work.
- The highest milestone already shown in the open turn is read back from the host's
  durable runtime-context snapshots, which keep each named section's text.
- Continuation requests and their follow-ups are folded by `host.continuations`.
"""

from __future__ import annotations

from typing import Any, Callable

from turn_memory.host.dialect import is_runtime_context
from turn_memory.host.markers import event_source, marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.host.turn_index import LANDING_STEP

#: the named runtime-context section that shows the reminder
SECTION = "turn-memory:continuation"
_NODE_TYPES = ("user/message", "assistant/message", "tool/result")

Event = dict[str, Any]


def is_snapshot(event: Event) -> bool:
    return event["type"] == "user/message" and is_runtime_context(event_source(event))


def open_turn_nodes(log: SessionLog, turn: int) -> list[int]:
    """Seqs of the open turn's own work on the surface, in order."""
    events = log.events
    start = log.index.turn_starts.get(turn)
    if start is None:
        return []
    seqs: list[int] = []
    in_landing = False
    for event in events[start + 1:]:
        kind = event["type"]
        if kind in ("step/start", "step/end") and (event.get("data") or {}).get("step") == LANDING_STEP:
            # a landing step carries an earlier turn's compressed nodes, not this turn's work
            in_landing = kind == "step/start"
            continue
        if kind not in _NODE_TYPES or event.get("surfaceOp") != "append" or in_landing:
            continue
        if is_snapshot(event) or marker_of(event) is not None or not log.on_surface(event["seq"]):
            continue
        seqs.append(event["seq"])
    return seqs


def milestone(count: int, interval: int) -> int:
    return count // interval * interval


def shown_milestone(log: SessionLog, turn: int, interval: int, parse: Callable[[str], int | None]) -> int:
    """The highest milestone the durable snapshots of `turn` showed (0 = none).

    `parse` reads the milestone back from the section text; when it cannot (the prompt
    changed since), the milestone the turn's count had reached at that snapshot stands in.
    """
    events = log.events
    start = log.index.turn_starts.get(turn)
    if start is None:
        return 0
    shown = 0
    nodes: list[int] | None = None
    for event in events[start + 1:]:
        if not is_snapshot(event):
            continue
        for section in event_source(event).get("sections") or []:
            if not isinstance(section, dict) or section.get("name") != SECTION:
                continue
            value = parse(str(section.get("text", "")))
            if value is None:
                nodes = open_turn_nodes(log, turn) if nodes is None else nodes
                value = milestone(sum(1 for s in nodes if s < event["seq"]), interval)
            shown = max(shown, value)
    return shown


