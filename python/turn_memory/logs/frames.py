"""Where each Zstandard frame of a session log starts and ends, without decompressing it.

DSH writes a `.zstd` log as independent frames back to back (one for the header line, one
per append batch). Knowing each frame's byte range up front is what lets a reader decode
frame by frame, report a damaged frame by its byte offset, and carry on with the next one.
The layout is the one RFC 8878 defines (frame header, blocks, optional checksum); walking
it costs a few header reads per frame, nothing per byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"\x28\xb5\x2f\xfd"  # 0xFD2FB528, little-endian
_MAGIC_INT = 0xFD2FB528
_U32 = struct.Struct("<I").unpack_from
_SKIPPABLE_LOW, _SKIPPABLE_HIGH = 0x184D2A50, 0x184D2A5F
_DICT_ID_SIZE = (0, 1, 2, 4)
_BLOCK_RLE = 1
#: RFC 8878: no block is larger than 128 KiB; a bigger size field is corruption, caught here
#: so a damaged header cannot make the reader swallow the frames after it
MAX_BLOCK = 128 * 1024


def is_zstd(head: bytes) -> bool:
    """Whether a log whose file starts with `head` is zstd frames, from its content, not its
    name (a copy may have any): plain JSONL starts with its header object, `{`; DSH's zstd log
    with a frame magic, and one whose first bytes are damaged is still frames, not text."""
    return head.lstrip()[:1] not in (b"{", b"")


class FrameShapeError(ValueError):
    """The bytes at this offset are not a well-formed frame (bad magic, reserved bits)."""


@dataclass(frozen=True)
class FrameExtent:
    #: bytes from the frame's first byte to its last (the checksum included)
    length: int
    #: a skippable frame carries no session data
    skippable: bool = False


def frame_extent(buf: bytes | memoryview, pos: int) -> FrameExtent | None:
    """The extent of the frame starting at ``buf[pos]``; None when ``buf`` ends inside it.

    Raises FrameShapeError when the bytes cannot be a frame. A corrupted block size is
    not detectable here: the decoder then fails on the frame, which is reported instead.
    """
    end = len(buf)
    if end - pos < 4:
        return None
    magic = _U32(buf, pos)[0]
    if magic != _MAGIC_INT:
        if _SKIPPABLE_LOW <= magic <= _SKIPPABLE_HIGH:
            if end - pos < 8:
                return None
            size = _U32(buf, pos + 4)[0]
            return FrameExtent(8 + size, skippable=True) if end - pos >= 8 + size else None
        raise FrameShapeError("no zstd frame magic")
    if end - pos < 5:
        return None
    descriptor = buf[pos + 4]
    if descriptor & 0x08:
        raise FrameShapeError("reserved bit set in the frame header descriptor")
    single_segment = descriptor & 0x20
    fcs_flag = descriptor >> 6
    fcs_size = (1 if single_segment else 0) if fcs_flag == 0 else (2, 4, 8)[fcs_flag - 1]
    at = pos + 5 + (0 if single_segment else 1) + _DICT_ID_SIZE[descriptor & 0x03] + fcs_size
    while True:
        if end - at < 3:
            return None
        block = buf[at] | buf[at + 1] << 8 | buf[at + 2] << 16
        kind, size = (block >> 1) & 0x03, block >> 3
        if kind == 3:
            raise FrameShapeError("reserved block type")
        if size > MAX_BLOCK:
            raise FrameShapeError(f"block size {size} exceeds 128 KiB")
        at += 3 + (1 if kind == _BLOCK_RLE else size)
        if block & 1:
            break
    if descriptor & 0x04:
        at += 4  # content checksum
    return FrameExtent(at - pos) if at <= end else None


def complete_frames(buf: bytes, pos: int, limit: int) -> tuple[list[int], int]:
    """(starts, end) of the run of data frames from ``buf[pos]``: frame_extent's checks,
    inlined because it runs once per frame. The run stops before anything that needs
    a closer look (a skippable frame, a malformed or incomplete one, ``buf`` ending) and
    after the first frame that reaches ``limit``.
    """
    starts: list[int] = []
    end = len(buf)
    unpack = _U32
    while pos < limit and end - pos >= 6:
        descriptor = buf[pos + 4]
        if unpack(buf, pos)[0] != _MAGIC_INT or descriptor & 0x08:
            break
        fcs_flag = descriptor >> 6
        if descriptor & 0x20:  # single segment: no window descriptor
            at = pos + 5 + _DICT_ID_SIZE[descriptor & 0x03] + (1, 2, 4, 8)[fcs_flag]
        else:
            at = pos + 6 + _DICT_ID_SIZE[descriptor & 0x03] + (0, 2, 4, 8)[fcs_flag]
        while end - at >= 3:
            block = buf[at] | buf[at + 1] << 8 | buf[at + 2] << 16
            kind, size = (block >> 1) & 0x03, block >> 3
            if kind == 3 or size > MAX_BLOCK:
                return starts, pos
            at += 4 if kind == _BLOCK_RLE else 3 + size
            if block & 1:
                break
        else:
            break  # the buffer ends inside the block headers
        if descriptor & 0x04:
            at += 4
        if at > end:
            break
        starts.append(pos)
        pos = at
    return starts, pos
