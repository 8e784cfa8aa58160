"""Per-event shape rules a DSH host enforces, independent of the surface fold.

Two kinds live here:
- append-time: lossless JSON and the legacy request-header refusals (`session.append`
  throws); on v02 also the event-data rules (`event_data_violation`);
- reload-time: the event envelope, request-header and message shapes, the known-type gate
  and, on v02, the format v4 row rules (`format_v4`). Live `append` skips these, but
  loading the log later runs them and refuses the whole session, so a landing must satisfy
  them too (docs/decisions.md#never-corrupt-or-block-a-session).

Each check returns a `Violation` (rule id, human text) or None; callers add the context.
rc8 rules were written from `@deepseek-ai/dsh-session@0.1.0-rc.8` and its observed
behaviour; v02 rules follow
`@deepseek-ai/dsh-session@0.2.1-rc.2` lib/index.js (cited per check).
"""

from __future__ import annotations

import math
from typing import Any

from turn_memory.host import format_v4
from turn_memory.host.dialect import Dialect
from turn_memory.host.json_values import is_nonempty_str, is_safe_int, is_seq
from turn_memory.host.violation import Violation

#: envelope keys a stored event may carry; anything else makes the log unreadable
ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"})


# -- append-time -------------------------------------------------------------------------


def json_violation(value: Any) -> Violation | None:
    """The host snapshots data through lossless JSON; anything that would not round-trip fails.

    Iterative so deep payloads cannot hit Python's recursion limit. Integers beyond 2**53
    would silently lose precision in JavaScript, so they are refused here as well.
    """
    # (value, leaving) pairs: `leaving` pops a container off the ancestor chain, so shared
    # subtrees pass and only true cycles fail, as in the host's snapshot walk
    stack: list[tuple[Any, bool]] = [(value, False)]
    ancestors: set[int] = set()
    while stack:
        item, leaving = stack.pop()
        if leaving:
            ancestors.discard(id(item))
            continue
        if item is None or isinstance(item, (str, bool)):
            continue
        if isinstance(item, int):
            if not is_safe_int(item):
                return Violation("json", f"integer {item} is outside the JavaScript safe range")
            continue
        if isinstance(item, float):
            if not math.isfinite(item) or (item == 0.0 and math.copysign(1.0, item) < 0):
                return Violation("json", f"number {item!r} is not losslessly JSON-serializable")
            continue
        if isinstance(item, (list, dict)):
            if id(item) in ancestors:
                return Violation("json", "value is cyclic")
            ancestors.add(id(item))
            stack.append((item, True))
            if isinstance(item, dict):
                if any(not isinstance(k, str) for k in item):
                    return Violation("json", "object keys must be strings")
                stack.extend((v, False) for v in item.values())
            else:
                stack.extend((v, False) for v in item)
            continue
        return Violation("json", f"{type(item).__name__} is not a JSON value")
    return None


def legacy_header_violation(event: dict[str, Any]) -> Violation | None:
    """Obsolete request-header vocabulary is refused both on append and on load."""
    if event.get("type") == "request/header-delta":
        return Violation("legacy-header", "legacy request/header-delta events are not supported")
    data = event.get("data")
    if event.get("type") == "request/header" and isinstance(data, dict) and data.get("reason") == "fallback":
        return Violation("legacy-header", 'legacy request/header reason "fallback" is not supported')
    return None


# -- reload-time -------------------------------------------------------------------------


def envelope_violation(event: Any, *, time_optional: bool = False) -> Violation | None:
    """The fixed envelope checked when the log is loaded.

    `time_optional`: a planned event gets its time from the host on append.
    """
    if not isinstance(event, dict):
        return Violation("envelope", "event is not an object")
    extra = sorted(set(event) - ENVELOPE_KEYS)
    if extra:
        return Violation("envelope", f"invalid event envelope: unexpected key(s) {extra}")
    if not isinstance(event.get("type"), str):
        return Violation("envelope", "invalid event envelope: type must be a string")
    if not is_seq(event.get("seq")):
        return Violation("envelope", "invalid event envelope: seq must be a non-negative safe integer")
    if not ("time" not in event and time_optional) and not is_safe_int(event.get("time")):
        return Violation("envelope", "invalid event envelope: time must be a safe integer")
    if "data" not in event:  # JSON null is data; only a missing key is not
        return Violation("envelope", "invalid event envelope: data is missing")
    if "ignorable" in event and event["ignorable"] is not True:
        return Violation("envelope", "invalid event envelope: ignorable must be true when present")
    return None


def known_type_violation(dialect: Dialect, event: dict[str, Any]) -> Violation | None:
    """A type the host does not know, and not marked ignorable, makes the session unloadable."""
    if event.get("type") in dialect.known_event_types or event.get("ignorable") is True:
        return None
    return Violation(
        "known-type",
        f'event type "{event.get("type")}" is unknown to the {dialect.name} host; the log would not reload',
    )


def request_header_violation(dialect: Dialect, event: dict[str, Any]) -> Violation | None:
    if event.get("type") != "request/header":
        return None
    data = event.get("data")
    header = data.get("header") if isinstance(data, dict) else None
    config = header.get("config") if isinstance(header, dict) else None
    if not _has_provider_model(config):
        return Violation("request-header", "request/header lacks config provider/model")
    assert isinstance(config, dict) and isinstance(header, dict) and isinstance(data, dict)
    effort = config.get("reasoningEffort")
    if "reasoningEffort" in config and not is_nonempty_str(effort):
        return Violation("request-header", "request/header has an invalid reasoningEffort")
    if "adapterDefaults" in header:
        defaults = header["adapterDefaults"]
        ok = (
            isinstance(defaults, dict)
            and set(defaults) <= {"reasoningEffort", "maxTokens"}
            and all(v is True for v in defaults.values())
            and all(k in config for k in defaults)
        )
        if not ok:
            return Violation("request-header", "request/header has invalid adapterDefaults")
    if dialect.request_header_reason_checked:
        # v02 assertCurrentLlmShape (dsh-session/lib/index.js:1156-1157)
        if data.get("reason") not in ("initial", "resume", "change", "series"):
            return Violation("request-header", "request/header has an invalid reason")
        if "startsSeries" in data and data["startsSeries"] is not True:
            return Violation("request-header", "request/header has an invalid startsSeries marker")
    return None


def event_data_violation(event: dict[str, Any]) -> Violation | None:
    """v02 validateSessionEventData (dsh-session/lib/index.js:242-278): run by session.append
    itself and again on load. Developer roles, tool-change blocks, canonical request headers,
    and tool-failure metadata."""
    etype, data = event.get("type"), event.get("data")
    if etype in _MESSAGE_TYPES and isinstance(data, dict):
        message = data if etype == "user/message" else data.get("message")
        if isinstance(message, dict):
            if (etype == "developer/message") != (message.get("role") == "developer"):
                return Violation("developer-role", "developer/message and developer role must occur together")
            content = message.get("content")
            changes = [b for b in content if isinstance(b, dict) and b.get("type") in ("tool-addition", "tool-removal")] \
                if isinstance(content, list) else []
            if changes and message.get("role") != "developer":
                return Violation("developer-role", "tool-change blocks require developer role")
            if etype == "developer/message":
                for block in changes:
                    if not is_nonempty_str(block.get("toolName")):
                        return Violation("v4-developer", f"{block['type']} requires a nonempty toolName")
                    if block["type"] == "tool-addition" and "tool" in block:
                        return Violation("v4-developer", "tool-addition must omit inline tool definitions")
                additions = any(b["type"] == "tool-addition" for b in changes)
                if (not is_seq(data.get("headerSeq"))) if additions else ("headerSeq" in data):
                    return Violation("v4-developer", "developer/message requires headerSeq exactly when tool additions are present")
    if etype == "request/header":
        header = data.get("header") if isinstance(data, dict) else None
        if not isinstance(header, dict):
            return Violation("request-header", "request/header data and header must be objects")
        if "system" in header:
            return Violation("request-header", "request/header must omit header.system; use system/message")
        if header.get("tools") == []:
            return Violation("request-header", "request/header must omit empty tools")
        if header.get("adapterDefaults") == {}:
            return Violation("request-header", "request/header must omit empty adapterDefaults")
    elif etype == "tool/result":
        if not isinstance(data, dict):
            return Violation("tool-error", "tool/result data must be an object")
        if data.get("error") is not None:
            message = data.get("message")
            if not isinstance(message, dict) or message.get("isError") is not True:
                return Violation("tool-error", "tool/result error requires message.isError === true")
    return None


_MESSAGE_TYPES = frozenset({"system/message", "developer/message", "user/message", "assistant/message", "tool/result"})


def message_violation(dialect: Dialect, event: dict[str, Any]) -> Violation | None:
    """Message shape of a message-producing event, as checked on reload
    (v02: assertMessageEventShape, dsh-session/lib/index.js:1194-1219)."""
    etype = event.get("type")
    role = dialect.message_role(etype) if isinstance(etype, str) else None
    if role is None:
        return None
    data = event.get("data")
    if etype == "user/message":
        message = data  # a user/message's data IS the message
    else:
        message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, dict) or not is_nonempty_str(message.get("id")):
        return Violation("message-id", f"{etype} lacks an identified message (non-empty string id)")
    if message.get("role") != role:
        return Violation("message-role", f'{etype} message must have role "{role}" under {dialect.name}')
    source = message.get("source")
    if not isinstance(source, dict) or not is_nonempty_str(source.get("kind")):
        return Violation("message-source", f"{etype} message needs a source with a non-empty kind")
    content = message.get("content")
    if not isinstance(content, list):
        return Violation("message-content", f"{etype} message content must be an array")
    if etype == "system/message" and dialect.system_source_kind is not None:
        if source.get("kind") != dialect.system_source_kind:
            return Violation("message-source", f"system/message needs source kind '{dialect.system_source_kind}'")
        return None
    if etype == "assistant/message":
        assert isinstance(data, dict)  # the message was found inside it
        return _assistant_violation(dialect, data, source)
    if etype == "tool/result":
        return _tool_result_violation(dialect, message, source, content)
    return None


def _assistant_violation(dialect: Dialect, data: dict[str, Any], source: dict[str, Any]) -> Violation | None:
    if source.get("kind") != "model" or not _has_provider_model(source):
        return Violation("message-source", "assistant/message needs source {kind:'model', provider, model}")
    return settlement_violation(dialect, "assistant/message", data)


def settlement_violation(dialect: Dialect, etype: str, data: Any) -> Violation | None:
    """v02 assertAssistantSettlementShape (dsh-session/lib/index.js:1169): assistant/message
    and assistant/attempt carry non-negative turn/step and a `stream` array ([] is valid)."""
    data = data if isinstance(data, dict) else {}
    if dialect.assistant_turn_step_checked and not (is_seq(data.get("turn")) and is_seq(data.get("step"))):
        return Violation("assistant-turn-step", f"{etype} turn/step must be non-negative safe integers")
    if dialect.assistant_requires_stream and not isinstance(data.get("stream"), list):
        return Violation("assistant-stream", f"{etype} data must carry a stream array ([] is valid)")
    return None


def _tool_result_violation(dialect: Dialect, message: dict[str, Any], source: dict[str, Any],
                           content: list[Any]) -> Violation | None:
    call_id = source.get("callId")
    if source.get("kind") != "tool" or not is_nonempty_str(call_id):
        return Violation("message-source", "tool/result needs source {kind:'tool', callId}")
    if dialect.first_class_tool_results:
        # v02: the first-class tool-role message; its content blocks are the result itself
        if message.get("toolCallId") != call_id:
            return Violation("tool-call-id", "tool/result message toolCallId must equal source.callId")
        return None
    block = content[0] if len(content) == 1 else None
    if not isinstance(block, dict) or block.get("type") != "tool-result" or not isinstance(block.get("content"), list):
        return Violation("tool-result-block", "tool/result message must contain exactly one tool-result block")
    if block.get("toolCallId") != call_id:
        return Violation("tool-call-id", "tool/result block toolCallId must equal source.callId")
    return None


_PLAIN_END_KINDS = frozenset({"completed", "blocked", "max-tokens", "interrupted", "disposed"})


def turn_shape_violation(dialect: Dialect, event: dict[str, Any]) -> Violation | None:
    """rc8's loader upgrades old turn/start and turn/end shapes and refuses malformed ones."""
    etype, data = event.get("type"), event.get("data")
    if not dialect.turn_shapes_checked or etype not in ("turn/start", "turn/end") or not isinstance(data, dict):
        return None
    if etype == "turn/start":
        if "trigger" not in data:
            return None
        trigger = data["trigger"]
        ok = _turn_no(data) and set(data) == {"turn", "trigger"} and isinstance(trigger, dict)
        if ok and is_nonempty_str(trigger.get("kind")):
            return None
        return Violation("turn-shape", "turn/start carrying a trigger must be exactly {turn >= 1, trigger: {kind}}")
    reason = data.get("reason")
    if not (_turn_no(data) and set(data) == {"turn", "reason"} and isinstance(reason, dict) and isinstance(reason.get("kind"), str)):
        return Violation("turn-shape", "turn/end data must be exactly {turn >= 1, reason: {kind, ...}}")
    kind = reason["kind"]
    if kind in _PLAIN_END_KINDS or (kind == "aborted" and "reason" not in reason):
        ok = set(reason) == {"kind"}
    elif kind == "error" and "error" not in reason:
        # a pre-react-loop error reason; only its exact legacy forms upgrade
        ok = is_seq(reason.get("step")) and (
            (set(reason) == {"kind", "step", "failure"} and _legacy_failure(reason["failure"]))
            or (
                set(reason) in ({"kind", "step", "message"}, {"kind", "step", "message", "code"})
                and isinstance(reason.get("message"), str)
                and isinstance(reason.get("code", ""), str)
            )
        )
    else:
        ok = True
    return None if ok else Violation("turn-shape", f'turn/end reason of kind "{kind}" has an unexpected shape')


def _legacy_failure(failure: Any) -> bool:
    if not isinstance(failure, dict) or not {"message", "code"} <= set(failure):
        return False
    if not set(failure) <= {"message", "code", "status", "providerRetryAfterMs", "requestId"}:
        return False
    number = (int, float)
    return (
        isinstance(failure["message"], str)
        and isinstance(failure["code"], str)
        and all(isinstance(failure[k], number) and not isinstance(failure[k], bool)
                for k in ("status", "providerRetryAfterMs") if k in failure)
        and isinstance(failure.get("requestId", ""), str)
    )


def _turn_no(data: dict[str, Any]) -> bool:
    return is_safe_int(data.get("turn")) and data["turn"] >= 1


def _has_provider_model(value: Any) -> bool:
    return isinstance(value, dict) and is_nonempty_str(value.get("provider")) and is_nonempty_str(value.get("model"))


def reload_violations(dialect: Dialect, event: Any, *, time_optional: bool = False) -> list[Violation]:
    """Every reload-only problem of one event, in the host's checking order.

    v02 order: the JSONL write (format v4 row admission), the read (row admission again,
    message sources), validateStoredEvents (known type, adoptSessionEvent), then
    Session.fromRestore (envelope, request header, settlement, message shape). The
    lifecycle relationships need the log: `SessionLog` adds them.
    """
    found = envelope_violation(event, time_optional=time_optional)
    if found is not None:
        return [found]  # the other checks assume a sane envelope
    v4 = dialect.producer_owned_sources
    known = event.get("type") in dialect.known_event_types
    checks = [
        format_v4.row_violation(event) if v4 else None,
        format_v4.message_sources_violation(event) if v4 and known else None,
        known_type_violation(dialect, event),
        event_data_violation(event) if dialect.event_data_checked_on_append else None,
        request_header_violation(dialect, event),
        message_violation(dialect, event),
        settlement_violation(dialect, "assistant/attempt", event.get("data"))
        if dialect.lifecycle_checked and event.get("type") == "assistant/attempt" else None,
        turn_shape_violation(dialect, event),
    ]
    return [v for v in checks if v is not None]
