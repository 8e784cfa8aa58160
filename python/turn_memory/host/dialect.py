"""The only place that knows DSH 0.1.0-rc.8 from 0.2.x (0.2.1-rc.2 is the real v02 host).

Planners never branch on a version string: they ask a `Dialect` for capabilities
("may an assistant/message replace?") and for host-shaped pieces (replace op, message
sources, checkpoint source, assistant data, tool-result message). Everything a plan
appends is built here, so a plan is host-shaped by construction and the shim appends it
verbatim.

Recognisers (`is_runtime_context`, `is_plugin_source`, `is_checkpoint_source`, …) accept
both hosts' spellings of a source: a v02 log lifted from a released v3 log carries exactly
the v02 form (dsh-session-format-v3-to-v4 `rewritePluginSource`: `{kind:'plugin',
plugin:X, …}` becomes `{kind:'plugin:X', …}`, with renames for host producers), and an rc8
log never holds a v02 form, so accepting both can never misread either log.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from turn_memory.host.json_values import is_seq
from turn_memory.host.known_events import KNOWN_EVENT_TYPES_RC8, KNOWN_EVENT_TYPES_V02

DialectName = Literal["rc8", "v02"]

#: rc8's runtime-context snapshot author; format v4 renames it to kind 'runtime-context'
#: (dsh-session-format-v3-to-v4 RENAMED_PRODUCERS)
SNAPSHOT_PLUGIN = "@deepseek-ai/dsh-system-prompt"
RUNTIME_CONTEXT_KIND = "runtime-context"
#: rc8's checkpoint author; v4 kind 'compact-checkpoint' (dsh-compaction COMPACT_CHECKPOINT_MARKER)
CHECKPOINT_PLUGIN = "compact"
CHECKPOINT_KIND = "compact-checkpoint"
#: the producer name turn-memory's own message sources carry
OUR_PLUGIN = "turn-memory"
#: v3 plugins lifted to a kind other than `plugin:<name>` (dsh-session-format-v3-to-v4 RENAMED_PRODUCERS)
_RENAMED_PRODUCERS = {
    CHECKPOINT_PLUGIN: CHECKPOINT_KIND,
    SNAPSHOT_PLUGIN: RUNTIME_CONTEXT_KIND,
    "tools-code-mode": "ptc-mode",
    "tools-ptc": "ptc-mode",
    "dsh-compaction-basic": "compact-basic",
}


def plugin_of(source: Any) -> str | None:
    """The plugin a message source names, in either spelling (`{kind:'plugin', plugin}` or
    `{kind:'plugin:<name>'}`), else None."""
    if not isinstance(source, dict):
        return None
    kind = source.get("kind")
    if kind == "plugin":
        plugin = source.get("plugin")
        return plugin if isinstance(plugin, str) else None
    if isinstance(kind, str) and kind.startswith("plugin:"):
        return kind[len("plugin:"):]
    return None


def is_plugin_source(source: Any, plugin: str) -> bool:
    return plugin_of(source) == plugin


def is_runtime_context(source: Any) -> bool:
    """The host's runtime-context snapshot: rc8 plugin dsh-system-prompt, v02 kind 'runtime-context'."""
    return isinstance(source, dict) and (source.get("kind") == RUNTIME_CONTEXT_KIND or plugin_of(source) == SNAPSHOT_PLUGIN)


def is_checkpoint_source(source: Any) -> bool:
    """A compaction checkpoint: rc8 `{kind:'plugin', plugin:'compact'}`, v02 kind 'compact-checkpoint'."""
    return isinstance(source, dict) and (source.get("kind") == CHECKPOINT_KIND or plugin_of(source) == CHECKPOINT_PLUGIN)


def is_human_source(source: Any) -> bool:
    """A message the person typed (both hosts: kind 'user'); anything else is a producer's."""
    return isinstance(source, dict) and source.get("kind") == "user"


def producer_of(source: Any) -> str | None:
    """Who wrote a non-human message, for display: the plugin name, else the source kind."""
    if not isinstance(source, dict) or is_human_source(source):
        return None
    plugin = plugin_of(source)
    if plugin is not None:
        return plugin
    kind = source.get("kind")
    return kind if isinstance(kind, str) and kind else None


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
    #: ones (v02's loader has no such upgrade path for native v4 rows)
    turn_shapes_checked: bool = True
    #: {field: value} matchers of the host's own runtime-context snapshot message source
    snapshot_sources: tuple[dict[str, str], ...] = ()
    #: v02: runtime-context sections the host keeps under a scope's suppressor (registered
    #: `required`, dsh-system-prompt assemble/refreshContext): a worker scope shadows each (D-018)
    required_context_sections: tuple[str, ...] = ()
    #: v02: the loop projects the runtime-context snapshot again inside the step, at the
    #: pre-step's snapshot slot or else after the step's input (dsh-agent-loop step()): a
    #: dropped slot puts it after a worker's task, so a worker keeps the slot ahead of it
    snapshot_projected_in_step: bool = False
    #: v02: the loop forgets a retained runtime-context snapshot that a replacement cites and
    #: projects it again before the next request (dsh-agent-loop RuntimeContextProjection)
    reemits_shadowed_snapshot: bool = False
    #: v02: a tool/result message is first-class `{role:'tool', toolCallId, isError?, content:
    #: blocks}`; rc8 wraps the blocks in one `tool-result` block of a user-role message
    first_class_tool_results: bool = False
    #: v02 (format v4): every message source must name its producer; `kind:'plugin'` is
    #: retired and refused when persisted (dsh-session-format-v3-to-v4 message-sources)
    producer_owned_sources: bool = False
    #: v02: a system/message's source kind (dsh-session assertMessageEventShape)
    system_source_kind: str | None = None
    #: v02: session.append itself runs the event-data rules (validateSessionEventData)
    event_data_checked_on_append: bool = False
    #: v02: reload checks request/header `reason` (dsh-session assertCurrentLlmShape)
    request_header_reason_checked: bool = False
    #: v02: reload checks the turn/step/tool-call/compaction lifecycle
    #: (dsh-session-format-v3-to-v4 Relationships); see `host/lifecycle.py`
    lifecycle_checked: bool = False

    @property
    def plugin_steps(self) -> bool:
        """May a plan open its own step/start … step/end to hold assistant nodes?

        rc8: yes (nothing numbers steps on reload). v02: no. Reload requires each turn's steps
        to be numbered 1, 2, … (Relationships step/start), while the agent loop numbers its
        own steps in memory (dsh-agent-loop/lib/index.js:955 `step = phase.step + 1`): any
        step a plugin opens breaks the loop's next step/start on reload. On v02 assistant
        and tool-result nodes can only be appended inside a step the loop opened.
        """
        return not self.lifecycle_checked

    # -- surface intents -------------------------------------------------------------
    def replace_op(self, start: int, end: int) -> dict[str, Any]:
        a, b = self.replace_keys
        return {"op": "replace", a: start, b: end}

    def op_range(self, op: Any) -> tuple[int, int] | None:
        """(start, end) of a well-formed replace op in this dialect, else None."""
        if not isinstance(op, dict) or set(op) != {"op", *self.replace_keys} or op.get("op") != "replace":
            return None
        a, b = (op[k] for k in self.replace_keys)
        if not (is_seq(a) and is_seq(b)):
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
            # v02 only (dsh-session MESSAGE_ROLE_BY_TYPE)
            "system/message": "system",
            "developer/message": "developer",
        }.get(event_type)

    # -- message sources ---------------------------------------------------------------
    def plugin_source(self, plugin: str, **fields: Any) -> dict[str, Any]:
        """A source naming `plugin` as the producer, in this host's spelling.

        v02 uses `plugin:<name>`, which is also what a released v3 log's `{kind:'plugin',
        plugin}` is lifted to (dsh-session-format-v3-to-v4 producerKind), so a log written
        by either host reads the same after lifting.
        """
        if self.producer_owned_sources:
            return {"kind": f"plugin:{plugin}", **fields}
        return {"kind": "plugin", "plugin": plugin, **fields}

    def checkpoint_source(self, compaction_id: str, source_command_id: str | None = None) -> dict[str, Any]:
        # the shapes of the host's own compactCheckpointSource() (dsh-compaction/lib/index.js:116)
        base: dict[str, Any] = (
            {"kind": CHECKPOINT_KIND} if self.producer_owned_sources else {"kind": "plugin", "plugin": CHECKPOINT_PLUGIN}
        )
        base["compactionId"] = compaction_id
        if source_command_id is not None:
            base["sourceCommandId"] = source_command_id
        return base

    @staticmethod
    def is_checkpoint_source(source: Any) -> bool:
        return is_checkpoint_source(source)

    @staticmethod
    def is_plugin_source(source: Any, plugin: str) -> bool:
        return is_plugin_source(source, plugin)

    @staticmethod
    def is_runtime_context(source: Any) -> bool:
        return is_runtime_context(source)

    def retired_source(self, source: Any) -> bool:
        """A source this host refuses to persist (v02: the retired `kind: 'plugin'`)."""
        return self.producer_owned_sources and isinstance(source, dict) and source.get("kind") == "plugin"

    # -- event data --------------------------------------------------------------------
    def assistant_data(self, turn: int, step: int, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        data: dict[str, Any] = {"turn": turn, "step": step, "message": message, **extra}
        if self.assistant_requires_stream:
            data.setdefault("stream", [])
        return data

    def tool_result_message(self, message_id: str, call_id: str, blocks: list[dict[str, Any]], *,
                            is_error: bool = False) -> dict[str, Any]:
        """The message of a tool/result answering `call_id` with content `blocks`."""
        source = {"kind": "tool", "callId": call_id}
        if self.first_class_tool_results:
            # shape of a real 0.2.1 result (the loop's executeToolCalls; format v4 tool-role)
            return {"id": message_id, "role": "tool", "source": source, "toolCallId": call_id,
                    "isError": is_error, "content": blocks}
        return {"id": message_id, "role": self.tool_result_role, "source": source,
                "content": [{"type": "tool-result", "toolCallId": call_id, "content": blocks, "isError": is_error}]}

    def tool_result_blocks(self, message: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The result's own content blocks (None when the message is not this host's shape)."""
        content = message.get("content")
        if not isinstance(content, list):
            return None
        if self.first_class_tool_results:
            return content
        block = content[0] if len(content) == 1 else None
        inner = block.get("content") if isinstance(block, dict) and block.get("type") == "tool-result" else None
        return inner if isinstance(inner, list) else None

    def tool_result_is_error(self, message: dict[str, Any]) -> bool:
        if self.first_class_tool_results:
            return message.get("isError") is True
        content = message.get("content")
        return isinstance(content, list) and any(isinstance(b, dict) and b.get("isError") is True for b in content)

    def with_tool_result_blocks(self, message: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
        """A copy of a tool-result message whose result content is `blocks`, nothing else changed
        (a tool/result replacement may change only content: dsh-session assertToolResultRewrite)."""
        out = copy.deepcopy(message)
        if self.first_class_tool_results:
            out["content"] = blocks
        else:
            out["content"][0]["content"] = blocks
        return out


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
    required_context_sections=("working-directory:current",),
    snapshot_projected_in_step=True,
    reemits_shadowed_snapshot=True,
    first_class_tool_results=True,
    producer_owned_sources=True,
    system_source_kind="system-prompt",
    event_data_checked_on_append=True,
    request_header_reason_checked=True,
    lifecycle_checked=True,
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
