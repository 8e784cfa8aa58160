"""Read DSH session logs straight from disk (no DSH process needed).

Layout (dsh-session-persistence-jsonl): ``<sessions root>/<project key>/<session dir>/`` holds
``session.jsonl.zstd`` (0.1.0-rc.8 default), ``session.jsonl`` (``compression: none``) or
``session.v4.jsonl.zstd`` (0.2.0-rc.2). The project key is ``--<cwd with separators as ->--``
(or ``_no-cwd``); the session dir is the session id with unsafe code units escaped as ``~XXXX``.

A ``.zstd`` log is independent Zstandard frames back to back: one for the header line, one
per append batch. ``zstandard.ZstdDecompressor().decompress()`` silently stops after the
FIRST frame, so frames are decoded one at a time here. The plaintext is JSONL: the first
line is the header (``type: "session"``), every other line an event, except that runs of
streamed deltas are packed into storage rows (``text-chunks`` / ``reasoning-chunks`` /
``tool-call-chunks``) which expand back into the exact ``assistant/chunk`` events.

Like DSH's own loader, a torn tail (an incomplete last frame, a last line without its
newline: the writer was interrupted or is still writing) is dropped; anything malformed
before it raises :class:`SessionLogError`.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import zstandard

from turn_memory.host.session_dirs import encode_segment

# Preferred first when one session dir holds more than one artifact.
LOG_NAMES = ("session.v4.jsonl.zstd", "session.jsonl.zstd", "session.v4.jsonl", "session.jsonl")
_LOG_NAME_RE = re.compile(r"^session(\.v\d+)?\.jsonl(\.zstd)?$")
CHUNK_ROW_TYPES = ("text-chunks", "reasoning-chunks", "tool-call-chunks")


class SessionLogError(ValueError):
    """The log is corrupt or not a DSH session log (message says where)."""


# --------------------------------------------------------------------------- locating

def _sessions_dir(root: Path) -> Path:
    """Accept either $DSH_HOME or $DSH_HOME/sessions (project keys never equal 'sessions')."""
    return root / "sessions" if (root / "sessions").is_dir() else root


def find_session_logs(root: str | os.PathLike[str]) -> list[Path]:
    """Every session log under ``root``, oldest first (by mtime, then path)."""
    found: list[Path] = []
    for dirpath, _dirs, files in os.walk(_sessions_dir(Path(root))):
        found += [Path(dirpath) / f for f in files if _LOG_NAME_RE.match(f)]
    return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)))


def session_log_for(root: str | os.PathLike[str], session_id: str) -> Path:
    """The log of ``session_id`` under ``root``; FileNotFoundError if there is none."""
    sessions = _sessions_dir(Path(root))
    if sessions.is_dir():
        seg = encode_segment(session_id)
        for project in sorted(p for p in sessions.iterdir() if p.is_dir()):
            for name in LOG_NAMES:
                candidate = project / seg / name
                if candidate.is_file():
                    return candidate
    # Layout drift (another host version): fall back to reading headers.
    for path in find_session_logs(root):
        try:
            if read_session_header(path).get("id") == session_id:
                return path
        except SessionLogError:
            continue
    raise FileNotFoundError(f"no session log for {session_id!r} under {root}")


# --------------------------------------------------------------------------- decoding

def _decompress_frames(data: bytes, path: Path, max_frames: int | None = None) -> tuple[bytes, bool]:
    """Concatenated plaintext of every frame, and whether the last frame was torn."""
    dctx = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    rest, offset, frames = data, 0, 0
    while rest and (max_frames is None or frames < max_frames):
        obj = dctx.decompressobj()
        try:
            out.append(obj.decompress(rest))
        except zstandard.ZstdError as exc:  # bad magic, bad checksum, corrupt block
            raise SessionLogError(f"{path}: zstd frame at byte {offset} is corrupt: {exc}") from exc
        if not obj.eof:
            return b"".join(out), True  # EOF inside the last frame: a torn append
        offset += len(rest) - len(obj.unused_data)
        rest = obj.unused_data
        frames += 1
    return b"".join(out), False


def _plaintext(path: Path, max_frames: int | None = None) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".zstd"):
        return _decompress_frames(data, path, max_frames)[0]
    return data


def _complete_lines(text: bytes) -> list[bytes]:
    """Newline-terminated lines only; an unterminated last line is a torn write."""
    lines = text.split(b"\n")
    return lines[:-1]  # the final piece is b"" (clean end) or a torn record


def _parse_header(line: bytes, path: Path) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except ValueError as exc:
        raise SessionLogError(f"{path}: header line is not JSON") from exc
    if not isinstance(header, dict) or header.get("type") != "session":
        raise SessionLogError(f"{path}: first line is not a session header (type 'session')")
    return header


def read_session_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Just the header (decodes the first frame only)."""
    path = Path(path)
    lines = _complete_lines(_plaintext(path, max_frames=1))
    if not lines:
        raise SessionLogError(f"{path}: empty or header-less session log")
    return _parse_header(lines[0], path)


def _malformed(tag: object, why: str) -> SessionLogError:
    # the row's "type" as found: a malformed row may lack it or hold a non-string
    return SessionLogError(f"malformed {tag} storage row: {why}")


# exact types: a bool is not a number here, as in JSON
_NUM = (int, float)
_ROW_KEYS = {"type", "seq0", "time0", "data"}
_TEXT_KEYS = {"turn", "step", "index", "dt", "texts"}
_CALL_KEYS = {"turn", "step", "index", "id", "dt", "args"}
_NAMED_CALL_KEYS = _CALL_KEYS | {"name"}


def _all_str(values: list[Any]) -> bool:
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def _all_int(values: list[Any]) -> bool:
    try:
        return type(sum(values)) is int
    except TypeError:
        return False


def chunk_row_members(row: dict[str, Any]) -> list[str]:
    """Validate one storage row (as DSH's ``validateRow`` does) and return its payload strings.

    Member k stands for the ``assistant/chunk`` event with seq ``seq0 + k``. A malformed row
    is corruption, not something to skip (that would silently drop a whole run).
    """
    # keys() views compare with sets without building one: this runs for most lines of a log
    tag = row.get("type")
    if row.keys() != _ROW_KEYS:
        raise _malformed(tag, "envelope must be exactly {type, seq0, time0, data}")
    seq0 = row["seq0"]
    if type(seq0) is not int or seq0 < 0 or type(row["time0"]) is not int:
        raise _malformed(tag, "seq0 must be a non-negative integer and time0 an integer")
    data = row["data"]
    if type(data) is not dict:
        raise _malformed(tag, "data must be an object")
    if tag == "tool-call-chunks":
        if data.keys() != _CALL_KEYS and data.keys() != _NAMED_CALL_KEYS:
            raise _malformed(tag, "data must be exactly {turn, step, index, id, name?, dt, args}")
        if type(data["id"]) is not str or ("name" in data and type(data["name"]) is not str):
            raise _malformed(tag, "id (and name when present) must be strings")
        members = data["args"]
    else:
        if data.keys() != _TEXT_KEYS:
            raise _malformed(tag, "data must be exactly {turn, step, index, dt, texts}")
        members = data["texts"]
    if not (type(data["turn"]) in _NUM and type(data["step"]) in _NUM and type(data["index"]) in _NUM):
        raise _malformed(tag, "turn/step/index must be numbers")
    # join and sum check every member at C speed (TypeError on a wrong type); a float gap
    # makes the sum a float. Only a boolean gap would pass: JSON writers do not produce one.
    if type(members) is not list or not members or not _all_str(members):
        raise _malformed(tag, "payload must be a non-empty string array")
    dt = data["dt"]
    if type(dt) is not list or len(dt) != len(members) - 1 or not _all_int(dt):
        raise _malformed(tag, f"dt must be {len(members) - 1} integers")
    return members


def expand_chunk_row(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Unpack one storage row into the ``assistant/chunk`` events it stands for.

    Member k has seq ``seq0 + k`` and time ``time0 + sum(dt[:k])``; the chunk carries the
    row's block ``index`` (and for tool calls its ``id`` and, only if the row has one,
    ``name``).
    """
    members = chunk_row_members(row)
    tag, data, dt = row["type"], row["data"], row["data"]["dt"]
    events: list[dict[str, Any]] = []
    t = row["time0"]
    for k, member in enumerate(members):
        if k:
            t += dt[k - 1]
        chunk: dict[str, Any]
        if tag == "tool-call-chunks":
            chunk = {"type": "tool-call-delta", "index": data["index"], "id": data["id"]}
            if "name" in data:
                chunk["name"] = data["name"]
            chunk["argumentsDelta"] = member
        else:
            kind = "text-delta" if tag == "text-chunks" else "reasoning-delta"
            chunk = {"type": kind, "index": data["index"], "text": member}
        events.append({"type": "assistant/chunk", "seq": row["seq0"] + k, "time": t,
                       "data": {"turn": data["turn"], "step": data["step"], "chunk": chunk}})
    return events


def decode_record(value: Any) -> list[dict[str, Any]]:
    """One parsed JSONL line -> the session events it stores (rows expand, others pass)."""
    if isinstance(value, dict) and value.get("type") in CHUNK_ROW_TYPES:
        return expand_chunk_row(value)
    return [value]


def read_session_log(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, events)`` of a session log, chunk rows expanded, seqs checked 0..n-1."""
    path = Path(path)
    lines = _complete_lines(_plaintext(path))
    if not lines:
        raise SessionLogError(f"{path}: empty or header-less session log")
    header = _parse_header(lines[0], path)
    events: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise SessionLogError(f"{path}:{lineno}: event line is not JSON") from exc
        try:
            decoded = decode_record(value)
        except SessionLogError as exc:
            raise SessionLogError(f"{path}:{lineno}: {exc}") from exc
        for event in decoded:
            seq = event.get("seq") if isinstance(event, dict) else None
            if seq != len(events):
                raise SessionLogError(
                    f"{path}:{lineno}: seq gap: expected seq {len(events)}, got {seq!r} "
                    f"(type {event.get('type') if isinstance(event, dict) else type(event).__name__})")
            events.append(event)
    return header, events
