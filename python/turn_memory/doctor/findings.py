"""What `turn-memory doctor` reports: one finding per check, each problem with its fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    #: what was checked, e.g. "node", "dsh", "profile headless: live engine"
    check: str
    status: Status
    detail: str
    #: the command (or step) that fixes it; None when nothing needs fixing
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ok(check: str, detail: str) -> Finding:
    return Finding(check, "ok", detail)


def warn(check: str, detail: str, fix: str | None = None) -> Finding:
    return Finding(check, "warn", detail, fix)


def fail(check: str, detail: str, fix: str) -> Finding:
    return Finding(check, "fail", detail, fix)
