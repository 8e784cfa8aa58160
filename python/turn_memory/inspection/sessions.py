"""The sessions a DSH home holds, read from their headers only; and a session id from a prefix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turn_memory.logs.reader import SessionLogError, find_session_logs, read_session_header

SCHEMA = "turn-memory.sessions/1"


@dataclass(frozen=True)
class Session:
    id: str
    origin: str | None  # "subagent" for turn-memory's workers and other subagents
    cwd: str | None
    created_at: Any
    path: Path
    bytes: int
    modified: float

    @property
    def short_id(self) -> str:
        """The id without DSH 0.2's `session-` prefix: what a user types the start of."""
        return self.id.removeprefix("session-")

    @property
    def is_user(self) -> bool:
        return self.origin != "subagent"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "origin": self.origin, "cwd": self.cwd, "createdAt": self.created_at,
                "path": str(self.path), "bytes": self.bytes, "modified": self.modified}


def list_sessions(home: Path) -> tuple[list[Session], list[Path]]:
    """Every session under the home, newest first, and the logs whose header could not be read."""
    found: list[Session] = []
    unreadable: list[Path] = []
    for path in find_session_logs(home):
        try:
            header = read_session_header(path)
        except (SessionLogError, OSError):
            unreadable.append(path)
            continue
        stat = path.stat()
        found.append(Session(str(header.get("id")), header.get("origin"), header.get("cwd"), header.get("createdAt"),
                             path, stat.st_size, stat.st_mtime))
    found.sort(key=lambda s: (s.modified, str(s.path)), reverse=True)
    return found, unreadable


class NoSuchSession(LookupError):
    """No session, or more than one, answers to the id or prefix (the message names them)."""


def by_id_or_prefix(home: Path, wanted: str) -> Path:
    """The log of the session with this id, or the one session whose id starts with it."""
    sessions, _ = list_sessions(home)
    exact = [s for s in sessions if s.id == wanted]
    if exact:
        return exact[0].path
    matches = [s for s in sessions if s.id.startswith(wanted) or s.short_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0].path
    if not matches:
        raise NoSuchSession(f"no session {wanted!r} (an id, or the start of one) under {home}")
    shown = ", ".join(f"{s.id} ({'user' if s.is_user else s.origin})" for s in matches[:6])
    more = f" and {len(matches) - 6} more" if len(matches) > 6 else ""
    raise NoSuchSession(f"{wanted!r} is the start of {len(matches)} session ids under {home}: {shown}{more}")
