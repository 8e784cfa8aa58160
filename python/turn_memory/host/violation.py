"""A broken host rule: a short stable rule id plus the human-readable detail."""

from __future__ import annotations

from typing import NamedTuple


class Violation(NamedTuple):
    rule: str
    detail: str
