"""The known DSH dialects, one module each, and how to pick one. Pure.

A dialect is chosen from what the host's own session code accepted (the shim's probe, at
start-up), from a `dsh --version` string (doctor), or from a session log's file name
(inspect). Nothing else in the engine names a host: it asks the chosen `Dialect`.
docs/architecture.md ("Adding a DSH host version") lists what a new one takes.
"""

from __future__ import annotations

import re

from turn_memory.host.dialect import Dialect
# re-exported (`X as X`): callers name the dialects from here
from turn_memory.host.dialects.rc8 import RC8 as RC8
from turn_memory.host.dialects.v02 import V02 as V02

#: every dialect the engine speaks, oldest first
DIALECTS: tuple[Dialect, ...] = (RC8, V02)

_LOG_NAME = re.compile(r"^(?P<stem>session(?:\.v\d+)?)\.jsonl(?:\.zstd)?$")


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


def dialect_for_log(file_name: str) -> Dialect | None:
    """The dialect that writes a session log of this file name (`session.v4.jsonl.zstd`: v02);
    a name without a format tag is format 0's (rc8). None: no known dialect writes it."""
    found = _LOG_NAME.match(file_name)
    stem = found.group("stem") if found else "session"
    return next((d for d in DIALECTS if d.log_file_stem == stem), None)
