"""`--model scripted`: a deterministic stand-in for the provider, so the whole pipeline runs
without a key and the tests can assert exact numbers. It measures the plumbing, not a model.

* workers: the scripted turn and session workers of `devtools.scripted_workers` (a turn
  keeps its user request and last answer; a segment its first requests and last answers);
* stock's summary: the same rule, as one summary (first three requests, last three answers);
* thought hints: the first sentence of each paragraph of the thought;
* probe answers: searches `read_session_history` with each planted fact's query (when the
  engine offers the tool), reads the best turn of each search, then quotes every one of the
  probe's facts that it can see in its context, and says "not found" for the rest;
* the judge: 5 x the share of the probe's facts the answer quotes.

Usage is counted with the price model's 4-characters-per-token heuristic, no cache hits.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from turn_memory.devtools.fake_model import FakeRequest, is_runtime_context
from turn_memory.devtools.price_model import canonical_text, output_tokens, tokens
from turn_memory.devtools.scripted_workers import worker_responder
from turn_memory.eval import routing
from turn_memory.eval.facts import flat, holds
from turn_memory.eval.provider import ChatRequest, Completion, Usage
from turn_memory.eval.routing import text_of
from turn_memory.eval.scenario import Fact, Probe
from turn_memory.history.session_history import NAME as HISTORY_TOOL

NOT_FOUND = "(not found in what I can see of this session)"
_LISTED_TURN = re.compile(r"^- turn (\d+) \(", re.M)


@dataclass(frozen=True)
class ProbeKey:
    """What the scripted answerer and judge are told about a probe (a real model never is)."""

    probe: Probe
    facts: tuple[Fact, ...]
    #: the answer being judged (judge requests only)
    answer: str = ""


def _first_sentence(paragraph: str) -> str:
    return re.split(r"(?<=[.!?])\s", paragraph.strip(), maxsplit=1)[0]


def scripted_hint(thought: str) -> str:
    return "\n".join(f"- {_first_sentence(p)}" for p in re.split(r"\n\s*\n", thought) if p.strip()) or "- (empty)"


def scripted_summary(messages: Sequence[dict[str, Any]]) -> str:
    """Stock's checkpoint by the scripted session worker's rule, in stock's section layout."""
    asks = [text_of(m.get("content")).strip() for m in messages[:-1]
            if m.get("role") == "user" and not is_runtime_context(text_of(m.get("content")))]
    answers = [text_of(m.get("content")).strip() for m in messages if m.get("role") == "assistant"]
    answers = [a for a in answers if a]
    return ("## Primary Request and Intent\n- " + (" / ".join(asks[:3]) or "(none)")
            + "\n\n## Current Work\n- " + (" / ".join(answers[-3:]) or "(none)"))


def _after_question(messages: Sequence[dict[str, Any]], question: str) -> list[dict[str, Any]]:
    for at in range(len(messages) - 1, -1, -1):
        if messages[at].get("role") == "user" and question in text_of(messages[at].get("content")):
            return list(messages[at + 1:])
    return []


@dataclass
class ScriptedProvider:
    label: str = "scripted"
    scripted: bool = True
    retried: Counter[str] = field(default_factory=Counter)  # never: nothing leaves the machine
    _calls: int = field(default=0, repr=False)

    def _call_id(self) -> str:
        self._calls += 1
        return f"call_scripted_{self._calls}"

    def complete(self, request: ChatRequest) -> Completion:
        purpose = request.purpose
        if purpose in (routing.TURN_WORKER, routing.SESSION_WORKER):
            reply = worker_responder(FakeRequest(0, "turn", "", {}, {"messages": request.messages, "tools": request.tools},
                                                 0.0)) or {"text": "Nothing to do."}
        elif purpose == routing.HINT:
            thought = text_of(request.messages[-1].get("content")) if request.messages else ""
            reply = {"text": scripted_hint(thought)}
        elif purpose == routing.SUMMARY:
            reply = {"text": scripted_summary(request.messages)}
        elif purpose == routing.PROBE:
            reply = self._answer(request)
        elif purpose == routing.JUDGE:
            reply = self._judge(request.probe)
        else:
            raise ValueError(f"the scripted provider has no answer for a {purpose} request")
        calls = [{"id": self._call_id(), "name": c["name"],
                  "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])}
                 for c in reply.get("tool_calls") or []]
        usage = Usage(tokens(canonical_text(request.tools, request.messages)), output_tokens(reply), 0)
        return Completion(text=reply.get("text", ""), tool_calls=calls, usage=usage)

    def _answer(self, request: ChatRequest) -> dict[str, Any]:
        key: ProbeKey = request.probe
        offered = any((t.get("function") or {}).get("name") == HISTORY_TOOL for t in request.tools)
        since = _after_question(request.messages, key.probe.question)
        results = [text_of(m.get("content")) for m in since if m.get("role") == "tool"]
        if offered and not results:
            return {"tool_calls": [{"name": HISTORY_TOOL, "arguments": {"query": f.query}} for f in key.facts]}
        if offered and not any(r.startswith("Turn ") for r in results):
            listed = list(dict.fromkeys(int(m.group(1)) for r in results if (m := _LISTED_TURN.search(r))))
            if listed:
                return {"tool_calls": [{"name": HISTORY_TOOL, "arguments": {"turn": n}} for n in listed]}
        seen = "\n".join(text_of(m.get("content")) for m in request.messages)
        return {"text": "\n".join(f"- {flat(f.text)}" if holds(seen, f) else f"- {NOT_FOUND}" for f in key.facts)}

    @staticmethod
    def _judge(key: ProbeKey) -> dict[str, Any]:
        found = sum(holds(key.answer, f) for f in key.facts)
        score = round(5 * found / len(key.facts), 2)
        return {"text": json.dumps({"score": score, "reason": f"{found} of {len(key.facts)} reference facts present"})}
