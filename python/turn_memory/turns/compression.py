"""What a turn job compresses: the turn's current surface nodes, and its working surface.

`surface_positions` re-reads the turn from the surface (when it is marked, and again when its
worker is about to start: a checkpoint may have taken it meanwhile). A `Compression` exists
once the turn has a working surface: an editor the workers edit, or one a previous process
finished and kept in its sidecar; everything after that point (the sidecar, the landing
check, the landing) reads it, never a job that might have none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from turn_memory.host.surface import SessionLog
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.recovery import turn_nodes

log = logging.getLogger("turn_memory.turns")


@dataclass
class Compression:
    #: the turn's surface nodes it was computed on: what its landing replaces
    positions: list[int]
    editor: TurnNodeEditor
    #: who wrote it: worker ids ("saved1"… when restored from a sidecar), how each started,
    #: and their model requests (a batch's turns share their worker run's)
    workers: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    requests: int = 0


def surface_positions(log_: SessionLog, turn: int, where: str) -> list[int] | None:
    """The turn's current surface nodes, or None (logged) when it cannot be compressed.

    0.2 commits a `developer/message` inside the step whose tool list changed (turn-memory's
    memory tools joining the request that first needs them): it is no node of the turn's and
    stays where it is; the turn lands node by node around it (`split_by_host_message`)."""
    nodes = turn_nodes(log_, turn)
    if not nodes:
        log.info("%s: skipped: no current surface nodes (shadowed by a checkpoint?)", where)
        return None
    at = log_.index_of(nodes[0])
    spanned = log_.nodes[at:log_.index_of(nodes[-1]) + 1]
    members = set(nodes)
    if any(log_.events[s]["type"] != "developer/message" for s in spanned if s not in members):
        log.warning("%s: skipped: the turn's nodes are not contiguous on the surface", where)
        return None
    if log_.events[nodes[0]]["type"] != "user/message":
        log.warning("%s: skipped: the turn does not start with a user node", where)
        return None
    return nodes


def split_by_host_message(log_: SessionLog, positions: list[int]) -> bool:
    """Whether a host message (0.2's tool-registry developer message) sits between the turn's
    nodes: such a turn lands node by node, its assistant nodes kept, whatever
    `turns.assistantNodes` says, since replacing the whole turn would take the message away."""
    return log_.index_of(positions[-1]) - log_.index_of(positions[0]) + 1 != len(positions)
