"""One rule for every path a user gives turn-memory: `~` and environment variables expanded.

Paths reach us from the command line, from the plugin row's config (`engine.logFile`, handed
to `serve` as an argument, where no shell expands it) and from `$DSH_HOME`. The engine,
`install`, `doctor` and `inspect` all read them through :func:`expand_path`, so a value that
one of them accepts means the same file to all of them.
"""

from __future__ import annotations

import os
from pathlib import Path


def expand_path(value: str | os.PathLike[str]) -> Path:
    """`~`, `~/x`, `~\\x`, `$VAR`, `${VAR}` (and `%VAR%` on Windows) expanded; unknown variables stay as written."""
    return Path(os.path.expanduser(os.path.expandvars(os.fspath(value))))
