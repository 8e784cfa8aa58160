"""What a DSH session contract is, as answers to questions (`Dialect`), and the source
recognisers every host shares. Pure.

Planners never branch on a host or a version string: they ask a `Dialect` for capabilities
("may an assistant/message replace?") and for host-shaped pieces (replace op, message
sources, checkpoint source, assistant data, tool-result message). Everything a plan
appends is built here, so a plan is host-shaped by construction and the shim appends it
verbatim. Each host version's answers are one module in `host/dialects/`, which also picks
the dialect of a running host.

Recognisers (`is_runtime_context`, `is_plugin_source`, `is_checkpoint_source`, …) accept
both spellings of a source: a format v4 log lifted from a released v3 log carries exactly
the v4 form (dsh-session-format-v3-to-v4 `rewritePluginSource`: `{kind:'plugin',
plugin:X, …}` becomes `{kind:'plugin:X', …}`, with renames for host producers), and a v3
log never holds a v4 form, so accepting both can never misread either log.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from turn_memory.host.json_values import is_seq

#: rc8's runtime-context snapshot author; format v4 renames it to kind 'runtime-context'
#: (dsh-session-format-v3-to-v4 RENAMED_PRODUCERS)
SNAPSHOT_PLUGIN = "@deepseek-ai/dsh-system-prompt"
RUNTIME_CONTEXT_KIND = "runtime-context"
#: rc8's checkpoint author; v4 kind 'compact-checkpoint' (dsh-compaction COMPACT_CHECKPOINT_MARKER)
CHECKPOINT_PLUGIN = "compact"
CHECKPOINT_KIND = "compact-checkpoint"
#: the producer name turn-memory's own message sources carry
OUR_PLUGIN = "turn-memory"
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


@dataclass(frozen=True, kw_only=True)
class Dialect:
    """Everything turn-memory needs to know about one DSH session contract, as answers to
    questions. Every field must be given: a dialect module (`host/dialects/`) answers each one."""

    # -- which hosts speak it --------------------------------------------------------------
    name: str
    #: the first DSH version that speaks this dialect (`dialects.dialect_for_version`)
    first_version: tuple[int, int, int]
    #: versions every end-to-end test runs on, and versions covered only by contract (the
    #: same session code as a tested one), each with why
    tested_versions: tuple[str, ...]
    contract_versions: tuple[tuple[str, str], ...]
    #: dsh-session's SESSION_FORMAT_VERSION (the shim's probe reports it)
    session_format_version: int
    #: the session log's file name before `.jsonl[.zstd]` (dsh-session-persistence-jsonl)
    log_file_stem: str
    # -- what the host's session code accepts ----------------------------------------------
    #: keys of the positional replace op, besides "op" (the shim's probe tells hosts apart by them)
    replace_keys: tuple[str, str]
    #: event types that may enter the surface
    surface_event_types: frozenset[str]
    #: every event type the host can read back from its log (a plan may append only these:
    #: an unknown type makes the log unreadable on the next start)
    known_event_types: frozenset[str]
    #: an assistant/message may carry sourceEventSeqs (empty allowed) and so replace a span
    assistant_may_replace: bool
    #: an assistant/message may carry sourceEventSeqs at all (an empty list included)
    assistant_may_cite_sources: bool
    #: assistant/message data must carry `stream: []` or the log will not reload
    assistant_requires_stream: bool
    #: role of the message inside a tool/result event
    tool_result_role: str
    #: a tool/result message is first-class `{role:'tool', toolCallId, isError?, content:
    #: blocks}`; otherwise one `tool-result` block of a user-role message wraps the blocks
    first_class_tool_results: bool
    #: node 0 may be a system/message that only a system/message can replace
    protects_system_head: bool
    #: a system/message's source kind (dsh-session assertMessageEventShape); None: no such message
    system_source_kind: str | None
    #: every message source must name its producer; `kind:'plugin'` is retired and refused
    #: when persisted (format v4, dsh-session-format-v3-to-v4 message-sources)
    producer_owned_sources: bool
    #: replace endpoints are checked to be earlier than the replacing event's seq
    replace_endpoints_precede_event: bool
    #: session.append itself runs the event-data rules (validateSessionEventData)
    event_data_checked_on_append: bool
    #: reload checks assistant/message turn/step are non-negative safe integers
    assistant_turn_step_checked: bool
    #: loading migrates pre-react-loop turn/start / turn/end shapes and refuses malformed ones
    turn_shapes_checked: bool
    #: reload checks request/header `reason` (dsh-session assertCurrentLlmShape)
    request_header_reason_checked: bool
    #: reload checks the turn/step/tool-call/compaction lifecycle
    #: (dsh-session-format-v3-to-v4 Relationships); see `host/lifecycle.py`
    lifecycle_checked: bool
    # -- how the agent loop treats context -------------------------------------------------
    #: {field: value} matchers of the host's own runtime-context snapshot message source
    snapshot_sources: tuple[dict[str, str], ...]
    #: runtime-context sections the host keeps under a scope's suppressor (registered
    #: `required`, dsh-system-prompt assemble/refreshContext): a worker scope shadows each
    #: (docs/decisions.md#workers-are-isolated)
    required_context_sections: tuple[str, ...]
    #: the loop projects the runtime-context snapshot again inside the step, at the
    #: pre-step's snapshot slot or else after the step's input (dsh-agent-loop step()): a
    #: dropped slot puts it after a worker's task, so a worker keeps the slot ahead of it
    snapshot_projected_in_step: bool
    #: the loop forgets a retained runtime-context snapshot that a replacement cites and
    #: projects it again before the next request (dsh-agent-loop RuntimeContextProjection)
    reemits_shadowed_snapshot: bool

    def support(self, version: str) -> str:
        """How this project covers `version` of the host, in words ('' for neither)."""
        if version in self.tested_versions:
            return "tested end to end"
        why = dict(self.contract_versions).get(version)
        return f"supported by contract: {why}" if why else ""

    def keeps_assistants(self, setting: str) -> bool:
        """Whether turn workers leave assistant nodes verbatim (`turns.assistantNodes`): `auto`
        keeps them where an assistant/message can only be appended (0.2), so every turn lands
        in place (docs/decisions.md#on-02-a-turn-keeps-its-assistant-nodes-and-lands-in-place)."""
        return setting == "keep" or (setting == "auto" and not self.assistant_may_replace)

    @property
    def plugin_steps(self) -> bool:
        """May a plan open its own step/start … step/end to hold assistant nodes?

        Only where reload does not check the lifecycle (rc8: nothing numbers steps on reload).
        A lifecycle-checked reload (v02) requires each turn's steps to be numbered 1, 2, …
        (Relationships step/start), while the agent loop numbers its own steps in memory
        (dsh-agent-loop/lib/index.js:955 `step = phase.step + 1`): any step a plugin opens
        breaks the loop's next step/start on reload, so there assistant and tool-result nodes
        can only be appended inside a step the loop opened.
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
