"""The v02 reload-time lifecycle rules: turns, steps, tool calls and compactions.

DSH 0.2.1-rc.2 refuses to load a session whose log breaks these relationships
(`@deepseek-ai/dsh-session-format-v3-to-v4/lib/index.js`, relationships.js `Relationships`,
run by the JSONL reader after every row is admitted). Live `session.append` checks none of
them, so a plan that breaks one is accepted, works until the process exits, and then
the session can never be opened again. This is an incremental mirror of the rules a plan
(or a host event after it) can break; the rest (llm/retry chains, PTC dispatch, titles,
commands, delivery markers) concerns events only the host writes and is left out.

Pure: `accept` folds one event and returns the first broken rule, or None.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from turn_memory.host.json_values import is_seq
from turn_memory.host.violation import Violation

#: events that belong to an open step (Relationships STEP_EVENT_TYPES)
_STEP_EVENTS = frozenset({"system/message", "developer/message", "assistant/attempt"})
#: event types whose relationships are checked (RELATIONSHIP_TYPES, minus ones ignored here)
_CHECKED = frozenset({
    "system/message", "user/message", "developer/message", "assistant/message", "tool/result", "assistant/attempt",
    "turn/start", "turn/end", "step/start", "step/end", "tool/call", "request/header", "request/context",
    "compaction/start", "compaction/summary", "compaction/end", "compaction/prune", "session/end-seed",
})
_NOT_STARTED_TEXT = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."


class SurfaceView(Protocol):
    def index(self, seq: int) -> int | None: ...
    def span(self, start_idx: int, end_idx: int) -> list[int]: ...


@dataclass
class Lifecycle:
    turn: int | None = None
    step: int | None = None
    next_turn: int = 1
    next_step: int = 1
    #: advertised tool calls of the open step: id -> [name, arguments, started]
    tools: dict[str, list[Any]] = field(default_factory=dict)
    #: the open compaction: {id, command, turn, seq, summarized}
    compaction: dict[str, Any] | None = None
    #: the system/message that holds surface node 0, once one did
    protected_head: int | None = None

    def copy(self) -> "Lifecycle":
        return copy.deepcopy(self)

    # -- helpers ------------------------------------------------------------------------
    def _step_mismatch(self, etype: str, data: dict[str, Any]) -> Violation | None:
        if self.turn is None or self.step is None or data.get("turn") != self.turn or data.get("step") != self.step:
            where = "no step is open" if self.step is None else f"turn {self.turn} step {self.step} is open"
            return Violation("lifecycle-step", f"{etype} (turn {data.get('turn')} step {data.get('step')}) does not "
                                               f"match an open turn and step ({where})")
        return None

    def _no_turn(self, etype: str) -> Violation | None:
        return None if self.turn is not None else Violation("lifecycle-turn", f"{etype} is outside an open turn")

    def _unresolved(self, etype: str) -> Violation | None:
        if self.tools:
            call = next(iter(self.tools))
            self.tools.clear()
            return Violation("lifecycle-tool-unanswered", f"{etype} leaves unresolved tool call {call}")
        return None

    # -- the fold -----------------------------------------------------------------------
    def accept(self, event: dict[str, Any], surface: SurfaceView, known: Callable[[str], bool],
               transition: tuple[str, tuple[int, ...], int] | None) -> Violation | None:
        """Fold one event (already folded into `surface` as `transition`: (kind, shadowed,
        surface length before)) and return the first rule it breaks."""
        etype = event.get("type")
        if not isinstance(etype, str) or not known(etype) or etype not in _CHECKED:
            return None
        data = event.get("data")
        if not isinstance(data, dict):
            return Violation("lifecycle-data", f"{etype} data must be an object")
        if etype in _STEP_EVENTS and (found := self._step_mismatch(etype, data)) is not None:
            return found
        if etype.startswith("turn/") and self.compaction is not None:
            return Violation("lifecycle-compaction", f"{etype} crosses an open compaction (seq {self.compaction['seq']})")
        if (found := self._surface(event, transition)) is not None:
            return found
        handler = _HANDLERS.get(etype)
        return handler(self, event, data, surface) if handler is not None else None

    def _surface(self, event: dict[str, Any], transition: tuple[str, tuple[int, ...], int] | None) -> Violation | None:
        if transition is None:
            return None
        kind, shadowed, length_before = transition
        system = event.get("type") == "system/message"
        if system and length_before > 0 and self.protected_head is None:
            return Violation("system-head", "system/message requires a protected first surface head")
        if kind == "append":
            if system and length_before == 0:
                self.protected_head = event["seq"]
            return None
        if self.protected_head is not None and self.protected_head in shadowed:
            if not system or len(shadowed) != 1:
                return Violation("system-head", "surface replacement cannot shadow the protected system head")
            self.protected_head = event["seq"]
        return None

    # -- turns and steps ----------------------------------------------------------------
    def _turn_start(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if self.turn is not None or data.get("turn") != self.next_turn:
            return Violation("lifecycle-turn", f"turn/start {data.get('turn')} does not open the expected turn {self.next_turn}")
        self.turn, self.next_step = self.next_turn, 1
        self.tools.clear()
        return None

    def _turn_end(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if self.turn is None or data.get("turn") != self.turn or self.step is not None:
            return Violation("lifecycle-turn", "turn/end does not match the open turn with no open step")
        found = self._unresolved("turn/end")
        self.turn = None
        self.next_turn += 1
        return found

    def _step_start(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if self.turn is None or data.get("turn") != self.turn or self.step is not None or data.get("step") != self.next_step:
            return Violation("lifecycle-step-number", f"step/start (turn {data.get('turn')} step {data.get('step')}) does "
                                                      f"not open the next step (turn {self.turn} step {self.next_step}); "
                                                      "the agent loop numbers steps 1, 2, … itself")
        self.step = self.next_step
        return None

    def _step_end(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if (found := self._step_mismatch("step/end", data)) is not None:
            return found
        found = self._unresolved("step/end")
        self.step = None
        self.next_step += 1
        return found

    def _request_header(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        return self._no_turn("request/header")

    def _request_context(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        return self._no_turn("request/context")

    # -- tool calls ---------------------------------------------------------------------
    def _assistant_message(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if (found := self._step_mismatch("assistant/message", data)) is not None:
            return found
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return Violation("lifecycle-data", "assistant message content requires an array")
        for block in content:
            if not isinstance(block, dict):
                return Violation("lifecycle-data", "assistant content block requires an object")
            if block.get("type") != "tool-call":
                continue
            call = block.get("id")
            if not isinstance(call, str) or not call:
                return Violation("lifecycle-data", "tool call id requires a nonempty string")
            if call in self.tools:
                return Violation("lifecycle-tool-repeat", f"assistant/message repeats advertised tool call {call}")
            self.tools[call] = [block.get("name"), block.get("arguments"), False]
        return None

    def _tool_call(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if (found := self._step_mismatch("tool/call", data)) is not None:
            return found
        call = data.get("callId")
        pending = self.tools.get(call) if isinstance(call, str) else None
        if pending is None:
            return Violation("lifecycle-tool-orphan", f"tool/call {call} has no advertised tool lifecycle in this step")
        if pending[2] or pending[0] != data.get("name") or pending[1] != data.get("arguments"):
            return Violation("lifecycle-tool-call", f"tool/call {call} does not match one advertised tool call")
        pending[2] = True
        return None

    def _tool_result(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if event.get("surfaceOp") != "append":  # a rewrite of an earlier result only needs a turn
            return self._no_turn("tool/result replacement")
        if (found := self._step_mismatch("tool/result", data)) is not None:
            return found
        message = data.get("message")
        call = message.get("toolCallId") if isinstance(message, dict) else None
        if not isinstance(call, str) or (pending := self.tools.get(call)) is None:
            return Violation("lifecycle-tool-orphan", f"tool/result {call} has no advertised tool call in this step")
        if not pending[2] and not _not_started_repair(event, data, message, call):
            return Violation("lifecycle-tool-not-started", f"tool/result {call} has no tool/call before it (and is not "
                                                           "the exact TOOL_NOT_STARTED repair)")
        del self.tools[call]
        return None

    # -- compaction ---------------------------------------------------------------------
    def _span(self, etype: str, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        rng, seqs = data.get("shadowedRange"), data.get("shadowedSeqs")
        bad = Violation("lifecycle-compaction-span", f"{etype} shadowedSeqs do not name an exact current surface span")
        if not isinstance(rng, dict) or not isinstance(seqs, list):
            return bad
        start, end = rng.get("start"), rng.get("end")
        if not (isinstance(start, int) and isinstance(end, int) and is_seq(start) and is_seq(end)
                and start < event["seq"] and end < event["seq"]):
            return bad
        i, j = surface.index(start), surface.index(end)
        if i is None or j is None or j < i or surface.span(i, j) != seqs:
            return bad
        if self.protected_head is not None and self.protected_head in seqs:
            return Violation("system-head", "compaction cannot shadow the protected system head")
        return None

    def _owner(self, subject: str, data: dict[str, Any]) -> dict[str, Any] | Violation:
        current = self.compaction
        if current is None or current["id"] != data.get("compactionId") or current["command"] != data.get("sourceCommandId"):
            return Violation("lifecycle-compaction", f"{subject} has no matching compaction/start")
        return current

    def _compaction_start(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if self.compaction is not None:
            return Violation("lifecycle-compaction", "compaction/start overlaps an open compaction")
        owner = data.get("turn", "missing")
        if not (owner is None or is_seq(owner)) or owner != self.turn:
            return Violation("lifecycle-compaction", f"compaction/start turn {owner!r} does not match the open turn {self.turn!r}")
        cid = data.get("compactionId")
        if not isinstance(cid, str) or not cid:
            return Violation("lifecycle-compaction", "compactionId requires a nonempty string")
        self.compaction = {"id": cid, "command": data.get("sourceCommandId"), "turn": owner, "seq": event["seq"],
                           "summarized": False}
        return None

    def _compaction_summary(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        if (found := self._span("compaction/summary", event, data, surface)) is not None:
            return found
        current = self._owner("compaction/summary", data)
        if isinstance(current, Violation):
            return current
        if current["turn"] != self.turn:
            return Violation("lifecycle-compaction", "compaction/summary does not match the open turn")
        if current["summarized"]:
            return Violation("lifecycle-compaction", "compaction/summary repeats")
        current["summarized"] = True
        return None

    def _compaction_end(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        current = self._owner("compaction/end", data)
        if isinstance(current, Violation):
            return current
        if current["turn"] != self.turn or data.get("turn") != current["turn"]:
            return Violation("lifecycle-compaction", "compaction/end does not match the open turn or changes its owner")
        if data.get("error") is None and not current["summarized"]:
            return Violation("lifecycle-compaction", "successful compaction/end requires one compaction/summary")
        self.compaction = None
        return None

    def _compaction_prune(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        return self._span("compaction/prune", event, data, surface)

    def _user_message(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        source = data.get("source")
        if not isinstance(source, dict):
            return Violation("message-source", "user message source requires an object")
        if event.get("surfaceOp") != "append" and source.get("kind") == "compact-checkpoint":
            found = self._owner("compaction checkpoint", source)
            return found if isinstance(found, Violation) else None
        return None

    def _session_end_seed(self, event: dict[str, Any], data: dict[str, Any], surface: SurfaceView) -> Violation | None:
        self.compaction = None
        return None


#: the per-type checks `fold` runs after the common ones (a type without one has none)
_Handler = Callable[[Lifecycle, dict[str, Any], dict[str, Any], SurfaceView], "Violation | None"]
_HANDLERS: dict[str, _Handler] = {
    "turn/start": Lifecycle._turn_start,
    "turn/end": Lifecycle._turn_end,
    "step/start": Lifecycle._step_start,
    "step/end": Lifecycle._step_end,
    "request/header": Lifecycle._request_header,
    "request/context": Lifecycle._request_context,
    "assistant/message": Lifecycle._assistant_message,
    "tool/call": Lifecycle._tool_call,
    "tool/result": Lifecycle._tool_result,
    "compaction/start": Lifecycle._compaction_start,
    "compaction/summary": Lifecycle._compaction_summary,
    "compaction/end": Lifecycle._compaction_end,
    "compaction/prune": Lifecycle._compaction_prune,
    "user/message": Lifecycle._user_message,
    "session/end-seed": Lifecycle._session_end_seed,
}


def _not_started_repair(event: dict[str, Any], data: dict[str, Any], message: Any, call: str) -> bool:
    """The host's own synthetic result for a call that never started (repair.js / fork.js)."""
    error = data.get("error")
    if not (isinstance(error, dict) and error.get("name") == "ToolNotStartedError" and error.get("code") == "TOOL_NOT_STARTED"
            and isinstance(message, dict) and message.get("isError") is True and "sourceEventSeqs" not in event):
        return False
    mid = message.get("id")
    if not isinstance(mid, str):
        return False
    if mid.startswith(f"forked-tool-result-{call}-"):
        return True
    prefix = f"interrupted-tool-result-{call}-"
    content = message.get("content")
    block = content[0] if isinstance(content, list) and len(content) == 1 else None
    return (mid.startswith(prefix) and mid[len(prefix):].isdigit() and isinstance(block, dict)
            and block.get("type") == "text" and block.get("text") == _NOT_STARTED_TEXT)
