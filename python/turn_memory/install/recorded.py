"""The `dsh` that `install --dsh PATH` used, remembered per profile, so that `doctor`,
`uninstall` and a re-install printed as a fix find DSH the way that install did.

It lives in `<DSH home>/turn-memory/install.json`, beside the shim's tarball (the home's
turn-memory folder, which `uninstall` empties): `{"schema": …, "profiles": {NAME: {"dsh": PATH}}}`.
Only a `--dsh` is recorded: a dsh found on PATH or next to a Desktop home is found there again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turn_memory.files import FILES

FILE_NAME = "install.json"
SCHEMA = "turn-memory.install-state/1"


def state_file(home: Path) -> Path:
    return home / "turn-memory" / FILE_NAME


def _profiles(home: Path) -> dict[str, Any]:
    try:
        data = json.loads(state_file(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or hand-edited beyond reading: nothing recorded
        return {}
    profiles = data.get("profiles") if isinstance(data, dict) else None
    return profiles if isinstance(profiles, dict) else {}


def recorded_dsh(home: Path, profile: str | None) -> str | None:
    """The dsh recorded for `profile`; else the one every recorded profile of the home shares (a
    home's profiles run one DSH), if there is exactly one."""
    profiles = _profiles(home)
    entry = profiles.get(profile) if profile is not None else None
    found = entry.get("dsh") if isinstance(entry, dict) else None
    if isinstance(found, str) and found:
        return found
    paths = {e.get("dsh") for e in profiles.values() if isinstance(e, dict)}
    only = paths.pop() if len(paths) == 1 else None
    return only if isinstance(only, str) and only else None


def record_dsh(home: Path, profile: str, dsh: str | None) -> None:
    """Remember `dsh` for `profile` (None: forget it); the file goes when nothing is left in it."""
    profiles = _profiles(home)
    if dsh is None:
        if profile not in profiles:
            return
        del profiles[profile]
    else:
        profiles[profile] = {"dsh": dsh}
    path = state_file(home)
    if not profiles:
        FILES.unlink(path, missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"schema": SCHEMA, "profiles": profiles}, indent=2, ensure_ascii=False) + "\n"
    FILES.write(path, text.encode("utf-8"))
