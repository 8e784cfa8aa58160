"""Which turn each model request of the demo belongs to, and what it costs.

Every request the scripted model received is priced in arrival order against one shared
prefix cache (`devtools.price_model`: DeepSeek's list prices, 4 characters per token), then
summed per turn: the agent's own requests (matched by the turn's user message) and the
requests of that turn's compression worker (its task names the turn; a batch's, its first
turn); `/compact`'s workers
count on their own. A scripted worker decides how much a turn shrinks, so these are the
demo's figures, not a forecast of a real provider's bill.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from turn_memory.devtools.fake_model import FakeRequest
from turn_memory.devtools.price_model import Request, canonical_text, output_tokens, price

#: a batch's task names its turns ("turns 2, 3 and 4"): its requests count on the first
_TURN_TASK = re.compile(r"Current nodes of turns? (\d+(?:(?:, | and )\d+)*)")
COMPACT = "/compact"


@dataclass
class TurnCost:
    agent_requests: int = 0
    worker_requests: int = 0
    agent_usd: float = 0.0
    worker_usd: float = 0.0
    prompt_tokens: int = 0

    @property
    def usd(self) -> float:
        return self.agent_usd + self.worker_usd


@dataclass
class Costs:
    by_turn: dict[int | str, TurnCost] = field(default_factory=dict)
    other_usd: float = 0.0  # session titles and anything unattributed
    other_requests: int = 0
    #: turn -> the first turn of the batch one worker compressed it in (where its requests count)
    batched_with: dict[int, int] = field(default_factory=dict)

    def of(self, key: int | str) -> TurnCost:
        return self.by_turn.setdefault(key, TurnCost())

    @property
    def total_usd(self) -> float:
        return sum(c.usd for c in self.by_turn.values()) + self.other_usd

    @property
    def requests(self) -> int:
        return sum(c.agent_requests + c.worker_requests for c in self.by_turn.values()) + self.other_requests


def _task_text(request: FakeRequest) -> str:
    return " ".join(str(m.get("content")) for m in request.messages if m.get("role") == "user")


def batch_turns(request: FakeRequest) -> list[int]:
    """The turns a worker's task names ([] when it names none)."""
    found = _TURN_TASK.search(_task_text(request))
    return [int(n) for n in re.findall(r"\d+", found[1])] if found else []


def owner(request: FakeRequest, turn_of_task: Mapping[str, int]) -> tuple[int | str | None, bool]:
    """(turn number, `/compact` or None; whether it is a worker's request)."""
    tools = set(request.tool_names)
    if "replace_turn_nodes" in tools:
        batch = batch_turns(request)
        return (batch[0] if batch else None), True
    if "replace_session_memory" in tools:
        return COMPACT, True
    if request.kind != "turn":
        return None, False
    return turn_of_task.get(request.last_user_text.strip()), False


def costs(requests: Sequence[FakeRequest], turn_of_task: Mapping[str, int]) -> Costs:
    priced = price(Request(canonical_text(r.tools, r.messages), output_tokens(r.reply)) for r in requests)
    out = Costs()
    for request, bill in zip(requests, priced):
        key, worker = owner(request, turn_of_task)
        if key is None:
            out.other_usd += bill.cost_usd
            out.other_requests += 1
            continue
        cost = out.of(key)
        cost.prompt_tokens += bill.prompt_tokens
        if worker and isinstance(key, int):
            out.batched_with.update({n: key for n in batch_turns(request)[1:]})
        if worker:
            cost.worker_requests += 1
            cost.worker_usd += bill.cost_usd
        else:
            cost.agent_requests += 1
            cost.agent_usd += bill.cost_usd
    return out
