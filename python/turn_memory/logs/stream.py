"""Read a session log from disk as batches of JSONL lines, in bounded memory, surviving damage.

Zstd logs (told by their first bytes, not their name) are decoded in runs of whole frames, one decoder call per run; a run that fails
to decode is decoded again one frame at a time (each frame is checksummed: a frame is used
only once it decoded completely, so a corrupted frame contributes nothing, not garbage).
A damaged frame is recorded as :class:`Damage` with its byte offset and the reader moves on
to the next frame magic; a file that ends inside its last frame (an interrupted append)
yields that frame's complete lines, as DSH's own loader recovers them. Plain JSONL logs
are read in blocks. Memory is bounded by the read size plus the largest single frame.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from turn_memory.logs.frames import MAGIC, FrameShapeError, complete_frames, frame_extent, is_zstd

READ_SIZE = 4 << 20
#: compressed bytes decoded per call: the per-frame Python work (a log has tens of thousands
#: of small frames) is paid once per run instead
RUN_BYTES = 1 << 20
#: lines per batch handed to the parser: per-batch costs are paid per group of frames
HANDOFF_LINES = 512


@dataclass(frozen=True)
class Damage:
    """One unreadable part of a log. `offset` is a byte offset into the file."""

    #: corrupt-frame | truncated-frame | torn-line | bad-line | bad-row | seq-gap | no-header
    kind: str
    offset: int | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "offset": self.offset, "detail": self.detail}


@dataclass
class Piece:
    """Plaintext of one frame, or of a run of frames decoded in one call."""

    #: file offset of the (first) frame
    offset: int
    text: bytes
    #: False: the file ends inside this frame
    complete: bool = True
    #: a run: its compressed bytes are ``source[starts[0]:end]``, frame k at ``source[starts[k]]``,
    #: kept so that a problem in it can be located to its frame (rare: decoded again then)
    source: bytes | None = None
    starts: list[int] | None = None
    end: int = 0

    @property
    def count(self) -> int:
        return 1 if self.starts is None else len(self.starts)


@dataclass
class Batch:
    """Complete lines: from several consecutive frames (zstd) or one read block (plain)."""

    #: file offset of the first line (plain), or of the first frame (zstd)
    offset: int
    lines: list[bytes]
    #: zstd: per piece in this batch, (index of its first line, frame number, piece)
    frames: list[tuple[int, int, Piece]] | None = None
    #: file position after this batch (for progress)
    end: int = 0
    #: per frame, (index of its first line, file offset, frame number): built on first use
    _located: list[tuple[int, int, int]] | None = field(default=None, init=False, repr=False)

    def where(self, index: int) -> tuple[int, str]:
        """(byte offset, human location) of ``lines[index]``."""
        if self.frames is not None:
            if self._located is None:
                self._located = [entry for first, number, piece in self.frames
                                 for entry in _locate(first, number, piece)]
            first, offset, number = self._located[bisect_right(self._located, (index, 1 << 62)) - 1]
            return offset, f"frame {number} at byte {offset}, line {index - first + 1} of the frame"
        at = self.offset + sum(len(line) + 1 for line in self.lines[:index])
        return at, f"byte {at}"


def _locate(first: int, number: int, piece: Piece) -> list[tuple[int, int, int]]:
    """(first line index, file offset, frame number) of each frame of a piece that ends a line.

    A line belongs to the frame holding its newline; a run is decoded again frame by frame
    to count them (the text carried in from before a piece holds no newline).
    """
    if piece.starts is None:
        return [(first, piece.offset, number)]
    assert piece.source is not None
    entries = []
    dctx = zstandard.ZstdDecompressor()
    bounds = piece.starts[1:] + [piece.end]
    delta = piece.offset - piece.starts[0]  # source index -> file offset
    for k, (start, stop) in enumerate(zip(piece.starts, bounds)):
        newlines = dctx.decompressobj().decompress(piece.source[start:stop]).count(b"\n")
        if newlines:
            entries.append((first, start + delta, number + k))
            first += newlines
    return entries


Progress = Callable[[int], None]


class LogStream:
    """Iterate :meth:`batches` once; `damage`, `frames` and `bytes_read` fill in as it goes."""

    def __init__(self, path: str | os.PathLike[str], *, on_progress: Progress | None = None,
                 read_size: int = READ_SIZE) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self.compressed = is_zstd(f.read(64))
        self.size = self.path.stat().st_size
        self.damage: list[Damage] = []
        self.frames = 0
        self.bytes_read = 0
        self._on_progress = on_progress
        self._read_size = read_size

    def batches(self) -> Iterator[Batch]:
        """Every batch in file order. (Decoding in a second thread was measured: zstd releases
        the GIL, but re-taking it after each frame cost more CPU than the overlap saved.)"""
        with open(self.path, "rb") as f:
            for batch in (self._zstd(f) if self.compressed else self._plain(f)):
                yield batch
                if self._on_progress is not None:
                    self._on_progress(batch.end)

    def _progress(self, at: int) -> None:
        self.bytes_read = at

    # -- plain JSONL ---------------------------------------------------------------------
    def _plain(self, f: BinaryIO) -> Iterator[Batch]:
        carry, offset = b"", 0  # offset: file position of carry's first byte
        while block := f.read(self._read_size):
            lines = (carry + block).split(b"\n")
            carry = lines.pop()
            self._progress(offset + len(lines) + sum(map(len, lines)) + len(carry))
            if lines:
                yield Batch(offset, lines, end=self.bytes_read)
                offset += len(lines) + sum(map(len, lines))
        if carry.strip():
            self.damage.append(Damage("torn-line", offset, f"the last line ({len(carry)} bytes) has no newline: "
                                      "an interrupted write, or DSH is still writing"))
        self._progress(self.size)

    # -- zstd frames ---------------------------------------------------------------------
    def _zstd(self, f: BinaryIO) -> Iterator[Batch]:
        """Frames grouped into batches of about HANDOFF_LINES lines: the parser's per-batch
        setup is paid per group, not per frame (a log has tens of thousands of frames)."""
        walk = _FrameWalk(f, self._read_size, self.damage)
        carry = b""  # an unterminated line continuing into the next frame
        lines: list[bytes] = []
        frames: list[tuple[int, int, Piece]] = []
        for piece in walk.frames():
            offset = piece.offset
            frame_lines = piece.text.split(b"\n")
            if carry:  # onto the first line: prepending it to the text would copy a whole run
                frame_lines[0] = carry + frame_lines[0]
            carry = frame_lines.pop()
            if not piece.complete:
                self.damage.append(Damage(
                    "truncated-frame", offset,
                    f"zstd frame at byte {offset}: the file ends {self.size - offset} bytes into it (an interrupted "
                    f"append); {len(frame_lines)} complete line(s) recovered from it"
                    + (f", a {len(carry)}-byte partial line dropped" if carry else "")))
                carry = b""
            if frame_lines:
                frames.append((len(lines), self.frames, piece))
                lines += frame_lines
            self.frames += piece.count
            if len(lines) >= HANDOFF_LINES:
                self._progress(walk.position)
                yield Batch(frames[0][2].offset, lines, frames, end=self.bytes_read)
                lines, frames = [], []
        if lines:
            yield Batch(frames[0][2].offset, lines, frames, end=self.size)
        if carry.strip():
            self.damage.append(Damage("torn-line", self.size, f"the log ends inside a line ({len(carry)} bytes)"))
        self._progress(self.size)


class _FrameWalk:
    """Decoding over a sliding read buffer: runs of frames while they decode, else frame by
    frame with resync after damage."""

    def __init__(self, f: BinaryIO, read_size: int, damage: list[Damage]) -> None:
        self._f = f
        self._read_size = read_size
        self._damage = damage
        self._dctx = zstandard.ZstdDecompressor()
        self._buf = b""
        self._view = memoryview(self._buf)  # frames are decoded from views: no copy per frame
        self._base = 0  # file offset of _buf[0]
        self._pos = 0  # index in _buf of the next frame
        self._eof = False
        #: (offset, why) of a damaged frame while looking for the next readable one
        self._lost: tuple[int, str] | None = None
        #: file position up to which frames are decoded one by one (a run there failed)
        self._careful_until = 0

    @property
    def position(self) -> int:
        return self._base + self._pos

    def frames(self) -> Iterator[Piece]:
        """Every readable frame, alone or in runs, in file order."""
        while True:
            if self.position >= self._careful_until:
                run = self._run()
                if run is not None:
                    yield run
                    continue
            buf, pos = self._buf, self._pos
            try:
                extent = frame_extent(buf, pos)
            except FrameShapeError as exc:
                self._resync(str(exc))
                continue
            if extent is None:  # the buffer ends inside this frame
                if self._refill():
                    continue
                if pos >= len(buf):
                    break
                torn = self._torn()
                if torn is not None:
                    yield torn
                    break
                continue
            offset = self._base + pos
            if extent.skippable:
                self._pos += extent.length
                continue
            try:
                text = self._decode(self._view[pos:pos + extent.length])
            except zstandard.ZstdError as exc:
                self._resync(f"corrupt ({exc})")
                continue
            if self._lost is not None:
                self._found(offset)
            self._pos += extent.length
            yield Piece(offset, text)
        self._found(None)

    def _run(self) -> Piece | None:
        """The next run of whole frames decoded in one call; None: go frame by frame here.

        The run's extent comes from its block headers, the same ones the decoder follows, so
        a run that decodes without error is exactly its frames, each checksum verified. On
        an error the same frames are decoded again one by one, which finds and reports the
        damaged one exactly as if there had been no run.
        """
        buf, pos = self._buf, self._pos
        starts, end = complete_frames(buf, pos, pos + RUN_BYTES)
        if len(starts) < 2:
            return None
        try:
            text = self._dctx.decompressobj(read_across_frames=True).decompress(self._view[pos:end])
        except zstandard.ZstdError:
            self._careful_until = self._base + end
            return None
        offset = self._base + pos
        if self._lost is not None:
            self._found(offset)
        self._pos = end
        return Piece(offset, text, source=buf, starts=starts, end=end)

    def _decode(self, frame: memoryview) -> bytes:
        obj = self._dctx.decompressobj()
        text = obj.decompress(frame)
        if not obj.eof:
            raise zstandard.ZstdError("frame ends early")
        if obj.unused_data:
            raise zstandard.ZstdError("frame is shorter than its block headers say")
        return text

    def _refill(self) -> bool:
        if self._eof:
            return False
        chunk = self._f.read(self._read_size)
        self._eof = not chunk
        self._view.release()
        self._buf = self._buf[self._pos:] + chunk  # the unread tail is at most one frame
        self._view = memoryview(self._buf)
        self._base += self._pos
        self._pos = 0
        return bool(chunk)

    def _resync(self, why: str) -> None:
        """The frame at `_pos` is damaged: move to the next frame magic after it."""
        if self._lost is None:
            self._lost = (self.position, why)
        while True:
            found = self._buf.find(MAGIC, self._pos + 1)
            if found >= 0:
                self._pos = found
                return
            self._pos = max(self._pos, len(self._buf) - len(MAGIC))  # a magic may straddle the refill
            if not self._refill():
                self._pos = len(self._buf)
                return

    def _found(self, resumed_at: int | None) -> None:
        """A readable frame starts at `resumed_at` (None: none left): close the damaged region."""
        if self._lost is None:
            return
        start, why = self._lost
        tail = (f"skipped {resumed_at - start} bytes to the next readable frame at byte {resumed_at}"
                if resumed_at is not None else "nothing readable after it")
        self._damage.append(Damage("corrupt-frame", start, f"zstd frame at byte {start}: {why}; {tail}"))
        self._lost = None

    def _torn(self) -> Piece | None:
        """The file ends inside the frame at `_pos`: its decodable prefix, unless it is corrupt."""
        offset = self.position
        try:
            text = self._dctx.decompressobj().decompress(self._view[self._pos:])
        except zstandard.ZstdError as exc:
            self._resync(f"corrupt ({exc})")
            return None
        self._found(offset)
        self._pos = len(self._buf)
        return Piece(offset, text, complete=False)
