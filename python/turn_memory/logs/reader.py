"""Read DSH session logs straight from disk (no DSH process needed).

Layout (dsh-session-persistence-jsonl): ``<sessions root>/<project key>/<session dir>/`` holds
``session.jsonl.zstd`` (0.1.0-rc.8 default), ``session.jsonl`` (``compression: none``) or
``session.v4.jsonl.zstd`` (0.2.0-rc.2). The project key is ``--<cwd with separators as ->--``
(or ``_no-cwd``); the session dir is the session id with unsafe code units escaped as ``~XXXX``.

A ``.zstd`` log is independent Zstandard frames back to back: one for the header line, one
per append batch. ``zstandard.ZstdDecompressor().decompress()`` silently stops after the
FIRST frame, so frames are decoded one at a time here. The plaintext is JSONL: the first
line is the header (``type: "session"``), every other line an event. Some fields are stored in
a compacted form, and the host expands them as it reads; so does this reader, by the
header's session format ``version`` (the host's loader picks its codec by it):

* formats 0-1 (0.1.x, rc8 writes 0): runs of streamed deltas are packed into storage rows
  (``text-chunks`` / ``reasoning-chunks`` / ``tool-call-chunks``) which expand back into the
  exact ``assistant/chunk`` events (dsh-session ``decodeStorageRecord``); format 2 and later
  nest the stream in the assistant event and have no such rows.
* formats 1 and later (0.2.x writes 4): a ``sourceEventSeqs`` run of 3+ consecutive seqs is
  stored as one ``[start, end]`` pair (dsh-session-format ``encodeSeqRanges`` /
  ``decodeSeqRanges``), expanded back into every seq.

Every other field is stored as the host holds it.

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

from turn_memory.host.dialect import Dialect
from turn_memory.host.dialects import DIALECTS, dialect_for_format, dialect_for_records
from turn_memory.host.json_values import is_seq
from turn_memory.host.session_dirs import encode_segment
from turn_memory.logs.frames import is_zstd

# Preferred first when one session dir holds more than one artifact.
LOG_NAMES = ("session.v4.jsonl.zstd", "session.jsonl.zstd", "session.v4.jsonl", "session.jsonl")
_LOG_NAME_RE = re.compile(r"^session(\.v\d+)?\.jsonl(\.zstd)?$")
CHUNK_ROW_TYPES = ("text-chunks", "reasoning-chunks", "tool-call-chunks")
#: the last session format whose logs pack chunk rows, and the first that stores seq ranges
LAST_CHUNK_ROW_FORMAT = 1
FIRST_SEQ_RANGE_FORMAT = 1


class SessionLogError(ValueError):
    """The log is corrupt or not a DSH session log (message says where)."""


class UnknownDialect(SessionLogError):
    """A session log that no known dialect writes, or whose content does not tell which wrote it."""


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
    if is_zstd(data[:64]):  # by content: a renamed copy reads the same
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


def expand_seq_ranges(event: dict[str, Any]) -> dict[str, Any]:
    """The event with its stored ``sourceEventSeqs`` as the host reads it: each ``[start, end]``
    pair expanded into ``start..end``. A malformed pair (not two seqs, start after end, not
    before the event's own seq, or seqs out of order around a pair) is corruption: the host
    refuses the whole log over it (released v2 codec ``decodeSeqRanges``)."""
    stored = event.get("sourceEventSeqs")
    if type(stored) is not list or not any(type(entry) is list for entry in stored):
        return event  # a plain list is the in-memory form already; the surface model judges it
    seq = event.get("seq")
    seqs: list[Any] = []
    for entry in stored:
        if type(entry) is not list:
            seqs.append(entry)
            continue
        if len(entry) != 2 or not (is_seq(entry[0]) and is_seq(entry[1])):
            raise SessionLogError(f"malformed sourceEventSeqs range {entry!r} (seq {seq!r}): not a [start, end] pair of seqs")
        start, end = entry
        if start > end or (type(seq) is int and end >= seq):
            raise SessionLogError(f"malformed sourceEventSeqs range {entry!r} (seq {seq!r}): it must run forwards, "
                                  "before the event's own seq")
        seqs.extend(range(start, end + 1))
    if any(type(a) is not int or type(b) is not int or b <= a for a, b in zip(seqs, seqs[1:])):
        raise SessionLogError(f"malformed sourceEventSeqs {stored!r} (seq {seq!r}): with a range, the seqs must "
                              "be strictly increasing")
    return {**event, "sourceEventSeqs": seqs}


def format_version(header: dict[str, Any]) -> int:
    """The session format a log header names (the host reads a log by it)."""
    version = header.get("version")
    if not isinstance(version, int) or not is_seq(version):
        raise SessionLogError(f"the session header names no session format (version {version!r})")
    return version


def decode_record(value: Any, version: int = 0) -> list[dict[str, Any]]:
    """One parsed JSONL line of a format-`version` log -> the session events it stores, as the
    host holds them (a chunk row expands into its events, seq ranges into their seqs)."""
    if isinstance(value, dict):
        tag = value.get("type")
        if tag in CHUNK_ROW_TYPES:
            if version > LAST_CHUNK_ROW_FORMAT:
                raise SessionLogError(f"a {tag} storage row in a format {version} log (only formats 0-"
                                      f"{LAST_CHUNK_ROW_FORMAT} pack chunk rows)")
            return expand_chunk_row(value)
        if version >= FIRST_SEQ_RANGE_FORMAT and "sourceEventSeqs" in value:
            return [expand_seq_ranges(value)]
    return [value]


def read_session_log(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, events)`` of a session log, its events as the host reads them back (chunk rows
    and seq ranges expanded), seqs checked 0..n-1."""
    path = Path(path)
    lines = _complete_lines(_plaintext(path))
    if not lines:
        raise SessionLogError(f"{path}: empty or header-less session log")
    header = _parse_header(lines[0], path)
    try:
        version = format_version(header)
    except SessionLogError as exc:
        raise SessionLogError(f"{path}: {exc}") from exc
    events: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise SessionLogError(f"{path}:{lineno}: event line is not JSON") from exc
        try:
            decoded = decode_record(value, version)
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


# --------------------------------------------------------------------------- dialect

def _formats() -> str:
    """The formats turn-memory reads, for a message: 'format 0 (DSH 0.1.0 to 0.1.4) and …'."""
    ordered = sorted(DIALECTS, key=lambda d: d.first_version)
    parts = []
    for d, after in zip(ordered, [*ordered[1:], None]):
        first = ".".join(map(str, d.first_version))
        if after is None:
            parts.append(f"format {d.session_format_version} (DSH {first} and later)")
        else:
            major, minor, patch = after.first_version
            parts.append(f"format {d.session_format_version} (DSH {first} to {major}.{minor}.{patch - 1})")
    return " and ".join(parts)


def log_dialect(records: list[Any]) -> Dialect:
    """The dialect that wrote a log, from its first records (parsed lines, header first) and
    never its file name: the header's session format, the one the host's own loader reads it
    by; a log whose header was lost, by what its records hold (a chunk row stands for the
    `assistant/chunk` events it packs). Raises UnknownDialect when neither tells, and
    SessionLogError when nothing in them is a session record at all."""
    first = records[0] if records else None
    if isinstance(first, dict) and first.get("type") == "session":
        dialect = dialect_for_format(first.get("version"))
        if dialect is None:
            raise UnknownDialect(f"its header names session format {first.get('version')!r}, which no DSH "
                                 f"version turn-memory knows writes (it reads {_formats()})")
        return dialect
    events = [r for r in records if isinstance(r, dict) and "type" in r]
    if not events:
        raise SessionLogError("it holds no session header and no session events")
    dialect = dialect_for_records({"type": "assistant/chunk"} if r["type"] in CHUNK_ROW_TYPES else r for r in events)
    if dialect is None:
        raise UnknownDialect("its session header could not be read, and its records do not tell which DSH "
                             f"version wrote it (turn-memory reads {_formats()})")
    return dialect
