"""Whole-file writes and deletes that survive Windows' file-sharing rules.

On POSIX a rename over a file, or an unlink, succeeds whoever has the file open. On Windows
both fail with a PermissionError (ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION) while another
process holds the file open without FILE_SHARE_DELETE: a virus scanner or the search indexer
reading a file just written, an editor, a second engine reading the same sidecar. That
usually lasts milliseconds, so on Windows a refused replace or delete is retried a few times
(`RETRY_DELAYS_S`, under half a second in all) before the error is raised as before. On
POSIX a PermissionError is a real permission problem and is raised at once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: waits between attempts on Windows (0.38 s in all)
RETRY_DELAYS_S = (0.01, 0.02, 0.05, 0.1, 0.2)


@dataclass(frozen=True)
class FileOps:
    """The platform's replace and delete; every field is injectable for tests."""

    platform: str = sys.platform
    sleep: Callable[[float], object] = time.sleep
    replace_fn: Callable[[Path, Path], object] = os.replace
    unlink_fn: Callable[[Path], object] = os.unlink

    def _retrying(self, action: Callable[[], object]) -> None:
        delays = RETRY_DELAYS_S if self.platform == "win32" else ()
        for delay in delays:
            try:
                action()
                return
            except PermissionError:
                self.sleep(delay)
        action()

    def replace(self, src: Path, dst: Path) -> None:
        """Rename `src` over `dst`: readers see the old file or the new one, never half of one."""
        self._retrying(lambda: self.replace_fn(src, dst))

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        try:
            self._retrying(lambda: self.unlink_fn(path))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def write(self, path: Path, data: bytes, *, fsync: bool = False) -> None:
        """Write `path` whole or not at all (a temporary file beside it, then `replace`)."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as out:
                out.write(data)
                if fsync:
                    out.flush()
                    os.fsync(out.fileno())
            self.replace(tmp, path)
        except BaseException:
            try:
                self.unlink(tmp, missing_ok=True)
            except OSError:
                pass  # the original error is the one to report
            raise


#: the real operations on this platform
FILES = FileOps()
