"""JSON value predicates every host rule shares. Pure.

DSH runs on JavaScript: an integer is exact only up to 2**53 - 1 (`Number.MAX_SAFE_INTEGER`),
and a JSON `true` is never a number, though Python's bool is an int.
"""

from __future__ import annotations

from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1


def is_safe_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


def is_seq(value: Any) -> bool:
    """A non-negative safe integer: an event seq, a turn or step number, any count the host
    checks (format v4's `sessionFormatCount`)."""
    return is_safe_int(value) and value >= 0


def is_nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""
