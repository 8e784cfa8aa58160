"""Ask each probe against the memory an engine left, and have the judge score the answer.

Every probe is asked on its own, from the same snapshot: the first request of the turn
after the session (its system prompt, tools and surface exactly as DSH built them), with
that turn's user message replaced by the probe (`prompts/eval-probe.md`). First **from
memory**: no tool at all, so the answer is what the memory kept (both engines alike). Then,
where the snapshot offers `read_session_history` (turn-memory), **with history**: the model may
call that tool (only that one: the probes test the memory, not the workspace), each call
answered by the tool's own code over the session's log as it stood at the snapshot. An answer
that needed the search says what the search finds, not what the memory kept: it is reported
apart. The judge (`prompts/eval-judge.md`) sees the question, the reference answer, the
planted facts and the answer, and replies with a 0-5 score in JSON.

A provider that is down (`ProviderDown`) is not an unanswered probe: it stops the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from turn_memory.eval import routing
from turn_memory.eval.provider import ChatRequest, Completion, Provider, ProviderDown, ProviderError, Usage
from turn_memory.eval.routing import text_of
from turn_memory.eval.scenario import Fact, Probe
from turn_memory.eval.scripted import ProbeKey
from turn_memory.history import session_history
from turn_memory.host.tools import ToolError, parse_args
from turn_memory.prompts import render_prompt

#: model requests one probe may make (its tool rounds, then one answer without tools)
MAX_PROBE_REQUESTS = 6
JUDGE_MAX_TOKENS = 400


@dataclass
class ProbeResult:
    probe: Probe
    answer: str = ""
    #: the read_session_history arguments the answer used, in order
    lookups: list[dict[str, Any]] = field(default_factory=list)
    score: float | None = None
    reason: str = ""
    #: the answer's requests, then the judge's
    usage: list[Usage] = field(default_factory=list)
    judge_usage: Usage | None = None
    error: str | None = None
    #: asked with read_session_history offered (False: from memory, no tool)
    with_history: bool = False


def history_answer(turns: dict[int, session_history.TurnRecord], arguments: str, max_chars: int) -> str:
    """What `read_session_history` answers to these arguments (JSON), from these turns."""
    try:
        args = parse_args(session_history.Args, arguments)
        if args.turn is not None:
            return session_history.read_turn(turns, args.turn, args.offset, max_chars)
        if args.query is not None:
            return session_history.search(turns, args.query, args.page)
        return session_history.catalog(turns, args.page)
    except ToolError as exc:
        return str(exc)


def offers_history(tools: Sequence[dict[str, Any]]) -> bool:
    """Whether the snapshot's tools hold read_session_history (turn-memory's do)."""
    return any((t.get("function") or {}).get("name") == session_history.NAME for t in tools)


def _question_at(messages: Sequence[dict[str, Any]], capture_text: str) -> int:
    for at in range(len(messages) - 1, -1, -1):
        m = messages[at]
        if m.get("role") == "user" and text_of(m.get("content")).strip() == capture_text:
            return at
    raise ValueError("the snapshot request does not hold the snapshot turn's message")


@dataclass
class ProbeAsker:
    provider: Provider
    #: the snapshot request's messages and tools
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    capture_text: str
    turns: dict[int, session_history.TurnRecord]
    max_read_chars: int
    #: offer read_session_history where the snapshot has it (False: the memory alone, no tool)
    use_history: bool = False

    def __post_init__(self) -> None:
        self._at = _question_at(self.messages, self.capture_text)
        self.history = [t for t in self.tools if self.use_history
                        and (t.get("function") or {}).get("name") == session_history.NAME]

    def _start(self, probe: Probe) -> list[dict[str, Any]]:
        question = render_prompt("eval-probe", {"question": probe.question}, {"history": bool(self.history)})
        messages = list(self.messages)
        messages[self._at] = {**messages[self._at], "content": question}
        return messages

    def ask(self, probe: Probe, facts: Sequence[Fact]) -> ProbeResult:
        result = ProbeResult(probe, with_history=bool(self.history))
        messages = self._start(probe)
        key = ProbeKey(probe, tuple(facts))
        for request in range(MAX_PROBE_REQUESTS):
            tools = self.history if request < MAX_PROBE_REQUESTS - 1 else []
            try:
                done = self.provider.complete(ChatRequest(routing.PROBE, messages, tools, probe=key))
            except ProviderDown:
                raise
            except ProviderError as exc:
                result.error = str(exc)
                return result
            result.usage.append(done.usage)
            if not done.tool_calls:
                result.answer = done.text.strip()
                return result
            messages = [*messages, done.assistant_message(), *self._tool_results(done, result)]
        result.error = "no answer within the request budget"
        return result

    def _tool_results(self, done: Completion, result: ProbeResult) -> list[dict[str, Any]]:
        out = []
        for call in done.tool_calls:
            if call["name"] == session_history.NAME:
                try:
                    result.lookups.append(json.loads(call["arguments"] or "{}"))
                except ValueError:
                    result.lookups.append({"raw": call["arguments"]})
                text = history_answer(self.turns, call["arguments"], self.max_read_chars)
            else:
                text = f"unknown tool {call['name']}: only {session_history.NAME} is available here"
            out.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        return out


_JSON = re.compile(r"\{.*\}", re.S)


def parse_verdict(text: str) -> tuple[float | None, str]:
    """(score 0-5, reason) from the judge's reply; (None, why) when it cannot be read."""
    found = _JSON.search(text or "")
    try:
        verdict = json.loads(found.group(0)) if found else None
        score = float(verdict["score"]) if isinstance(verdict, dict) else None
    except (ValueError, KeyError, TypeError):
        score = None
    if score is None or not 0 <= score <= 5:
        return None, f"unreadable verdict: {(text or '').strip()[:200]!r}"
    assert isinstance(verdict, dict)  # the score was read from it
    return score, str(verdict.get("reason", "")).strip()


def judge(provider: Provider, result: ProbeResult, facts: Sequence[Fact]) -> None:
    """Score `result` in place (an answer that never came scores 0)."""
    if result.error is not None:
        result.score, result.reason = 0.0, f"no answer: {result.error}"
        return
    probe = result.probe
    prompt = render_prompt("eval-judge", {
        "dimension": probe.dimension, "question": probe.question, "reference": probe.reference,
        "facts": "\n".join(f"- {f.text}" for f in facts), "answer": result.answer or "(empty)"})
    try:
        done = provider.complete(ChatRequest(routing.JUDGE, [{"role": "user", "content": prompt}],
                                             max_tokens=JUDGE_MAX_TOKENS, probe=ProbeKey(probe, tuple(facts), result.answer)))
    except ProviderDown:
        raise
    except ProviderError as exc:
        result.reason = f"the judge failed: {exc}"
        return
    result.judge_usage = done.usage
    result.score, result.reason = parse_verdict(done.text)
