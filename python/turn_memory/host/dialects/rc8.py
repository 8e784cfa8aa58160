"""DSH 0.1.0-rc.8 (npm): session format 0, the `start`/`end` replace op, and an assistant/message
that may replace a span, so a compressed turn lands in place at any step.

Facts from `@deepseek-ai/dsh-session@0.1.0-rc.8` and the rc8 agent loop; the differential test
against the host's own session code is tests/unit/test_surface_model_vs_host.py.
"""

from __future__ import annotations

from turn_memory.host.dialect import SNAPSHOT_PLUGIN, Dialect

#: generated from `@deepseek-ai/dsh-session@0.1.0-rc.8`'s KNOWN_SESSION_EVENT_TYPES
KNOWN_EVENT_TYPES = frozenset(
    {
        "agent-preset/selected",
        "agent/inbox/spliced",
        "approval/asked",
        "approval/decided",
        "approval/policy",
        "assistant/chunk",
        "assistant/message",
        "command/done",
        "command/run",
        "compaction/end",
        "compaction/prune",
        "compaction/start",
        "compaction/summary",
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        "llm/retry",
        "llm/retry-started",
        "permission/preset",
        "plan/mode",
        "request/context",
        "request/header",
        "sandbox/mode",
        "schedule/change",
        "session/end-seed",
        "session/title",
        "session/title-llm-request",
        "step/end",
        "step/start",
        "subagent/descriptor",
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
        "tool/code-dispatch",
        "tool/code-dispatch-start",
        "tool/result",
        "turn/end",
        "turn/start",
        "user/message",
        "web/deepseek-search-llm-request",
    }
)

RC8 = Dialect(
    name="rc8",
    first_version=(0, 1, 0),
    tested_versions=("0.1.0-rc.8",),
    contract_versions=(),
    session_format_version=0,
    log_file_stem="session",
    replace_keys=("start", "end"),
    surface_event_types=frozenset({"user/message", "assistant/message", "tool/result"}),
    known_event_types=KNOWN_EVENT_TYPES,
    assistant_may_replace=True,
    assistant_may_cite_sources=True,
    assistant_requires_stream=False,
    tool_result_role="user",
    first_class_tool_results=False,
    protects_system_head=False,
    system_source_kind=None,
    producer_owned_sources=False,
    replace_endpoints_precede_event=False,
    event_data_checked_on_append=False,
    assistant_turn_step_checked=False,
    turn_shapes_checked=True,
    request_header_reason_checked=False,
    lifecycle_checked=False,
    snapshot_sources=({"kind": "plugin", "plugin": SNAPSHOT_PLUGIN},),
    required_context_sections=(),
    snapshot_projected_in_step=False,
    reemits_shadowed_snapshot=False,
)
