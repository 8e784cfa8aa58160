"""turn-memory's durable markers, carried in message `source` (never a custom event type,
which would make the log unreadable on the next start).

A turn's first user node is replaced by an exact-content copy whose source names
turn-memory as the producer (`dialect.plugin_source`: rc8 `{kind:'plugin',
plugin:'turn-memory', …}`, v02 `{kind:'plugin:turn-memory', …}`, which is also what format
v4 lifts a released v3 marker to), with `phase` and `turn`:
- `pending` at turn/end, before any worker starts (recovery redoes such turns);
- `compression` when the compressed turn lands (or the no-op copy, when nothing changed).
The marker survives a later session checkpoint shadowing it: recovery scans the whole
append-only log, not the surface. Markers are recognised in both spellings.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from turn_memory.host.dialect import OUR_PLUGIN, Dialect, is_human_source, is_plugin_source

Phase = Literal["pending", "compression"]


def marker_source(dialect: Dialect, phase: Phase, turn: int, **extra: Any) -> dict[str, Any]:
    return dialect.plugin_source(OUR_PLUGIN, phase=phase, turn=turn, **extra)


def marker_of(event: dict[str, Any]) -> tuple[Phase, int] | None:
    """(phase, turn) when `event` is a user/message carrying a turn-memory marker."""
    if event.get("type") != "user/message":
        return None
    source = (event.get("data") or {}).get("source") or {}
    if is_own_source(source):
        phase, turn = source.get("phase"), source.get("turn")
        if phase in ("pending", "compression") and isinstance(turn, int) and not isinstance(turn, bool):
            return phase, turn
    return None


def is_own_source(source: Any) -> bool:
    """A source naming turn-memory, in either host's spelling."""
    return is_plugin_source(source, OUR_PLUGIN)


#: the key of an automatic continuation follow-up's message source that names its request
CONTINUATION_KEY = "continuation"

#: a landed marker's `form` when one user message stands for the whole compressed turn (0.2's
#: fourth landing mode): the person's request and the agent's work, roles written out
COMPRESSED_TURN = "compressed-turn"


def is_compressed_turn(event: dict[str, Any]) -> bool:
    """A landed user message that stands for a whole compressed turn (`COMPRESSED_TURN`)."""
    return (marker_of(event) or ("",))[0] == "compression" and event_source(event).get("form") == COMPRESSED_TURN


def is_host_context(message: dict[str, Any]) -> bool:
    """Host/plugin scaffolding in the user role (runtime-context snapshots, checkpoints,
    automatic continuation follow-ups…): not human intent. A turn-memory marker copy of the
    person's words stays human."""
    source = message.get("source")
    if message.get("role") != "user" or not isinstance(source, dict) or not source.get("kind"):
        return False
    if is_own_source(source):
        return CONTINUATION_KEY in source
    return not is_human_source(source)


def is_host_context_at(events: Sequence[dict[str, Any]], seq: int) -> bool:
    """`is_host_context` of the user message at `seq`, through turn-memory's own copies.

    A marker copy names turn-memory as its producer, whatever it copies: the pending marker
    goes on a turn's first user node, which is the host's runtime-context snapshot whenever the
    snapshot precedes the person's words. Such a copy is host context exactly when every user
    message it cites (`sourceEventSeqs`, what the host records of its origin) is."""
    event = events[seq]
    message = event.get("data") or {}
    if marker_of(event) is None or CONTINUATION_KEY in (message.get("source") or {}):
        return is_host_context(message)
    cited = [s for s in event.get("sourceEventSeqs") or () if isinstance(s, int) and s < seq
             and events[s]["type"] == "user/message"]
    return bool(cited) and all(is_host_context_at(events, s) for s in cited)


def event_source(event: dict[str, Any]) -> dict[str, Any]:
    """The `source` of a node event's message ({} when it has none)."""
    data = event.get("data") or {}
    message = data if event["type"] == "user/message" else data.get("message") or {}
    source = message.get("source")
    return source if isinstance(source, dict) else {}
