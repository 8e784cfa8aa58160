"""The agent's side of a replayed session: each agent request gets its recorded reply.

Which reply is read from the request itself, not from arrival order: the turn is the one
whose user message is the last scenario message in the request (user messages are unique
per scenario), the step is the number of assistant messages after it. So a request the
host retries still gets the right reply. When a compaction inside a turn folded the turn's
own user message into its checkpoint, the request holds no scenario message: it is the
step after the last one answered; the host may even ask once more after the turn's answer
(a step that follows its compaction), which gets the answer again and is noted. A request
past the end of a turn whose user message it still shows is off-script (a problem, answered
with the turn's answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turn_memory.eval.routing import said, text_of
from turn_memory.eval.scenario import Scenario, Step


@dataclass
class Replay:
    scenario: Scenario
    #: "turn N step S: why" for every request the transcript had no reply for
    off_script: list[str] = field(default_factory=list)
    #: requests after a turn's recorded answer that followed a compaction (answered with it again)
    extra: list[str] = field(default_factory=list)
    #: (turn, step) answered last, both from 0
    last: tuple[int, int] | None = None

    def _position(self, messages: list[dict[str, Any]]) -> tuple[int, int] | None:
        index = {t.user: i for i, t in enumerate(self.scenario.turns)}
        for at in range(len(messages) - 1, -1, -1):
            m = messages[at]
            user = said(text_of(m.get("content")), index) if m.get("role") == "user" else None
            if user is not None:
                return index[user], sum(1 for later in messages[at + 1:] if later.get("role") == "assistant")
        return None

    def reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        found = self._position(messages)
        folded = found is None
        if folded and self.last is not None:
            found = (self.last[0], self.last[1] + 1)  # its user message was folded into a checkpoint
        if found is None:
            self.off_script.append("a request with no scenario user message")
            return {"text": "I have nothing recorded for this request."}
        self.last = turn, step = found
        steps = self.scenario.turns[turn].steps
        if step >= len(steps):
            where = f"turn {turn + 1} step {step + 1}: the recording has {len(steps)} step(s)"
            (self.extra if folded else self.off_script).append(where)
            return reply_of(steps[-1], f"t{turn + 1}s{len(steps)}")
        return reply_of(steps[step], f"t{turn + 1}s{step + 1}")


def reply_of(step: Step, where: str) -> dict[str, Any]:
    """The FakeModel reply a recorded step is streamed back as. Tool-call ids are made from
    `where` (the turn and step): the log, and so the history search, is the same every run."""
    reply: dict[str, Any] = {}
    if step.text:
        reply["text"] = step.text
    if step.reasoning:
        reply["reasoning"] = step.reasoning
    if step.calls:
        reply["tool_calls"] = [{"id": f"call_{where}c{i + 1}", "name": "bash", "arguments": c.arguments()}
                               for i, c in enumerate(step.calls)]
    return reply
