"""Which completed turns get a compression worker (D-001 leaves the policy to the host).

Pure. A worker is a model request (usually one or two) that reads the whole raw turn as
uncached input, at about ten times the price of the cached context it saves on every later
request. It pays off once enough later requests carry the smaller turn: about
10 × (turn + ~350 tokens of per-job overhead) / (what the rewrite saves), roughly 20
requests for a 600-token turn and 17 for a 1,000-token one, but 30 and more for a turn of a
few hundred tokens, which can barely get shorter anyway. So a turn below
`turns.minTurnTokens` (DSH's own token estimate of its surface nodes) gets the no-op marker
and no worker; `bench/session_cost.py` is how the default was chosen (README). A turn in
which the model said nothing (no assistant text) cannot be rewritten into a user ->
assistant turn without inventing one (D-008), whatever its size. A hand-off turn (the model
called `continue_after_turn_compression`) asked for its compression, and its follow-up only
runs on the compressed turn (issue 12): it gets a worker whatever its size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from turn_memory.config import TurnConfig
from turn_memory.turns.nodes import OriginalNode


@dataclass(frozen=True)
class Eligibility:
    eligible: bool
    #: DSH's token estimate of the turn's surface nodes
    tokens: int
    #: why not (for the log); empty when eligible
    reason: str = ""


def decide(originals: Sequence[OriginalNode], tokens: int, config: TurnConfig,
           handoff: bool = False) -> Eligibility:
    """Whether a worker should compress this turn (`tokens`: its surface nodes' price,
    `SessionLog.tokens`; `handoff`: the turn ended with a hand-off that waits for its compression)."""
    if not any(o.role == "assistant" and o.text.strip() for o in originals):
        return Eligibility(False, tokens, "no assistant transcript")
    if handoff:
        return Eligibility(True, tokens)
    if tokens < config.minTurnTokens:
        return Eligibility(False, tokens, f"{tokens} tokens, below turns.minTurnTokens ({config.minTurnTokens}): "
                                          "a worker would cost more than the smaller turn saves")
    return Eligibility(True, tokens)
