"""Land an append plan: validate the whole plan as the host would, then let the shim
append it in one synchronous batch behind a precondition.

The plan is rebuilt from the current mirror on every attempt, so seqs it cites for its
own events (a summary cited by the replacement after it) are always right. If the log
moved between planning and applying, the shim refuses without appending; by then the new
events have reached the mirror (the shim flushes them before replying) and we replan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from turn_memory import faults
from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import Expectation
from turn_memory.host.surface import SessionLog, SurfaceError
from turn_memory.runtime.mirror import MirroredSession


class PlanKind(Enum):
    """What a plan is (fault injection targets turn landings)."""

    #: a turn's pending marker, or its no-op landing (content unchanged)
    TURN_MARKER = "turn-marker"
    #: a compressed turn's rewrite
    TURN_LANDING = "turn-landing"
    #: a compaction transaction's events (start, commit, the closing end)
    COMPACTION = "compaction"


@dataclass
class Plan:
    #: host-shaped events without seq/time: {type, data, surfaceOp?, sourceEventSeqs?}
    events: list[dict[str, Any]]
    #: surface spans that must be unchanged when the shim applies the plan
    spans: list[list[int]] = field(default_factory=list)
    label: str = ""
    kind: PlanKind = field(kw_only=True)


class LandingError(Exception):
    """Nothing was appended."""


class PlanInvalid(LandingError):
    """The surface model refused the plan: a planning bug, caught before the host saw it."""


class SpanMoved(LandingError):
    """The surface the plan replaces changed underneath it."""


class LogKeptMoving(SpanMoved):
    """Every attempt found the log longer than it was planned on: nothing was appended, and
    a later attempt may well succeed."""


class PartialLanding(Exception):
    """The host threw after some events were appended: reported loudly, never hidden."""

    def __init__(self, message: str, appended: int):
        super().__init__(message)
        self.appended = appended


def stamp(log: SessionLog, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as the host would commit them: consecutive seqs after the log."""
    now = int(time.time() * 1000)
    return [{"type": e["type"], "seq": len(log) + i, "time": now,
             **{k: v for k, v in e.items() if k != "type"}} for i, e in enumerate(events)]


def check_spans(log: SessionLog, spans: list[list[int]]) -> None:
    nodes = log.nodes
    for span in spans:
        try:
            at = log.index_of(span[0])
        except (SurfaceError, ValueError, KeyError):
            raise SpanMoved(f"seq {span[0]} is no longer on the surface") from None
        if nodes[at:at + len(span)] != span:
            raise SpanMoved(f"span {span[0]}..{span[-1]} is no longer contiguous on the surface")


def validate(log: SessionLog, plan: Plan) -> list[dict[str, Any]]:
    check_spans(log, plan.spans)
    if plan.kind is PlanKind.TURN_LANDING and faults.active(faults.CORRUPT_TURN_PLAN):
        next(e for e in plan.events if "sourceEventSeqs" in e).pop("sourceEventSeqs")
    stamped = stamp(log, plan.events)
    try:
        log.check_plan(stamped)
    except SurfaceError as exc:
        raise PlanInvalid(f"{plan.label or 'plan'} refused by the surface model: {exc}") from exc
    return stamped


async def land(session: MirroredSession, port: HostPort, build: Callable[[SessionLog], Plan],
               attempts: int = 4) -> list[int]:
    """Apply the plan `build` makes from the current log; returns the appended seqs."""
    for _ in range(attempts):
        if session.desynced:
            await session.wait_for_length(len(session.log))
        log = session.log
        plan = build(log)
        validate(log, plan)
        if plan.kind is PlanKind.TURN_LANDING and faults.fire(faults.KILL_BEFORE_APPLY):
            faults.die()
        if plan.kind is PlanKind.TURN_LANDING and faults.active(faults.REFUSE_TURN_LANDING):
            raise LandingError("host refused the plan: append-threw (fault-injected)")
        base = len(log)
        result = await port.apply(session.id, Expectation(logLength=base, spans=plan.spans), plan.events, plan.label)
        if result.ok:
            # the shim flushed the appended events before replying: the mirror has them now
            await session.wait_for_length(base + len(plan.events))
            return result.seqs
        if result.reason == "log-moved" and result.logLength is not None:
            await session.wait_for_length(result.logLength)
            continue
        if result.reason == "span-moved":
            raise SpanMoved(result.detail or "the replaced span changed")
        if result.reason == "append-threw":
            raise PartialLanding(f"host refused an append after {result.appended} of {len(plan.events)} events: "
                                 f"{result.detail}", result.appended)
        raise LandingError(f"host refused the plan: {result.reason} {result.detail or ''}".strip())
    raise LogKeptMoving("the session log kept moving while landing")
