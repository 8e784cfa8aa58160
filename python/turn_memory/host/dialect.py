"""The only place that knows DSH 0.1.0-rc.8 from 0.2.0-rc.2.

Planners never branch on a version string: they ask a `Dialect` for capabilities
("may an assistant/message replace?") and for host-shaped pieces (replace op, checkpoint
source, assistant data, tool-result message). Everything a plan appends is built here,
so a plan is host-shaped by construction and the shim appends it verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from turn_memory.host.known_events import KNOWN_EVENT_TYPES_RC8, KNOWN_EVENT_TYPES_V02

DialectName = Literal["rc8", "v02"]


@dataclass(frozen=True)
class Dialect:
    name: DialectName
    #: keys of the positional replace op, besides "op"
    replace_keys: tuple[str, str]
    #: event types that may enter the surface
    surface_event_types: frozenset[str]
    #: rc8: an assistant/message may carry sourceEventSeqs (empty allowed) and so replace a span
    assistant_may_replace: bool
    #: v02: assistant/message data must carry `stream: []` or the log will not reload
    assistant_requires_stream: bool
    #: role of the message inside a tool/result event
    tool_result_role: str
    #: v02: node 0 may be a system/message that only a system/message can replace
    protects_system_head: bool
    known_event_types: frozenset[str]
    #: rc8: an assistant/message may carry sourceEventSeqs (an empty list included);
    #: v02 refuses the field on assistant/message outright
    assistant_may_cite_sources: bool = True
    #: v02: replace endpoints are checked to be earlier than the replacing event's seq
    replace_endpoints_precede_event: bool = False
    #: v02: reload checks assistant/message turn/step are non-negative safe integers
    assistant_turn_step_checked: bool = False
    #: rc8: loading migrates pre-react-loop turn/start / turn/end shapes and refuses malformed
    #: ones; v02's loader is undocumented here, so it is left unchecked there
    turn_shapes_checked: bool = True
    #: {field: value} matchers of the host's own runtime-context snapshot message source
    snapshot_sources: tuple[dict[str, str], ...] = ()

    # -- surface intents -------------------------------------------------------------
    def replace_op(self, start: int, end: int) -> dict[str, Any]:
        a, b = self.replace_keys
        return {"op": "replace", a: start, b: end}

    def op_range(self, op: Any) -> tuple[int, int] | None:
        """(start, end) of a well-formed replace op in this dialect, else None."""
        if not isinstance(op, dict) or set(op) != {"op", *self.replace_keys} or op.get("op") != "replace":
            return None
        a, b = (op[k] for k in self.replace_keys)
        if not (_is_seq(a) and _is_seq(b)):
            return None
        return a, b

    def message_role(self, event_type: str) -> str | None:
        """Role the host demands of the message a surface event carries (None: not a message event)."""
        if event_type not in self.surface_event_types:
            return None
        return {
            "user/message": "user",
            "assistant/message": "assistant",
            "tool/result": self.tool_result_role,
            # v02 only; roles inferred from the type names (survey documents no reload check text)
            "system/message": "system",
            "developer/message": "developer",
        }.get(event_type)

    # -- message sources ---------------------------------------------------------------
    def checkpoint_source(self, compaction_id: str, source_command_id: str | None = None) -> dict[str, Any]:
        base: dict[str, Any] = (
            {"kind": "plugin", "plugin": "compact"} if self.name == "rc8" else {"kind": "compact-checkpoint"}
        )
        base["compactionId"] = compaction_id
        if source_command_id is not None:
            base["sourceCommandId"] = source_command_id
        return base

    def is_checkpoint_source(self, source: Any) -> bool:
        if not isinstance(source, dict):
            return False
        if self.name == "rc8":
            return source.get("kind") == "plugin" and source.get("plugin") == "compact"
        return source.get("kind") == "compact-checkpoint"

    # -- event data --------------------------------------------------------------------
    def assistant_data(self, turn: int, step: int, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        data: dict[str, Any] = {"turn": turn, "step": step, "message": message, **extra}
        if self.assistant_requires_stream:
            data.setdefault("stream", [])
        return data

    def tool_result_message(self, message: dict[str, Any]) -> dict[str, Any]:
        return {**message, "role": self.tool_result_role}


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**53 - 1


RC8 = Dialect(
    name="rc8",
    replace_keys=("start", "end"),
    surface_event_types=frozenset({"user/message", "assistant/message", "tool/result"}),
    assistant_may_replace=True,
    assistant_requires_stream=False,
    tool_result_role="user",
    protects_system_head=False,
    known_event_types=KNOWN_EVENT_TYPES_RC8,
    snapshot_sources=({"kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt"},),
)

V02 = Dialect(
    name="v02",
    replace_keys=("startSeq", "endSeq"),
    surface_event_types=frozenset(
        {"system/message", "developer/message", "user/message", "assistant/message", "tool/result"}
    ),
    assistant_may_replace=False,
    assistant_requires_stream=True,
    tool_result_role="tool",
    protects_system_head=True,
    known_event_types=KNOWN_EVENT_TYPES_V02,
    assistant_may_cite_sources=False,
    replace_endpoints_precede_event=True,
    assistant_turn_step_checked=True,
    turn_shapes_checked=False,
    snapshot_sources=({"kind": "runtime-context"},),
)

DIALECTS: dict[str, Dialect] = {"rc8": RC8, "v02": V02}


def dialect_for_host(replace_keys: object, claimed: str | None = None) -> Dialect:
    """The dialect whose replace op a real session of this host accepted (the shim's probe).

    Exactly one dialect must match; a claimed dialect (doctor, tests) is used only when the
    client sent no probe. Raises ValueError when neither decides.
    """
    if isinstance(replace_keys, list):
        matches = [d for d in DIALECTS.values() if "/".join(d.replace_keys) in replace_keys]
        if len(matches) == 1:
            return matches[0]
        raise ValueError(f"the host accepted replace ops {replace_keys}: no single known dialect matches")
    if replace_keys:  # the probe itself failed: say why
        raise ValueError(f"the host probe failed: {replace_keys}")
    if claimed in DIALECTS:
        return DIALECTS[claimed]
    raise ValueError("the client sent neither a host probe nor a dialect")


def dialect_for_version(version: str) -> Dialect:
    """0.1.x hosts speak rc8; 0.1.5+ and 0.2.x speak the v02 surface contract (design D-019)."""
    parts = version.split("-")[0].split(".")
    try:
        major, minor, patch = (int(p) for p in parts[:3])
    except ValueError as exc:
        raise ValueError(f"unrecognised DSH version {version!r}") from exc
    if (major, minor) == (0, 1) and patch < 5:
        return RC8
    return V02
