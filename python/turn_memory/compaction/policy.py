"""When session compaction runs, and over which span. Pure.

Pressure: the session's measured tokens against the routed model's context window; the
default trigger is 80%. The span runs from the first content node to a retained tail of at
least 16% of the window, both ends on unit boundaries (complete turns or standalone
checkpoints), tool pairs balanced, never the open turn. Context overflow ignores the
threshold and keeps only the open turn.

Pricing: DSH's token meter measures the session; here is what the engine prices itself (the
canonical surface, only when the meter refuses an assistant node a turn-memory landing wrote,
and the cheap estimate that gates the meter) and how that one refusal is recognised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from turn_memory.compaction.selection import Selection, first_content_index
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import estimate_header
from turn_memory.host.turn_index import LANDING_STEP
from turn_memory.host.units import Unit, surface_units

#: the cheap estimate (last measure + appended since) must reach this share of the
#: threshold before the O(surface) full measure runs again
CHEAP_MARGIN = 0.9
#: after pressure could not be relieved (a failed job, or passes that stayed over the
#: threshold), wait until the session grows by this share of the window before retrying:
#: never a compaction on every step
RETRY_GROWTH = 0.05


@dataclass(frozen=True)
class Measure:
    tokens: int
    nodes: dict[int, int]
    source: str  # "meter" | "surface"


def context_window(log_: SessionLog, since: int = 0, known: int | None = None) -> int | None:
    """The routed model's window from the latest request/context at or after `since`, else `known`."""
    for event in reversed(log_.events[since:]):
        if event["type"] == "request/context":
            return (event.get("data") or {}).get("contextWindow")
    return known


def _header_tokens(log_: SessionLog) -> int:
    for event in reversed(log_.events):
        if event["type"] == "request/header":
            return estimate_header((event.get("data") or {}).get("header") or {})
    return 0


def surface_prices(log_: SessionLog) -> dict[int, int]:
    """Every surface node's price; each event is priced once (`SessionLog.price`)."""
    price = log_.price
    return {s: p for s in log_.nodes if (p := price(s)) is not None}


def surface_measure(log_: SessionLog) -> Measure:
    """The canonical surface priced with the meter's heuristic, plus the request envelope."""
    nodes = surface_prices(log_)
    return Measure(sum(nodes.values()) + _header_tokens(log_), nodes, "surface")


@dataclass(frozen=True)
class LastMeasure:
    log_length: int
    tokens: int
    replace_generation: int


def cheap_estimate(log_: SessionLog, last: LastMeasure | None) -> int | None:
    """The last full measure plus what was appended since (no full pass); None without one.

    Replacements since the last measure are ignored: turn landings and checkpoints only
    land when they shrink what they replace, so this stays an upper bound and a landing
    never costs an extra full measure.
    """
    if last is None:
        return None
    added = 0
    for seq in reversed(log_.nodes):
        if seq < last.log_length:
            break
        added += log_.price(seq) or 0
    return last.tokens + added


#: what DSH's token meter throws for an assistant/message it cannot tie to a provider step
_NO_MATCHING_STEP = re.compile(r"token meter: assistant/message at seq (\d+) has no matching step/start event")


def refused_landing_seq(log_: SessionLog, error: Any) -> int | None:
    """The seq when `error` is the meter refusing an assistant node turn-memory landed (a
    replacement, one appended in a landing step, or one a landing appended after its head
    inside the loop's step) — the one refusal the canonical-surface fallback stands in for."""
    match = _NO_MATCHING_STEP.search(error) if isinstance(error, str) else None
    if match is None:
        return None
    seq = int(match.group(1))
    if not seq < len(log_):
        return None
    event = log_.events[seq]
    if event["type"] != "assistant/message":
        return None
    data = event.get("data") or {}
    origin = log_.index.origins.get(seq)
    ours = isinstance(event.get("surfaceOp"), dict) or data.get("step") == LANDING_STEP \
        or (origin is not None and origin[0] == "turn" and origin[1] != data.get("turn"))
    return seq if ours else None


@dataclass(frozen=True)
class Pressure:
    tokens: int
    window: int
    threshold_ratio: float

    @property
    def threshold(self) -> int:
        return int(self.window * self.threshold_ratio)

    @property
    def over(self) -> bool:
        return self.tokens >= self.threshold


def compactable_units(log: SessionLog) -> tuple[list[Unit], list[Unit]]:
    """(closed units in surface order, units of the open turn)."""
    open_turn = log.index.open_turn
    units = surface_units(log.nodes, log.index.origins, first_content_index(log))
    open_units = [u for u in units if open_turn is not None and u.key == ("turn", open_turn)]
    return [u for u in units if u not in open_units], open_units


def select_pressure_range(log: SessionLog, node_tokens: dict[int, int], retain_tokens: int) -> Selection | None:
    """The oldest span to fold, keeping a tail of at least `retain_tokens` (0: only the open turn)."""
    closed, open_units = compactable_units(log)
    nodes = log.nodes
    tail = sum(node_tokens.get(nodes[i], 0) for u in open_units for i in range(u.first, u.last + 1))
    cut = len(closed)  # units [cut:] are retained
    while cut > 0 and tail < retain_tokens:
        cut -= 1
        unit = closed[cut]
        tail += sum(node_tokens.get(nodes[i], 0) for i in range(unit.first, unit.last + 1))
    while cut > 0:
        first, last = closed[0].first, closed[cut - 1].last
        if log.balanced_before(nodes[first]) and log.balanced_after(nodes[last]):
            span = list(nodes[first:last + 1])
            if cut == 1 and closed[0].key[0] == "checkpoint":
                return None  # folding a lone checkpoint into itself gains nothing
            return Selection(span)
        cut -= 1
    return None
