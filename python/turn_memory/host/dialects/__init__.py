"""The known DSH dialects, one module each, and how to pick one. Pure.

A dialect is chosen from what the host's own session code accepted (the shim's probe, at
start-up), from a `dsh --version` string (doctor), or from what a session log holds (inspect:
its header's session format, else its records; never its file name, which a copy can change).
Nothing else in the engine names a host: it asks the chosen `Dialect`.
docs/architecture.md ("Adding a DSH host version") lists what a new one takes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from turn_memory.host.dialect import Dialect
# re-exported (`X as X`): callers name the dialects from here
from turn_memory.host.dialects.rc8 import RC8 as RC8
from turn_memory.host.dialects.v02 import V02 as V02

#: every dialect the engine speaks, oldest first
DIALECTS: tuple[Dialect, ...] = (RC8, V02)


def dialect_named(name: str) -> Dialect:
    for dialect in DIALECTS:
        if dialect.name == name:
            return dialect
    raise ValueError(f"unknown dialect {name!r} (known: {', '.join(d.name for d in DIALECTS)})")


def dialect_for_host(replace_keys: object, claimed: str | None = None) -> Dialect:
    """The dialect whose replace op a real session of this host accepted (the shim's probe).

    Exactly one dialect must match; a claimed dialect (doctor, tests) is used only when the
    client sent no probe. Raises ValueError when neither decides.
    """
    if isinstance(replace_keys, list):
        matches = [d for d in DIALECTS if "/".join(d.replace_keys) in replace_keys]
        if len(matches) == 1:
            return matches[0]
        raise ValueError(f"the host accepted replace ops {replace_keys}: no single known dialect matches")
    if replace_keys:  # the probe itself failed: say why
        raise ValueError(f"the host probe failed: {replace_keys}")
    if claimed is not None:
        return dialect_named(claimed)
    raise ValueError("the client sent neither a host probe nor a dialect")


def dialect_for_version(version: str) -> Dialect:
    """The dialect of the newest `first_version` at or below `version` (0.1.0 … 0.1.4 speak rc8;
    0.1.5 and later the v02 surface contract)."""
    parts = version.split("-")[0].split(".")
    try:
        major, minor, patch = (int(p) for p in parts[:3])
    except ValueError as exc:
        raise ValueError(f"unrecognised DSH version {version!r}") from exc
    speaking = [d for d in DIALECTS if d.first_version <= (major, minor, patch)]
    if not speaking:
        raise ValueError(f"DSH {version} is older than every known dialect")
    return max(speaking, key=lambda d: d.first_version)


def dialect_for_format(version: object) -> Dialect | None:
    """The dialect whose hosts write session format `version` (a log header's `version`: the
    host's own loader picks its codec by it). None: no known dialect writes that format."""
    if type(version) is not int:  # a bool is not a format
        return None
    return next((d for d in DIALECTS if d.session_format_version == version), None)


def dialect_for_records(records: Iterable[Any]) -> Dialect | None:
    """The one dialect a log's records fit, for a log whose header was lost: what tells the
    dialects apart is the replace op's keys and the event types only one of them knows.
    None when nothing tells them apart, or the records contradict each other."""
    possible = {d.name for d in DIALECTS}
    everyone = len(DIALECTS)
    evidence = False
    for record in records:
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        knowing = {d.name for d in DIALECTS if kind in d.known_event_types}
        op = record.get("surfaceOp")
        fitting = {d.name for d in DIALECTS if d.op_range(op) is not None} if isinstance(op, dict) else set()
        for names in (knowing, fitting):
            if 0 < len(names) < everyone:  # shared types and ops, or unknown ones, tell nothing
                possible &= names
                evidence = True
        if not possible:
            return None
    return dialect_named(possible.pop()) if evidence and len(possible) == 1 else None
