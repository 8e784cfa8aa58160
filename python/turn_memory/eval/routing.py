"""Which request is which: the one place that reads turn-memory's and DSH's requests apart.

The proxy answers the agent from the transcript and forwards what shapes the memory. A
request is told apart by what it carries, never by timing: worker requests by their editing
tools, a thought hint by its fixed system prompt, stock's summary by its final user message
(the compaction instruction, which is none of the scenario's words), DSH's title request by
having no tools. The worker-facing details (tool names, the texts of accepted calls) live
here only, so a protocol change is adapted in one place.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from turn_memory.devtools.fake_model import FakeRequest, is_runtime_context

AGENT = "agent"
CAPTURE = "capture"
TURN_WORKER = "turn-worker"
SESSION_WORKER = "session-worker"
HINT = "hint"
SUMMARY = "summary"
TITLE = "title"
#: the requests the eval itself makes after the replay
PROBE = "probe"
JUDGE = "judge"

#: a worker's editing tool -> its kind; the finish tools and what an accepted call answers
WORKER_TOOLS = {"replace_turn_nodes": TURN_WORKER, "replace_session_memory": SESSION_WORKER}
EDIT_TOOLS = ("replace_turn_nodes", "finish_turn_compression", "replace_session_memory", "finish_session_segment")
ACCEPTED = "Accepted"
RULE = re.compile(r"\[rule: ([\w-]+)\]")


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _last_words(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """(role, text) of the last message that is not host scaffolding (system, runtime context)."""
    for m in reversed(messages):
        text = text_of(m.get("content"))
        if m.get("role") == "system" or (m.get("role") == "user" and is_runtime_context(text)):
            continue
        return str(m.get("role")), text
    return "", ""


def said(text: str, user_texts: Iterable[str]) -> str | None:
    """Which scenario user message a message's text is: the host may append its own parts after
    the user's words (an attached image's description), never before them."""
    text = text.strip()
    return next((u for u in user_texts if text.startswith(u)), None)


def purpose_of(req: FakeRequest, *, user_texts: set[str], capture_text: str, hint_system: str) -> str:
    """What a request DSH sent is for. `user_texts`: every message the scenario's user sends."""
    tools = set(req.tool_names)
    for tool, kind in WORKER_TOOLS.items():
        if tool in tools:
            return kind
    if req.system_text.strip() == hint_system.strip():
        return HINT
    if req.kind == "compaction":  # DSH's DeepSeek route marks stock's summary with a header
        return SUMMARY
    if not tools:
        return TITLE
    role, text = _last_words(req.messages)
    if role == "user" and text.strip() == capture_text:
        return CAPTURE
    if role == "user" and said(text, user_texts) is None:
        return SUMMARY  # the compaction instruction ends the summarizer's replayed conversation
    return AGENT


@dataclass(frozen=True)
class Refusal:
    call_id: str
    tool: str
    #: the host rule id the error names, else the error's leading phrase
    rule: str
    text: str


def _rule_of(text: str) -> str:
    found = RULE.search(text)
    if found:
        return found.group(1)
    body = re.sub(r"^error:\s*", "", text.strip(), flags=re.I)
    head = re.split(r"[:(\n]", body, maxsplit=1)[0].strip().lower()
    head = re.sub(r"\b(n|r|m|p|s)\d+(\.\d+)?\b|t\d+\.\w+|'[^']*'|\d+", "#", head)  # ids and numbers vary
    return " ".join(head.split()[:6]) or "error"


def refusals(messages: list[dict[str, Any]]) -> list[Refusal]:
    """The editing calls a worker request shows as refused: every tool result of an edit or
    finish call that is not an acceptance."""
    names: dict[str, str] = {}
    out: list[Refusal] = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name", ""))
        if m.get("role") == "tool":
            tool = names.get(str(m.get("tool_call_id")), "")
            text = text_of(m.get("content"))
            if tool in EDIT_TOOLS and not text.lstrip().startswith(ACCEPTED):
                out.append(Refusal(str(m.get("tool_call_id")), tool, _rule_of(text), text))
    return out


def count_refusals(worker_requests: Iterable[list[dict[str, Any]]]) -> Counter[str]:
    """Refusals by rule over worker requests: a worker's later requests repeat its earlier
    results, so each refused call is counted once, by its call id."""
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    for messages in worker_requests:
        for r in refusals(messages):
            if r.call_id not in seen:
                seen.add(r.call_id)
                counts[r.rule] += 1
    return counts
