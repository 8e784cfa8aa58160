"""turn-memory's durable markers, carried in message `source` (never a custom event type,
which would make the log unreadable on the next start).

A turn's first user node is replaced by an exact-content copy carrying
`{kind: 'plugin', plugin: 'turn-memory', phase, turn}`:
- `pending` at turn/end, before any worker starts (recovery redoes such turns);
- `compression` when the compressed turn lands (or the no-op copy, when nothing changed).
The marker survives a later session checkpoint shadowing it: recovery scans the whole
append-only log, not the surface.
"""

from __future__ import annotations

from typing import Any, Literal

PLUGIN = "turn-memory"
Phase = Literal["pending", "compression"]

#: the host's runtime-context snapshot author (rc8 dsh-system-prompt)
SNAPSHOT_PLUGIN = "@deepseek-ai/dsh-system-prompt"


def marker_source(phase: Phase, turn: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "plugin", "plugin": PLUGIN, "phase": phase, "turn": turn, **extra}


def marker_of(event: dict[str, Any]) -> tuple[Phase, int] | None:
    """(phase, turn) when `event` is a user/message carrying a turn-memory marker."""
    if event.get("type") != "user/message":
        return None
    source = (event.get("data") or {}).get("source") or {}
    if source.get("kind") == "plugin" and source.get("plugin") == PLUGIN:
        phase, turn = source.get("phase"), source.get("turn")
        if phase in ("pending", "compression") and isinstance(turn, int):
            return phase, turn
    return None


#: the source key naming the hand-off an automatic continuation follow-up carries (D-013)
CONTINUATION = "continuation"


def is_host_context(message: dict[str, Any]) -> bool:
    """Host/plugin scaffolding in the user role (runtime-context snapshots, automatic
    continuation follow-ups…): not human intent."""
    source = message.get("source") or {}
    return message.get("role") == "user" and source.get("kind") == "plugin" and (
        source.get("plugin") != PLUGIN or CONTINUATION in source)
