"""A completed turn's marker: what it owes at `turn/end`, and its landing at the next landing
point (docs/decisions.md#turns-are-recovered-from-the-log).

At `turn/end` nothing lands: `classify` only reads the turn. A turn any worker may rewrite owes
the `pending` marker (an exact-content copy of its first user node); a turn no worker may
rewrite (the model said nothing in it) owes the no-op marker instead and gets no job work. The
owed marker lands at the next turn's first landing point (`land_marker`), unless the turn's
rewrite lands there first or a checkpoint took the turn: a marker after the session's last turn
would open a phantom turn in DSH's Trajectory, and one per compressed turn would double its
CONTEXT rows. Until it lands, the engine's journal (`turns.results.ResultStore.owed`) keeps the
turn recoverable across restarts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from turn_memory.bridge.port import HostPort
from turn_memory.host.markers import marker_of
from turn_memory.runtime.land import LandingError, land
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.turns import eligibility
from turn_memory.turns.compression import surface_positions
from turn_memory.turns.landing import LandingContext, noop_plan, pending_plan
from turn_memory.turns.nodes import original_nodes

log = logging.getLogger("turn_memory.turns")


class Marked(Enum):
    #: the turn cannot be compressed (logged): it owes nothing
    SKIPPED = "skipped"
    #: no worker may rewrite it: it owes the no-op marker
    NO_OP = "no-op"
    #: it waits for the compression policy (owing the pending marker unless it already has one)
    PENDING = "pending"


@dataclass(frozen=True)
class Marking:
    marked: Marked
    #: DSH's token estimate of the turn's surface nodes
    tokens: int = 0
    #: NO_OP: why no worker may rewrite the turn
    problem: str = ""
    #: the marker the turn owes the log ("pending", "no-op"), or None
    owes: str | None = None


def classify(session: MirroredSession, turn: int, where: str) -> Marking:
    """What the completed turn is, and the marker it owes; lands nothing."""
    positions = surface_positions(session.log, turn, where)
    if positions is None:
        return Marking(Marked.SKIPPED)
    originals = original_nodes(session.log, positions)
    tokens = session.log.tokens(positions)
    problem = eligibility.transcript_problem(originals)
    if problem is not None:
        # no worker could rewrite it into a user -> assistant turn without inventing one:
        # recorded "seen" with a content-identical marker, the model's requests do not change at all
        log.info("%s: %s; no worker (its no-op marker lands at the next landing point)", where, problem)
        return Marking(Marked.NO_OP, tokens, problem, "no-op")
    owes = "pending" if marker_of(session.log.events[positions[0]]) is None else None
    return Marking(Marked.PENDING, tokens, owes=owes)


async def land_marker(session: MirroredSession, port: HostPort, turn: int, kind: str, where: str) -> bool:
    """Land the marker `turn` owes; False (logged) when it did not land. A turn a checkpoint took
    owes nothing any more."""
    positions = surface_positions(session.log, turn, where)
    if positions is None:
        return False
    try:
        if kind == "no-op":
            await land(session, port, lambda log_: noop_plan(log_, positions[0], LandingContext(turn, None, 0)))
        else:
            await land(session, port, lambda log_: pending_plan(log_, positions[0], turn))
    except LandingError as exc:  # the rewrite can still land; a restart has the journal
        log.warning("%s: %s marker refused: %s", where, kind, exc)
        return False
    return True
