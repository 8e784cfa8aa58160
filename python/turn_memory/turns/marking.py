"""The mark a completed turn gets at `turn/end`, before it waits for a worker (docs/decisions.md#turns-are-recovered-from-the-log).

A turn any worker may rewrite gets the `pending` marker at once (an exact-content copy of its
first user node), so that a restart finds it even while an earlier turn still compresses. A
turn no worker may rewrite (the model said nothing in it) gets the no-op marker instead and
no job work: it is recorded as seen and the model's requests do not change at all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from turn_memory.bridge.port import HostPort
from turn_memory.host.markers import marker_of
from turn_memory.runtime.interfaces import LandingOutcome
from turn_memory.runtime.land import LandingError, land
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.turns import eligibility
from turn_memory.turns.compression import surface_positions
from turn_memory.turns.landing import LandingContext, noop_plan, pending_plan
from turn_memory.turns.nodes import original_nodes

log = logging.getLogger("turn_memory.turns")


class Marked(Enum):
    #: the turn cannot be compressed (logged): nothing lands
    SKIPPED = "skipped"
    #: no worker may rewrite it: its no-op marker landed (or was refused)
    NO_OP = "no-op"
    #: marked pending (or already was): it waits for the compression policy
    PENDING = "pending"


@dataclass(frozen=True)
class Marking:
    marked: Marked
    #: DSH's token estimate of the turn's surface nodes
    tokens: int = 0
    #: NO_OP: why no worker may rewrite the turn, and how its no-op landing ended
    problem: str = ""
    landing: LandingOutcome = LandingOutcome.WAITING
    refusal: str = ""


async def mark(session: MirroredSession, port: HostPort, turn: int, where: str) -> Marking:
    """Mark the turn pending now (or land its no-op)."""
    positions = surface_positions(session.log, turn, where)
    if positions is None:
        return Marking(Marked.SKIPPED)
    originals = original_nodes(session.log, positions)
    tokens = session.log.tokens(positions)
    problem = eligibility.transcript_problem(originals)
    if problem is not None:
        # no worker could rewrite it into a user -> assistant turn without inventing one
        # recorded "seen" with a content-identical marker, the model's requests
        # do not change at all
        log.info("%s: %s; no-op marker, no worker", where, problem)
        try:
            await land(session, port, lambda log_: noop_plan(log_, positions[0], LandingContext(turn, None, 0)))
        except LandingError as exc:
            log.warning("%s: marker landing refused: %s", where, exc)
            return Marking(Marked.NO_OP, tokens, problem, LandingOutcome.REFUSED, str(exc))
        return Marking(Marked.NO_OP, tokens, problem, LandingOutcome.LANDED)
    if marker_of(session.log.events[positions[0]]) is None:
        try:
            await land(session, port, lambda log_: pending_plan(log_, positions[0], turn))
        except LandingError as exc:  # the compression can still land; a restart just will not know
            log.warning("%s: pending marker refused (%s); compressing anyway", where, exc)
    return Marking(Marked.PENDING, tokens)
