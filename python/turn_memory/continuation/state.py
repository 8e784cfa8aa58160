"""What the append-only log says about long-turn hand-offs (design D-013). Pure.

- The open turn's work is counted in its append-origin model-visible nodes still on the
  surface; runtime-context snapshots, checkpoints and turn-memory landings are not work.
- The highest milestone already shown in the open turn is read back from the host's
  durable runtime-context snapshots, which keep each named section's text.
- A continuation request is a successful `continue_after_turn_compression` tool/call +
  tool/result pair (its id is the call id) or, in Code Mode, a successful
  `tool/code-dispatch` (0.2.x `tool/ptc-dispatch`) of the tool (its id is the sub-call id); a
  follow-up is delivered once
  the log holds an inbox insertion or a user/message whose source names that request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from turn_memory.host.dialect import is_runtime_context
from turn_memory.host.surface import SessionLog
from turn_memory.host.turns import LANDING_STEP
from turn_memory.turns.markers import CONTINUATION, is_own_source, marker_of

TOOL = "continue_after_turn_compression"
#: the named runtime-context section that shows the reminder
SECTION = "turn-memory:continuation"
#: the key of a follow-up's message source that names its request
SOURCE_KEY = CONTINUATION
_NODE_TYPES = ("user/message", "assistant/message", "tool/result")

Event = dict[str, Any]


def _source(event: Event) -> dict[str, Any]:
    data = event.get("data") or {}
    message = data if event["type"] == "user/message" else data.get("message") or {}
    source = message.get("source")
    return source if isinstance(source, dict) else {}


def is_snapshot(event: Event) -> bool:
    return event["type"] == "user/message" and is_runtime_context(_source(event))


def turn_start_index(events: Sequence[Event], turn: int) -> int | None:
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event["type"] == "turn/start" and event["data"]["turn"] == turn:
            return index
    return None


def open_turn_nodes(log: SessionLog, turn: int) -> list[int]:
    """Seqs of the open turn's own work on the surface, in order."""
    events = log.events
    start = turn_start_index(events, turn)
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
    start = turn_start_index(events, turn)
    if start is None:
        return 0
    shown = 0
    nodes: list[int] | None = None
    for event in events[start + 1:]:
        if not is_snapshot(event):
            continue
        for section in _source(event).get("sections") or []:
            if not isinstance(section, dict) or section.get("name") != SECTION:
                continue
            value = parse(str(section.get("text", "")))
            if value is None:
                nodes = open_turn_nodes(log, turn) if nodes is None else nodes
                value = milestone(sum(1 for s in nodes if s < event["seq"]), interval)
            shown = max(shown, value)
    return shown


# -- continuation requests ---------------------------------------------------------------
@dataclass(frozen=True)
class ContinuationRequest:
    #: the tool call id: names the request in the follow-up's source
    id: str
    turn: int
    handoff: str


def handoff_of(arguments: Any) -> str:
    """The `handoff` argument as the model sent it (a JSON string or an object); '' if absent."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ""
    value = arguments.get("handoff") if isinstance(arguments, dict) else None
    return value.strip() if isinstance(value, str) else ""


def _is_error(event: Event) -> bool:
    """Both hosts: rc8 flags the tool-result block, 0.2.x the first-class message."""
    data = event.get("data") or {}
    if data.get("error") is not None:
        return True
    message = data.get("message") or {}
    if message.get("isError") is True:
        return True
    return any(isinstance(b, dict) and b.get("isError") for b in message.get("content") or [])


def requests(events: Sequence[Event]) -> dict[int, ContinuationRequest]:
    """The authoritative request of each turn: its last successful hand-off call."""
    calls: dict[str, Event] = {}
    out: dict[int, ContinuationRequest] = {}
    turn: int | None = None
    for event in events:
        kind = event["type"]
        if kind == "turn/start":
            turn = event["data"]["turn"]
        elif kind in ("tool/code-dispatch", "tool/ptc-dispatch"):
            # a Code Mode sub-call (0.2.x: a PTC dispatch, same fields) records no turn of its
            # own: it settles inside the open one
            data = event.get("data") or {}
            handoff = handoff_of(data.get("arguments"))
            if data.get("name") == TOOL and data.get("isError") is False and handoff and turn is not None:
                out[turn] = ContinuationRequest(str(data.get("subCallId")), turn, handoff)
        elif kind == "tool/call" and (event.get("data") or {}).get("name") == TOOL:
            calls[event["data"]["callId"]] = event
        elif kind == "tool/result":
            call = calls.pop(str(_source(event).get("callId")), None)
            if call is None or _is_error(event):
                continue
            handoff = handoff_of(call["data"].get("arguments"))
            if handoff:  # the tool refuses an empty hand-off; a success always has one
                turn = call["data"]["turn"]
                out[turn] = ContinuationRequest(call["data"]["callId"], turn, handoff)
    return out


def _names_request(source: Any) -> str | None:
    if is_own_source(source):
        value = source.get(SOURCE_KEY)
        return value if isinstance(value, str) else None
    return None


def delivered(events: Sequence[Event]) -> set[str]:
    """Request ids whose follow-up reached the agent's inbox or its history."""
    out: set[str] = set()
    for event in events:
        if event["type"] == "agent/inbox/spliced":
            for message in (event.get("data") or {}).get("inserted") or []:
                if (rid := _names_request((message or {}).get("source"))) is not None:
                    out.add(rid)
        elif event["type"] == "user/message":
            if (rid := _names_request(_source(event))) is not None:
                out.add(rid)
    return out


def awaiting_followup(events: Sequence[Event]) -> list[ContinuationRequest]:
    """Requests whose turn completed, that are still the latest turn, with no follow-up yet.

    A later turn (a human message that arrived first) supersedes the hand-off: the agent is
    already working again, so no automatic turn is queued behind it.
    """
    completed: set[int] = set()
    latest = 0
    for event in events:
        if event["type"] == "turn/end":
            completed.add(event["data"]["turn"])
        elif event["type"] == "turn/start":
            latest = max(latest, event["data"]["turn"])
    done = delivered(events)
    return [r for t, r in sorted(requests(events).items())
            if t in completed and t == latest and r.id not in done]
