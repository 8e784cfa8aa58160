"""Session event types each host can read back from its log.

A log holding a type outside its host's set (and not marked ignorable, which
`session.append` cannot write) is refused on the next start (survey §9 trap 19), so a
plan may only append types listed here. rc8: generated from
`@deepseek-ai/dsh-session@0.1.0-rc.8`'s KNOWN_SESSION_EVENT_TYPES. v02: the rc8 set
plus the 0.2.0-rc.2 additions recorded in the survey (§3.5).
"""

KNOWN_EVENT_TYPES_RC8 = frozenset(
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

KNOWN_EVENT_TYPES_V02 = KNOWN_EVENT_TYPES_RC8 | frozenset(
    {
        "deliverables/presented",
        "developer/message",
        "image/offload",
        "model/selection",
        "session-log-deepseek/delivery-accepted",
        "subagent/catalog",
        "subagent/model-selection-policy",
        "system/message",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
        "workspace/changes",
    }
)
