"""Whether a finished turn compression lands at a landing point, and landing it there.

The plan is `turns.landing`'s; this module picks the moment. A landing belongs to the turn
(and, on 0.2, the loop's step) open when it was asked for: it is replanned on every attempt
and refused as *not now* (it stays ready for a later landing point) once that turn or step
closed. The checks ahead of a landing point (`refusal_in_step`, `refusal_in_next_turn`,
`block_in_step`) plan it as if the turn/step opening events were already appended and validate
both together. On 0.2 ready turns that reach the surface tail land together as one block
inside the loop's step (`land_block_into`), each keeping its shape.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from turn_memory.bridge.port import HostPort
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.interfaces import LandingOutcome
from turn_memory.runtime.land import LandingError, LogKeptMoving, Plan, land, validate
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.turns.compression import Compression
from turn_memory.turns.landing import (BlockTurn, LandingContext, LandingImpossible, lands_in_place, plan_block_landing,
                                       plan_landing)

log = logging.getLogger("turn_memory.turns")


def context(turn: int, compression: Compression, open_turn: int | None, open_step: int | None = None,
            ahead: int = 0) -> LandingContext:
    return LandingContext(turn, open_turn, len(compression.workers), tuple(compression.modes), open_step=open_step,
                          ahead=ahead, kept_assistants=compression.editor.keep_assistants)


def plan_into(log_: SessionLog, turn: int, compression: Compression, open_turn: int, open_step: int | None) -> Plan:
    """The landing while `open_turn` (and its step `open_step`) is open: raises a transient
    `LandingImpossible` once it is not."""
    if log_.index.open_turn != open_turn:
        raise LandingImpossible(f"turn {open_turn} is no longer open", transient=True)
    if open_step is not None and log_.index.open_step != (open_turn, open_step):
        raise LandingImpossible(f"step {open_step} of turn {open_turn} is no longer open", transient=True)
    return plan_landing(log_, compression.editor, compression.positions, context(turn, compression, open_turn, open_step))


def _refusal_after(log_: SessionLog, turn: int, compression: Compression, opening: list[dict[str, Any]],
                   open_turn: int, open_step: int | None) -> str | None:
    """Why the landing would be refused once `opening` (turn/step events) is appended, or None."""
    try:
        plan = plan_landing(log_, compression.editor, compression.positions,
                            context(turn, compression, open_turn, open_step, ahead=len(opening)))
        validate(log_, Plan([*opening, *plan.events], spans=plan.spans, label=plan.label, kind=plan.kind))
        return None
    except (LandingError, LandingImpossible) as exc:
        return str(exc)


def keeps_shape_anywhere(log_: SessionLog, compression: Compression, open_turn: int | None) -> bool:
    """Whether the turn lands node by node, keeping its shape wherever it sits on the surface."""
    return lands_in_place(log_, compression.editor, open_turn)


def _members(turns: list[tuple[int, Compression]], open_turn: int, open_step: int, ahead: int = 0) -> list[BlockTurn]:
    return [BlockTurn(c.editor, c.positions, context(turn, c, open_turn, open_step, ahead)) for turn, c in turns]


def block_in_step(log_: SessionLog, turns: list[tuple[int, Compression]], open_turn: int, step: int) -> int:
    """How many of the newest of these ready turns (oldest first) land as one block inside the
    loop's step `step` of `open_turn` (0.2: their shape kept), were the step opened now: the
    longest run that reaches the surface tail and the host takes; 0 when none does."""
    opening = [] if log_.index.open_step == (open_turn, step) else [
        {"type": "step/start", "data": {"turn": open_turn, "step": step}}]
    for start in range(len(turns)):
        members = _members(turns[start:], open_turn, step, ahead=len(opening))
        try:
            plan = plan_block_landing(log_, members)
            validate(log_, Plan([*opening, *plan.events], spans=plan.spans, label=plan.label, kind=plan.kind))
        except (LandingError, LandingImpossible):
            continue
        return len(turns) - start
    return 0


def refusal_in_step(log_: SessionLog, turn: int, compression: Compression, open_turn: int, step: int) -> str | None:
    """Why the landing would be refused inside the loop's step `step` of `open_turn`, which has
    not started yet (0.2: the pre-step defers the landing to the step's request), or None."""
    return _refusal_after(log_, turn, compression, [{"type": "step/start", "data": {"turn": open_turn, "step": step}}],
                          open_turn, step)


def refusal_in_next_turn(log_: SessionLog, turn: int, compression: Compression) -> tuple[int, str | None]:
    """The next turn, and why the landing would be refused at its landing point (its first
    pre-step; 0.2: its first step's request) were it to start now, or None."""
    next_turn = (log_.index.latest_turn or turn) + 1
    opening: list[dict[str, Any]] = [{"type": "turn/start", "data": {"turn": next_turn}}]
    step = None
    if not log_.dialect.plugin_steps:
        opening.append({"type": "step/start", "data": {"turn": next_turn, "step": 1}})
        step = 1
    return next_turn, _refusal_after(log_, turn, compression, opening, next_turn, step)


async def _attempt(session: MirroredSession, port: HostPort, build: Callable[[SessionLog], Plan],
                   where: str) -> tuple[LandingOutcome, str]:
    """Land the plan `build` makes: LANDED; REFUSED for good, with why (the turn stays raw and
    pending: a restart redoes it); or WAITING when it could not land now but may at a later
    landing point (the turn or step it was asked to land in is no longer open, the log kept
    moving)."""
    try:
        await land(session, port, build)
    except (LandingImpossible, LogKeptMoving) as exc:
        if isinstance(exc, LogKeptMoving) or exc.transient:
            log.info("%s: not landed now (%s); retrying at the next landing point", where, exc)
            return LandingOutcome.WAITING, str(exc)
        return LandingOutcome.REFUSED, str(exc)
    except LandingError as exc:  # incl. SpanMoved: a checkpoint took the turn, its nodes changed
        return LandingOutcome.REFUSED, str(exc)
    return LandingOutcome.LANDED, ""


async def land_block_into(session: MirroredSession, port: HostPort, turns: list[tuple[int, Compression]],
                          open_turn: int, open_step: int, where: str) -> tuple[LandingOutcome, str]:
    """Land consecutive ready turns as one block inside the loop's step `open_step` of
    `open_turn` (`_attempt`'s outcomes, for all of them together)."""
    def build(log_: SessionLog) -> Plan:
        if log_.index.open_step != (open_turn, open_step):
            raise LandingImpossible(f"step {open_step} of turn {open_turn} is no longer open", transient=True)
        return plan_block_landing(log_, _members(turns, open_turn, open_step))

    return await _attempt(session, port, build, where)


async def land_into(session: MirroredSession, port: HostPort, turn: int, compression: Compression, open_turn: int,
                    open_step: int | None, where: str) -> tuple[LandingOutcome, str]:
    """Land the compression while `open_turn` is open: in its pre-step (no step open), or inside
    the loop's own step `open_step` before that step commits anything (0.2); `_attempt`'s outcomes."""
    return await _attempt(session, port, lambda log_: plan_into(log_, turn, compression, open_turn, open_step), where)
