"""How each compressed turn landed, read from the log alone (`inspect`, the session bench).

- `in-place`: node by node where the turn stood (rc8; 0.2 with its assistant nodes kept;
  nothing changed): the user/assistant shape kept, nothing appended;
- `tail`: the turn's head replaced it and its other nodes were appended after it, inside the
  next step (0.2 with `turns.assistantNodes=rewrite`, the turn still ending the surface): the
  shape kept, in a later turn's step;
- `flattened`: one user message stands for the whole turn (`User: … Assistant: …`).
"""

from __future__ import annotations

from typing import Literal

from turn_memory.host.markers import is_compressed_turn, marker_of
from turn_memory.host.surface import SessionLog

Form = Literal["in-place", "tail", "flattened"]
FORMS: tuple[Form, ...] = ("in-place", "tail", "flattened")


def landing_forms(log: SessionLog) -> dict[int, Form]:
    """Turn -> how its latest landed compression sits, for every turn whose compression landed."""
    origins = log.index.origins
    out: dict[int, Form] = {}
    for event in log.events:
        got = marker_of(event)
        if got is None or got[0] != "compression":
            continue
        turn, seq = got[1], event["seq"]
        if is_compressed_turn(event):
            out[turn] = "flattened"
        elif event.get("surfaceOp") == "append" or any(  # a later turn of a tail block, or its first
                log.events[s]["type"] == "assistant/message" and log.events[s].get("surfaceOp") == "append"
                and origins.get(s) == ("turn", turn) for s in range(seq + 1, len(log.events))):
            out[turn] = "tail"
        else:
            out[turn] = "in-place"
    return out
