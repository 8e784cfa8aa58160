"""Continuation requests and their follow-ups in a log, folded event by event. Pure.

A continuation request is a successful `continue_after_turn_compression` tool/call +
tool/result pair (its id is the call id) or, in Code Mode, a successful
`tool/code-dispatch` (0.2.x `tool/ptc-dispatch`) of the tool (its id is the sub-call id); a
follow-up is delivered once the log holds an inbox insertion or a user/message whose source
names that request. The mirror keeps one ledger per session as the log grows, beside the
log's turn index; recovery and the continuation feature read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from turn_memory.host.markers import CONTINUATION_KEY, event_source, is_own_source

TOOL = "continue_after_turn_compression"

Event = dict[str, Any]


@dataclass(frozen=True)
class ContinuationRequest:
    #: the tool call id: names the request in the follow-up's source
    id: str
    turn: int
    #: the tool's `handoff` argument: the model's note on what the follow-up turn is to do
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


class ContinuationLedger:
    """A log's continuation requests and follow-ups, folded event by event (a mirrored session
    keeps one as it grows, so a `turn/end` or a resync never rescans the log):

    - `requests`: the authoritative request of each turn, its last successful call of the tool;
    - `delivered`: request ids whose follow-up reached the agent's inbox or its history;
    - `queued`: request id -> the follow-up message id of an inbox insertion naming it, and
      `claimed`: request ids whose follow-up is a user/message in the log already.
    """

    def __init__(self) -> None:
        self.requests: dict[int, ContinuationRequest] = {}
        self.delivered: set[str] = set()
        self.queued: dict[str, str] = {}
        self.claimed: set[str] = set()
        self.completed: set[int] = set()
        self.latest = 0
        self._calls: dict[str, Event] = {}
        self._turn: int | None = None

    @classmethod
    def of(cls, events: Sequence[Event]) -> "ContinuationLedger":
        ledger = cls()
        for event in events:
            ledger.feed(event)
        return ledger

    def feed(self, event: Event) -> None:
        kind = event["type"]
        if kind == "turn/start":
            self._turn = event["data"]["turn"]
            self.latest = max(self.latest, self._turn)
        elif kind == "turn/end":
            self.completed.add(event["data"]["turn"])
        elif kind in ("tool/code-dispatch", "tool/ptc-dispatch"):
            # a Code Mode sub-call (0.2.x: a PTC dispatch, same fields) records no turn of its
            # own: it settles inside the open one
            data = event.get("data") or {}
            handoff = handoff_of(data.get("arguments"))
            if data.get("name") == TOOL and data.get("isError") is False and handoff and self._turn is not None:
                self.requests[self._turn] = ContinuationRequest(str(data.get("subCallId")), self._turn, handoff)
        elif kind == "tool/call":
            if (event.get("data") or {}).get("name") == TOOL:
                self._calls[event["data"]["callId"]] = event
        elif kind == "tool/result":
            if self._calls:
                call = self._calls.pop(str(event_source(event).get("callId")), None)
                if call is None or _is_error(event):
                    return
                handoff = handoff_of(call["data"].get("arguments"))
                if handoff:  # the tool refuses an empty note; a success always has one
                    turn = call["data"]["turn"]
                    self.requests[turn] = ContinuationRequest(call["data"]["callId"], turn, handoff)
        elif kind == "agent/inbox/spliced":
            for message in (event.get("data") or {}).get("inserted") or []:
                if (rid := _names_request((message or {}).get("source"))) is not None:
                    self.delivered.add(rid)
                    if isinstance((message or {}).get("id"), str):
                        self.queued[rid] = message["id"]
        elif kind == "user/message":
            if (rid := _names_request(event_source(event))) is not None:
                self.delivered.add(rid)
                self.claimed.add(rid)

    def awaiting(self) -> list[ContinuationRequest]:
        """Requests whose turn completed, that are still the latest turn, with no follow-up yet.

        A later turn (a human message that arrived first) supersedes the request: the agent
        is already working again, so no automatic turn is queued behind it.
        """
        return [r for t, r in sorted(self.requests.items())
                if t in self.completed and t == self.latest and r.id not in self.delivered]

    def in_flight(self) -> dict[str, str]:
        """Follow-up message id -> request id, for follow-ups queued but not in the history yet."""
        return {message: rid for rid, message in self.queued.items() if rid not in self.claimed}


def _names_request(source: Any) -> str | None:
    if is_own_source(source):
        value = source.get(CONTINUATION_KEY)
        return value if isinstance(value, str) else None
    return None


def awaiting_followup(events: Sequence[Event]) -> list[ContinuationRequest]:
    """Requests whose turn completed, that are still the latest turn, with no follow-up yet
    (a full pass; a mirrored session keeps the same answer in its `ContinuationLedger`)."""
    return ContinuationLedger.of(events).awaiting()
