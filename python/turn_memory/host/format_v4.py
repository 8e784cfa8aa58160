"""Session format v4 row rules (DSH 0.2.1-rc.2), one event at a time.

The JSONL backend runs these when it writes an event (`eventLine` -> the v4 codec's
`encodeEvent` -> `assertV4RowAdmission`) and again on every row it reads back; a failure at
write time kills the session at its next flush, one at read time refuses the whole log.
Live `session.append` runs none of them. Sources, all in
`@deepseek-ai/dsh-session-format-v3-to-v4/lib/index.js` (0.2.1-rc.2):
developer.js (assertV4DeveloperData), message-sources.js (assertV4SourceRowAdmission,
assertV4MessageSources), retired-syntax.js (assertV4RetiredSyntax), system-message.js
(assertV4SystemMessageFields), tool-role.js (assertV4ToolResultMessage), fork-result.js
(assertV4ForkResult). Each check returns the first `Violation` or None.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterator

from turn_memory.host.json_values import is_nonempty_str, is_seq
from turn_memory.host.violation import Violation

if TYPE_CHECKING:  # only annotations use it, and typing.TypeIs is 3.13+
    from typing_extensions import TypeIs

_TOOL_CHANGE = ("tool-addition", "tool-removal")
_IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")


def _obj(value: Any) -> TypeIs[dict[str, Any]]:
    """A JSON object (its keys are strings); narrows both ways, so `if not _obj(x): return` works."""
    return isinstance(value, dict)


def _positive(value: Any) -> bool:
    return is_seq(value) and value > 0


def _slot_messages(event: dict[str, Any], *, row: bool) -> Iterator[Any]:
    """The message slots the v4 reader interprets (mapEventMessages; the row form skips developer)."""
    etype, data = event.get("type"), event.get("data")
    if not _obj(data):
        return
    if etype == "user/message":
        yield data
    elif etype in ("system/message", "assistant/message", "tool/result") or (etype == "developer/message" and not row):
        yield data.get("message")
    elif etype in ("agent/inbox/spliced", "session/title-llm-request"):
        messages = data.get("inserted" if etype == "agent/inbox/spliced" else "messages")
        if isinstance(messages, list):
            yield from messages


# -- developer.js -------------------------------------------------------------------------


def _tool_change_violation(block: Any, developer: bool) -> Violation | None:
    if not _obj(block) or block.get("type") not in _TOOL_CHANGE:
        return None
    if not developer:
        return Violation("developer-role", f"format v4 {block['type']} requires developer role")
    if not is_nonempty_str(block.get("toolName")):
        return Violation("v4-developer", f"format v4 {block['type']} requires a nonempty toolName")
    if block["type"] == "tool-addition" and "tool" in block:
        return Violation("v4-developer", "format v4 tool-addition must omit inline tool definitions")
    return None


def _content_tool_changes(content: Any, developer: bool = False) -> Violation | None:
    if isinstance(content, list):
        for block in content:
            if (found := _tool_change_violation(block, developer)) is not None:
                return found
    return None


def developer_violation(event: dict[str, Any]) -> Violation | None:
    etype, data = event.get("type"), event.get("data")
    if not _obj(data):
        return Violation("v4-developer", "format v4 developer/message data must be an object") if etype == "developer/message" else None
    if etype == "developer/message":
        message = data.get("message")
        if not _obj(message) or message.get("role") != "developer":
            return Violation("v4-developer", "format v4 developer/message requires turn, step, and a developer message")
        if not (_positive(data.get("turn")) and _positive(data.get("step"))):
            return Violation("v4-developer", "developer/message turn and step must be positive")
        if (found := _content_tool_changes(message.get("content"), True)) is not None:
            return found
        source = message.get("source")
        if not (is_nonempty_str(message.get("id")) and isinstance(message.get("content"), list) and _obj(source)
                and is_nonempty_str(source.get("kind")) and source.get("kind") != "plugin"):
            return Violation("v4-developer", "format v4 developer message requires id, role, content, and a producer-owned source")
        additions = any(_obj(b) and b.get("type") == "tool-addition" for b in message["content"])
        if additions and not is_seq(data.get("headerSeq")):
            return Violation("v4-developer", "developer/message headerSeq must be a count")
        if not additions and "headerSeq" in data:
            return Violation("v4-developer", "format v4 developer/message must omit headerSeq without tool additions")
        return None
    for message in _slot_messages(event, row=True):
        if _obj(message):
            if message.get("role") == "developer":
                return Violation("developer-role", "format v4 developer/message and developer role must occur together")
            if (found := _content_tool_changes(message.get("content"))) is not None:
                return found
    if etype == "compaction/summary":
        for key in ("summary", "rawOutput"):
            if (found := _content_tool_changes(data.get(key))) is not None:
                return found
    return _stream_violation(event, tool_changes=True)


# -- message-sources.js -------------------------------------------------------------------


def source_row_violation(event: dict[str, Any]) -> Violation | None:
    """Write and read time: a retired `kind: 'plugin'` source in any message slot."""
    for message in _slot_messages(event, row=True):
        if _obj(message) and _obj(message.get("source")) and message["source"].get("kind") == "plugin":
            return Violation("retired-source", "format v4 message requires a producer-owned source kind "
                                               "(kind 'plugin' is retired; use 'plugin:<name>')")
    return None


def message_sources_violation(event: dict[str, Any]) -> Violation | None:
    """Read time (assertV4MessageSources): every declared message slot names its producer."""
    etype, data = event.get("type"), event.get("data")
    if _obj(data) and etype in ("developer/message", "system/message", "assistant/message", "tool/result") \
            and not _obj(data.get("message")):
        return Violation("message-shape", f"{etype} requires a message")
    if _obj(data) and etype in ("agent/inbox/spliced", "session/title-llm-request"):
        messages = data.get("inserted" if etype == "agent/inbox/spliced" else "messages")
        if not isinstance(messages, list) or not all(_obj(m) for m in messages):
            return Violation("message-shape", f"{etype} requires an array of message objects")
    for message in _slot_messages(event, row=False):
        source = message.get("source") if _obj(message) else None
        if not (_obj(source) and is_nonempty_str(source.get("kind")) and source.get("kind") != "plugin"):
            return Violation("retired-source" if _obj(source) and source.get("kind") == "plugin" else "message-source",
                             "format v4 message requires a producer-owned source kind")
    return None


# -- retired-syntax.js --------------------------------------------------------------------


def _wrapper_in(content: Any) -> bool:
    return isinstance(content, list) and any(_obj(b) and b.get("type") == "tool-result" for b in content)


def _stream_violation(event: dict[str, Any], *, tool_changes: bool = False) -> Violation | None:
    data = event.get("data")
    if event.get("type") not in ("assistant/message", "assistant/attempt") or not _obj(data):
        return None
    stream = data.get("stream")
    for entry in stream if isinstance(stream, list) else ():
        chunk = entry.get("chunk") if _obj(entry) and entry.get("type") == "chunk" else None
        if not _obj(chunk):
            continue
        if tool_changes:
            if chunk.get("type") == "block-end" and (found := _tool_change_violation(chunk.get("block"), False)):
                return found
            if chunk.get("type") == "block-start" and chunk.get("blockType") in _TOOL_CHANGE:
                return Violation("developer-role", "format v4 tool-change blocks require developer role")
        else:
            block = chunk.get("block")
            if (chunk.get("type") == "block-end" and _obj(block) and block.get("type") == "tool-result") or \
                    (chunk.get("type") == "block-start" and chunk.get("blockType") == "tool-result"):
                return Violation("tool-result-wrapper", "format v4 assistant stream must not contain a tool-result wrapper")
    return None


def retired_syntax_violation(event: dict[str, Any]) -> Violation | None:
    etype, data = event.get("type"), event.get("data")
    if etype in ("tool/code-dispatch-start", "tool/code-dispatch") and event.get("ignorable") is not True:
        return Violation("retired-syntax", f"format v4 rejects retired event type {etype}")
    if etype == "request/header":
        if not (_obj(data) and _obj(data.get("header"))):
            return Violation("request-header", "format v4 request/header requires data and header objects")
        if "system" in data["header"]:
            return Violation("retired-syntax", "format v4 request/header rejects retired header.system")
        return None
    if not _obj(data):
        return None
    wrapped = False
    if etype == "user/message":
        wrapped = _wrapper_in(data.get("content"))
    elif etype in ("developer/message", "assistant/message", "team/message/queued"):
        wrapped = _obj(data.get("message")) and _wrapper_in(data["message"].get("content"))
    elif etype in ("agent/inbox/spliced", "session/title-llm-request"):
        messages = data.get("inserted" if etype == "agent/inbox/spliced" else "messages")
        wrapped = isinstance(messages, list) and any(_obj(m) and _wrapper_in(m.get("content")) for m in messages)
    elif etype == "compaction/summary":
        wrapped = _wrapper_in(data.get("summary")) or _wrapper_in(data.get("rawOutput"))
    elif etype == "tool/ptc-dispatch":
        wrapped = _wrapper_in(data.get("content"))
    if wrapped:
        return Violation("tool-result-wrapper", f"format v4 {etype} content must not contain a released tool-result wrapper")
    return _stream_violation(event)


# -- system-message.js --------------------------------------------------------------------


def _image_ok(attachment: Any) -> bool:
    if not _obj(attachment) or not is_nonempty_str(attachment.get("attachmentId")):
        return False
    if attachment.get("mediaType") not in _IMAGE_TYPES or not is_seq(attachment.get("bytes")):
        return False
    if not (_positive(attachment.get("width")) and _positive(attachment.get("height"))):
        return False
    if "name" in attachment and not isinstance(attachment["name"], str):
        return False
    original = attachment.get("originalDimensions")
    return "originalDimensions" not in attachment or (
        _obj(original) and _positive(original.get("width")) and _positive(original.get("height")))


def system_fields_violation(event: dict[str, Any]) -> Violation | None:
    if event.get("type") != "system/message":
        return None
    data = event.get("data")
    bad = Violation("v4-system-message", "format v4 system/message needs positive turn/step and a well-formed system message")
    if not (_obj(data) and _positive(data.get("turn")) and _positive(data.get("step"))):
        return bad
    message = data.get("message")
    if not (_obj(message) and is_nonempty_str(message.get("id")) and message.get("role") == "system"
            and isinstance(message.get("content"), list)):
        return bad
    for block in message["content"]:
        if not (_obj(block) and is_nonempty_str(block.get("type"))):
            return bad
        kind = block["type"]
        if kind in ("text", "reasoning") and not isinstance(block.get("text"), str):
            return bad
        if kind == "tool-call" and not (is_nonempty_str(block.get("id")) and is_nonempty_str(block.get("name"))
                                        and isinstance(block.get("arguments"), str)):
            return bad
        if kind == "image" and not _image_ok(block.get("attachment")):
            return bad
        if kind == "tool-result":
            return Violation("tool-result-wrapper", "format v4 system content rejects retired tool-result wrappers")
    return None


# -- tool-role.js / fork-result.js ----------------------------------------------------------


def tool_result_violation(event: dict[str, Any]) -> Violation | None:
    """The first-class tool-role message (no rc8 `tool-result` wrapper block)."""
    if event.get("type") != "tool/result":
        return None
    data = event.get("data")
    if not _obj(data) or not _obj(data.get("message")):
        return Violation("v4-tool-result", "format v4 tool/result data and message must be objects")
    message = data["message"]
    source = message.get("source")
    if not is_nonempty_str(message.get("id")):
        return Violation("message-id", "format v4 tool/result requires a first-class message with a string id")
    if message.get("role") != "tool":
        return Violation("message-role", "format v4 tool/result requires a tool-role message")
    call_id = message.get("toolCallId")
    if not is_nonempty_str(call_id) or not _obj(source) or source.get("callId") != call_id:
        return Violation("tool-call-id", "format v4 tool/result requires toolCallId matching its tool source")
    if source.get("kind") != "tool":
        return Violation("message-source", "format v4 tool/result requires a tool source")
    if not isinstance(message.get("content"), list):
        return Violation("message-content", "format v4 tool/result requires array content")
    if _wrapper_in(message["content"]):
        return Violation("tool-result-wrapper", "format v4 tool/result content must not contain a released tool-result wrapper")
    if "isError" in message and not isinstance(message["isError"], bool):
        return Violation("v4-tool-result", "format v4 tool/result isError must be boolean when present")
    if "error" in data and message.get("isError") is not True:
        return Violation("tool-error", "format v4 tool/result carries error metadata for a non-error tool result")
    return None


_DIGITS = re.compile(r"^(0|[1-9]\d*)$")


def fork_result_violation(event: dict[str, Any]) -> Violation | None:
    """A fork's synthetic not-started result keeps its exact identity (also when rewritten)."""
    if event.get("type") != "tool/result" or not _obj(event.get("data")):
        return None
    data = event["data"]
    error, message = data.get("error"), data.get("message")
    if not (_obj(error) and error.get("code") == "TOOL_NOT_STARTED" and _obj(message)
            and isinstance(message.get("id"), str) and message["id"].startswith("forked-tool-result-")):
        return None
    source = message.get("source")
    call_id = source.get("callId") if _obj(source) else None
    prefix = f"forked-tool-result-{call_id}-"
    suffix = message["id"][len(prefix):]
    op = event.get("surfaceOp")
    replacement = _obj(op) and op.get("op") == "replace"
    sources = event.get("sourceEventSeqs")
    content = message.get("content")
    text = content[0] if isinstance(content, list) and len(content) == 1 else None
    # a str call_id came from a dict source; `_obj(source)` restates that for the checker
    ok = (isinstance(call_id, str) and _obj(source) and message["id"].startswith(prefix) and bool(_DIGITS.match(suffix))
          and error.get("name") == "ToolNotStartedError" and message.get("role") == "tool" and message.get("isError") is True
          and message.get("toolCallId") == call_id and source.get("kind") == "tool"
          and _obj(text) and text.get("type") == "text" and isinstance(text.get("text"), str))
    if ok:
        sequence = int(suffix)
        if replacement:
            ok = isinstance(sources, list) and sources == [sequence] and sequence < event.get("seq", -1)
        else:
            ok = sequence == event.get("seq") and "sourceEventSeqs" not in event and op == "append"
    return None if ok else Violation("v4-fork-result", "invalid V4 not-started fork result")


def row_violation(event: dict[str, Any]) -> Violation | None:
    """assertV4RowAdmission, in the host's order."""
    for check in (developer_violation, source_row_violation, retired_syntax_violation, system_fields_violation,
                  tool_result_violation, fork_result_violation):
        if (found := check(event)) is not None:
            return found
    return None
