"""A finished turn's validated working surface, kept in a sidecar file until it has landed.

A compression is ready long before it can land (at a later turn's pre-step): if DSH stops
or the session goes idle first, the next process would run the turn's workers again. So a
finished job writes what its landing needs — the editor's working nodes, the turn's surface
positions, and what they were computed on — to
`$DSH_HOME/turn-memory/results/<session>/<turn>.json` (written whole or not at all), and
recovery rebuilds the landing from it without a worker. A sidecar, never a session event:
an event type DSH does not know makes the log unreadable on the next start
(docs/decisions.md#only-event-types-the-host-knows).

A record only stands while the surface it replaces is exactly as it was: the same positions
are the turn's current nodes, and a digest of those events (seqs, types, content, provenance)
matches. Anything else — the turn landed since, a checkpoint took it, another log under the
same id — makes it stale; stale records are deleted with a log line, and so is a record once
its turn has landed.

Beside them, the session's journal of owed markers (`owed`): the turns that ended and whose
marker has not reached the log yet (`turns.marking`). Recovery redoes them like pending turns.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

from turn_memory.files import FILES, FileOps
from turn_memory.host.surface import SessionLog

log = logging.getLogger("turn_memory.turns")

VERSION = 1
#: a session's journal of the turns that ended and owe their marker, beside its records
OWED = "owed-markers.json"


def span_digest(session_log: SessionLog, positions: Sequence[int]) -> str:
    """A digest of the surface events a landing replaces, as the log holds them."""
    digest = hashlib.sha256()
    for seq in positions:
        event = session_log.events[seq]
        body = {k: event.get(k) for k in ("seq", "type", "data", "surfaceOp", "sourceEventSeqs")}
        digest.update(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    return digest.hexdigest()


class ResultStore:
    """The sidecar files of one DSH home."""

    def __init__(self, dsh_home: str | os.PathLike[str], files: FileOps = FILES) -> None:
        self.root = Path(dsh_home) / "turn-memory" / "results"
        #: replace and delete, retried while Windows refuses them for a file another process has open
        self.files = files

    def _dir(self, session_id: str) -> Path:
        # DSH's own session-directory escape; imported here: the log reader pulls in zstd,
        # which the engine need not load before its handshake
        from turn_memory.host.session_dirs import encode_segment

        return self.root / encode_segment(session_id)

    def path(self, session_id: str, turn: int) -> Path:
        return self._dir(session_id) / f"{turn}.json"

    def save(self, session_id: str, turn: int, record: dict[str, Any]) -> bool:
        """Write the record atomically; False (logged) when the home is not writable."""
        path = self.path(session_id, turn)
        data = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.files.write(path, data, fsync=True)  # whole file or none: a reader never sees half of it
            return True
        except OSError as exc:
            log.warning("session %s turn %d: could not keep the finished compression in %s (%s); a restart before "
                        "it lands redoes the turn", session_id, turn, path, exc)
            return False

    def load(self, session_id: str, turn: int) -> dict[str, Any] | None:
        path = self.path(session_id, turn)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self.delete(session_id, turn, f"unreadable ({exc})")
            return None
        if not isinstance(record, dict) or record.get("version") != VERSION or record.get("turn") != turn:
            self.delete(session_id, turn, "not a record of this version")
            return None
        return record

    def delete(self, session_id: str, turn: int, why: str | None = None) -> None:
        path = self.path(session_id, turn)
        try:
            self.files.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("session %s turn %d: could not delete %s: %s", session_id, turn, path, exc)
            return
        if why is not None:
            log.info("session %s turn %d: dropped the saved compression (%s)", session_id, turn, why)
        try:
            path.parent.rmdir()  # the session's last one
        except OSError:
            pass

    # -- the journal of owed markers (`turns.marking`) -----------------------------------
    def owed_path(self, session_id: str) -> Path:
        return self._dir(session_id) / OWED

    def owed(self, session_id: str) -> dict[int, str]:
        """The turns that ended and still owe their marker (turn -> "pending" or "no-op"), as
        the last process left them; empty when none (or unreadable, logged)."""
        path = self.owed_path(session_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return {int(turn): str(kind) for turn, kind in data["owed"].items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("session %s: the journal of owed markers %s is unreadable (%s); its turns are not recovered",
                        session_id, path, exc)
            return {}

    def save_owed(self, session_id: str, owed: dict[int, str]) -> None:
        """Replace the session's journal (whole file or none; no file when nothing is owed)."""
        path = self.owed_path(session_id)
        try:
            if not owed:
                self.files.unlink(path)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                data = json.dumps({"version": VERSION, "owed": {str(t): k for t, k in sorted(owed.items())}})
                self.files.write(path, data.encode("utf-8"), fsync=True)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("session %s: could not keep the journal of owed markers in %s (%s); a restart before they "
                        "land leaves turns %s raw", session_id, path, exc, ", ".join(map(str, sorted(owed))))

    def turns(self, session_id: str) -> list[int]:
        try:
            names = os.listdir(self._dir(session_id))
        except OSError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def make_record(session_log: SessionLog, session_id: str, turn: int, positions: Sequence[int],
                nodes: list[dict[str, Any]], workers: int, modes: Sequence[str], requests: int) -> dict[str, Any]:
    return {
        "version": VERSION, "session": session_id, "turn": turn,
        "positions": list(positions), "spanDigest": span_digest(session_log, positions),
        # the log it was computed on: its length, and the seq range the landing replaces
        "logLength": len(session_log), "seqRange": [min(positions), max(positions)],
        "nodes": nodes, "workers": workers, "workerModes": list(modes), "requests": requests,
        "savedAt": int(time.time() * 1000),
    }


def stale_reason(session_log: SessionLog, record: dict[str, Any], positions: Sequence[int]) -> str | None:
    """Why `record` no longer stands on this log (None: it does), given the turn's current nodes."""
    saved = record.get("positions")
    if saved != list(positions):
        return "the turn's surface moved since it was computed"
    if not isinstance(record.get("logLength"), int) or record["logLength"] > len(session_log):
        return "it was computed on a longer log"
    if record.get("spanDigest") != span_digest(session_log, positions):
        return "the turn's surface events differ from those it was computed on"
    return None
