"""DSH's session-id -> directory-name escape, shared by the log reader and the result store. Pure."""

from __future__ import annotations


def encode_segment(raw: str) -> str:
    """DSH's session-id -> directory-name escape (``encodeSegment``), per UTF-16 code unit."""
    if raw == "":
        raise ValueError("empty session id")
    if raw in (".", ".."):
        return "~002E" * len(raw)
    units = raw.encode("utf-16-le", "surrogatepass")
    out = []
    for i in range(0, len(units), 2):
        code = int.from_bytes(units[i:i + 2], "little")
        ch = chr(code)
        safe = ch != "~" and code < 128 and (ch.isalnum() or ch in "._-")
        out.append(ch if safe else f"~{code:04X}")
    return "".join(out)
