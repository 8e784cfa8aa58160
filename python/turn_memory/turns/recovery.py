"""What a completed turn's durable state says about it (docs/decisions.md#turns-are-recovered-from-the-log).
Pure.

- Turns with a `pending` marker and no `compression` marker anywhere in the log were cut
  off between turn/end and landing: redo them. So are the turns the engine's journal says
  ended and still owed their marker (`owed`: the marker lands at the next turn's landing
  point, `turns.marking`), unless the log shows them landed since.
- A `compression` marker whose turn still shows raw reasoning on the surface is a stale
  no-op from a reasoning-unaware version: redo it too, unless the marker says its workers
  kept the assistant nodes (`keptAssistants`, 0.2's default), whose reasoning stays by design.
- A turn that ended with a hand-off still awaiting its automatic continuation is
  redone when it has not landed: the follow-up waits for that landing.
- Marker-free turns are never backfilled: they predate the plugin (or were never ours) —
  except turns that ended after the shim began watching the session in this process
  (`live_from`): the plugin saw them end while its engine was still starting or restarting.
"""

from __future__ import annotations

from typing import Iterable

from turn_memory.host.continuations import ContinuationLedger
from turn_memory.host.surface import SessionLog
from turn_memory.host.turn_index import TURN_NODE_TYPES

__all__ = ["TURN_NODE_TYPES", "turn_nodes", "turns_to_recover"]


def turn_nodes(log: SessionLog, turn: int) -> list[int]:
    """The current surface nodes of `turn`, in order (empty when shadowed by a checkpoint). O(turn)."""
    return log.index.turn_nodes(turn)


def turns_to_recover(log: SessionLog, live_from: int | None = None,
                     continuations: ContinuationLedger | None = None, owed: Iterable[int] = ()) -> list[int]:
    """The turns to redo, from the log's index: O(turns), never a pass over the log.
    `continuations`: the session's ledger (folded here from the log when not given)."""
    index = log.index
    continuations = continuations if continuations is not None else ContinuationLedger.of(log.events)
    completed, landed = index.turn_ends, index.landed
    redo = {t for t in index.pending - landed if t in completed}
    redo.update(t for t in owed if t in completed and t not in landed and index.turn_nodes(t))
    if live_from is not None:
        redo.update(t for t in index.ended_since(live_from) if t not in landed)
    redo.update(r.turn for r in continuations.awaiting() if r.turn not in landed)
    redo.update(t for t in landed if t in completed and index.has_raw_reasoning(t) and t not in index.kept_assistants)
    return sorted(redo)
