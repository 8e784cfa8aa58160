"""DSH 0.1.5 and later, 0.2.x (0.2.1-rc.2, the PyPI runtime; 0.2.0-rc.2, DSH Desktop): session
format v4, the `startSeq`/`endSeq` replace op, an assistant/message that can only be appended
(inside a step the agent loop opened), first-class tool results, and the reload-time lifecycle.

Facts from `@deepseek-ai/dsh-session@0.2.1-rc.2` (format v4) and its agent loop; the
differential test against the host's own session code is
tests/unit/test_surface_model_vs_host_v021.py, which also checks `KNOWN_EVENT_TYPES` against the
host's constant. 0.2 dropped rc8's `assistant/chunk` and `tool/code-dispatch*` (format v4 refuses
the latter outright: dsh-session-format-v3-to-v4 assertV4RetiredSyntax).
"""

from __future__ import annotations

from turn_memory.host.dialect import RUNTIME_CONTEXT_KIND, Dialect

#: `@deepseek-ai/dsh-session@0.2.1-rc.2` lib/index.js:79, KNOWN_SESSION_EVENT_TYPES (62 types)
KNOWN_EVENT_TYPES = frozenset(
    {
        "agent-preset/selected",
        "agent/inbox/spliced",
        "approval/asked",
        "approval/decided",
        "approval/policy",
        "assistant/attempt",
        "assistant/message",
        "command/done",
        "command/run",
        "compaction/end",
        "compaction/prune",
        "compaction/start",
        "compaction/summary",
        "deliverables/presented",
        "developer/message",
        "feedback/message-delete",
        "feedback/message-put",
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        "image/offload",
        "job/registered",
        "job/settled",
        "llm/retry",
        "llm/retry-started",
        "model/selection",
        "permission/preset",
        "plan/mode",
        "request/context",
        "request/header",
        "sandbox/mode",
        "schedule/change",
        "session-log-deepseek/delivery-accepted",
        "session/end-seed",
        "session/title",
        "session/title-llm-request",
        "step/end",
        "step/start",
        "subagent/catalog",
        "subagent/descriptor",
        "subagent/model-selection-policy",
        "system/message",
        "team/member",
        "team/message/delivered",
        "team/message/queued",
        "team/task",
        "todo/write",
        "tool-workflow/agent-end",
        "tool-workflow/agent-start",
        "tool-workflow/run-end",
        "tool-workflow/run-start",
        "tool/call",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
        "tool/result",
        "turn/end",
        "turn/start",
        "user/message",
        "web/deepseek-search-llm-request",
        "working-directory/change",
        "workspace/changes",
    }
)

V02 = Dialect(
    name="v02",
    first_version=(0, 1, 5),
    tested_versions=("0.2.1-rc.2",),
    contract_versions=(("0.2.0-rc.2", "0.2.0-rc.2 is DSH Desktop's"),),
    session_format_version=4,
    log_file_stem="session.v4",
    replace_keys=("startSeq", "endSeq"),
    surface_event_types=frozenset(
        {"system/message", "developer/message", "user/message", "assistant/message", "tool/result"}
    ),
    known_event_types=KNOWN_EVENT_TYPES,
    assistant_may_replace=False,
    assistant_may_cite_sources=False,
    assistant_requires_stream=True,
    tool_result_role="tool",
    first_class_tool_results=True,
    protects_system_head=True,
    system_source_kind="system-prompt",
    producer_owned_sources=True,
    replace_endpoints_precede_event=True,
    event_data_checked_on_append=True,
    assistant_turn_step_checked=True,
    turn_shapes_checked=False,
    request_header_reason_checked=True,
    lifecycle_checked=True,
    snapshot_sources=({"kind": RUNTIME_CONTEXT_KIND},),
    required_context_sections=("working-directory:current",),
    snapshot_projected_in_step=True,
    reemits_shadowed_snapshot=True,
)
