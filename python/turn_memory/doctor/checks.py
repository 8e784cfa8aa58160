"""The doctor's checks. Each takes what it needs and returns findings; none raises.

Order matters to the reader: the runtime (Node, DSH and its dialect), then per profile
whether our engine is the live compaction engine (as `dsh --dump-config` composes it),
whether its engine command can start, the engine log, and running engine processes.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PureWindowsPath
from typing import Any

from turn_memory.doctor.findings import Finding, fail, ok, warn
from turn_memory.host.dialects import dialect_for_version
from turn_memory.install.layout import BASIC_ENGINE, OUR_PACKAGE, OUR_ROW_ID, iter_rows
from turn_memory.install.patchyaml import load_entry_list
from turn_memory.install.fix_commands import Invocation
from turn_memory.install.node_check import FIX, node_problem, windows_node, wrapper_node
from turn_memory.install.profile import (
    SHIPPED_PROFILES,
    Dsh,
    DshError,
    DshLocation,
    LocateError,
    ProcResult,
    ProfilePaths,
    dsh_version,
    list_profiles,
)
from turn_memory.paths import expand_path


def check_node(run: Callable[[Sequence[str]], ProcResult | None], dsh: DshLocation | None,
               cached: Mapping[str, Path], inv: Invocation, *, platform: str = sys.platform,
               which: Callable[[str], str | None] = shutil.which) -> Finding:
    """The node DSH runs with: the one on PATH, or the one a cached-DSH wrapper puts first; for a
    Windows DSH what it runs on instead (`node_check.windows_node`)."""
    if dsh is not None and dsh.is_desktop_wrapper:
        return ok("node", "DSH Desktop brings its own Node")
    windows = windows_node(dsh.path, platform, which) if dsh is not None else None
    if windows is not None:
        return ok("node", windows.detail) if windows.status == "ok" else warn("node", windows.detail, windows.fix)
    node = wrapper_node(dsh.path) if dsh is not None else None
    result = run([str(node or "node"), "--version"])
    output = result.stdout if result is not None and result.returncode == 0 else None
    problem = node_problem(output)
    where = f" ({node}, from the wrapper {dsh.path})" if node and dsh else ""
    if problem is None:
        assert output is not None  # node_problem(None) names a problem: no node
        return ok("node", f"node {output.strip()}{where}")
    if cached and node is None:  # the demo's DSH brings a Node that fits
        version, wrapper = next(iter(cached.items()))
        return fail("node", f"{problem}; or use DSH {version}, which the demo cached with its own Node 22",
                    replace(inv, dsh=str(wrapper)).command("doctor"))
    return fail("node", problem + where, FIX)


def check_dsh(dsh: Dsh | None, missing: LocateError | None, cached: Mapping[str, Path],
              inv: Invocation) -> tuple[Finding, str | None]:
    """`dsh --version` and the host dialect turn-memory speaks with it; (finding, None) when
    there is no dsh, or the program is not one (a folder, not executable, another program)."""
    if dsh is not None:
        try:
            version = dsh_version(dsh)
        except LocateError as err:
            dsh, missing = None, err
    if dsh is None:
        why = str(missing) if missing else "no dsh found"
        if missing is not None and missing.suggest:  # a folder given as --dsh holds one
            return fail("dsh", why, replace(inv, dsh=missing.suggest).command("doctor")), None
        if cached:  # the demo's: a real DSH that works as it is
            version, wrapper = next(iter(cached.items()))
            return fail("dsh", f"{why}; the demo cached DSH {version} at {wrapper}",
                        replace(inv, dsh=str(wrapper)).command("doctor")), None
        return fail("dsh", f"{why}; `turn-memory demo` downloads and caches a DSH you can use",
                    "pass --dsh PATH (or --desktop DIR for DSH Desktop), or put dsh on PATH"), None
    try:
        dialect = dialect_for_version(version)
    except ValueError:
        return warn("dsh", f"dsh {version} at {dsh.location.path}: version not recognised; the shim will probe "
                           "the dialect at runtime"), version
    support = dialect.support(version)
    return ok("dsh", f"dsh {version} at {dsh.location.path} (found via {dsh.location.how}); "
                     f"{dialect.name} dialect{f' ({support})' if support else ''}"), version


def our_rows(tree: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(live rows of our engine, live rows of DSH's stock engine) in a composed tree."""
    ours, basic = [], []
    for site in iter_rows(tree):
        if site.live and site.name == OUR_PACKAGE:
            ours.append(site)
        elif site.live and site.name == BASIC_ENGINE:
            basic.append(site)
    return ours, basic


def check_profile(dsh: Dsh, paths: ProfilePaths, inv: Invocation) -> tuple[list[Finding], dict[str, Any] | None]:
    """Our row live and alone in `dsh --profile P --dump-config`; returns our row's config."""
    name, label = paths.name, f"profile {paths.name}"
    install = inv.install(profile=name)
    if not paths.package_json.exists():
        return [missing_profile(paths, inv)], None
    try:
        tree = load_entry_list(dsh.dump_config(name).stdout, what="dsh --dump-config output")
    except DshError as err:
        return [fail(label, f"dsh --profile {name} --dump-config failed: {err}",
                     f"fix the profile's cordis.patch.yml, then {install}")], None
    except Exception as err:  # noqa: BLE001 - YAML errors come in many classes
        return [fail(label, f"cannot read dsh --dump-config output: {err}", install)], None
    ours, basic = our_rows(tree)
    if not ours:
        stock = " (the stock compaction-basic is live)" if basic else ""
        return [fail(f"{label}: live engine", f"turn-memory is not a live compaction engine{stock}", install)], None
    scopes = {site.scope for site in ours}
    shadowed = [site for site in basic if site.scope in scopes]
    if shadowed:
        where = ", ".join(site.where for site in shadowed)
        return [fail(f"{label}: live engine", f"compaction-basic is live next to turn-memory ({where}): two engines",
                     install)], None
    row = ours[0].row
    findings = [ok(f"{label}: live engine", f"{OUR_PACKAGE} is the live compaction engine ({ours[0].where}, "
                                            f"row {row.get('id', OUR_ROW_ID)!r}; from dsh --dump-config)")]
    return findings, (row.get("config") or {})


def missing_profile(paths: ProfilePaths, inv: Invocation) -> Finding:
    """A profile that is not there: the ones that are, and an install that works as printed."""
    found = [p for p in list_profiles(paths.home) if p != paths.name]
    listed = f"profiles there: {', '.join(found)}" if found else "it holds no profile"
    if paths.name in SHIPPED_PROFILES:  # dsh creates it on first use, and install asks it to
        return fail(f"profile {paths.name}", f"no profile {paths.name!r} in {paths.home / 'profiles'} ({listed}); "
                    "installing creates it (DSH ships it)", inv.install(profile=paths.name))
    other = found[0] if found else "headless"
    return fail(f"profile {paths.name}", f"no profile {paths.name!r} in {paths.home / 'profiles'} ({listed}); DSH "
                f"creates only the profiles it ships ({', '.join(SHIPPED_PROFILES)}); create your own with "
                f"`dsh plugin --profile {paths.name} add <package>`, or install into {other!r}",
                inv.install(profile=other))


def engine_command(config: Mapping[str, Any]) -> list[str] | None:
    command = (config.get("engine") or {}).get("command")
    return [str(part) for part in command] if isinstance(command, list) and command else None


def check_engine_command(config: Mapping[str, Any], profile: str, inv: Invocation, *,
                         platform: str = sys.platform) -> Finding:
    """The engine command recorded at install time must still exist (a deleted venv is the usual cause)."""
    label, install = f"profile {profile}: engine command", inv.install(profile=profile)
    command = engine_command(config)
    if command is None:
        return fail(label, "the turn-memory row has no engine.command", install)
    exe = command[0]
    if platform != "win32" and PureWindowsPath(exe).drive:
        # a Windows DSH's profile seen from Linux (a shared drive, Wine): the Windows side runs
        # it, so its path cannot be looked up here; saying it "does not exist" would be wrong
        return warn(label, f"{' '.join(command)}: a Windows path, which DSH starts on Windows; this doctor runs "
                           f"on {platform} and cannot check it (run turn-memory doctor on that Windows machine)")
    found = exe if Path(exe).is_file() else shutil.which(exe)
    if not found:
        return fail(label, f"{exe} does not exist (was its virtual environment removed?); install records the "
                           "Python it runs with", install)
    note = "" if Path(found).resolve() == Path(sys.executable).resolve() else f"; this doctor runs {sys.executable}"
    return ok(label, " ".join(command) + note)


def default_log_file(home: Path) -> Path:
    """Where the doctor suggests the engine log: beside the shim's tarball, in the DSH home."""
    return home / "turn-memory" / "engine.log"


def check_engine_log(config: Mapping[str, Any], profile: str, inv: Invocation, home: Path, *,
                     tail_lines: int = 400) -> Finding:
    """engine.logFile: where it is and the last problem it recorded."""
    label = f"profile {profile}: engine log"
    log_file = (config.get("engine") or {}).get("logFile")
    if not log_file:
        return warn(label, "no engine.logFile configured: the engine logs only into DSH's own output",
                    inv.install("--set", f"engine.logFile={default_log_file(home)}", profile=profile))
    path = expand_path(str(log_file))  # what `serve --log-file` opens
    if not path.exists():
        return ok(label, f"{path} (not written yet: no DSH session has started the engine since install)")
    lines = _tail(path, tail_lines)
    problems = [line for line in lines if " ERROR " in line or " CRITICAL " in line or "Traceback" in line]
    if problems:
        return warn(label, f"{path}: {len(problems)} error line(s) in the last {len(lines)}; last: "
                           f"{problems[-1].strip()[:300]}", f"read {path}; report it with that line")
    return ok(label, f"{path} ({path.stat().st_size:,} bytes, no errors in the last {len(lines)} lines)")


def _tail(path: Path, count: int) -> list[str]:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 256 * 1024))
        return f.read().decode("utf-8", errors="replace").splitlines()[-count:]


@dataclass(frozen=True)
class EngineProcess:
    pid: int
    command: str
    #: the DSH home it serves, from its environment as DSH resolves it (None: not ours to read)
    home: Path | None


def _served_home(environ: bytes) -> Path | None:
    env = dict(item.split("=", 1) for item in environ.decode(errors="replace").split("\0") if "=" in item)
    if env.get("DSH_HOME", "").strip():
        return expand_path(env["DSH_HOME"]).resolve()
    return (Path(env["HOME"]) / ".dsh").resolve() if env.get("HOME") else None


def running_engines(proc: Path = Path("/proc")) -> list[EngineProcess] | None:
    """`turn_memory serve` processes (Linux /proc; None: no /proc to read), with the home each serves."""
    found: list[EngineProcess] = []
    if not proc.is_dir():
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if "serve" in words and any(w == "turn_memory" or w.endswith("turn-memory") for w in words):
            try:
                home = _served_home((entry / "environ").read_bytes())
            except OSError:  # another user's process
                home = None
            found.append(EngineProcess(int(entry.name), " ".join(words), home))
    return sorted(found, key=lambda e: e.pid)


def check_processes(engines: list[EngineProcess] | None, home: Path) -> Finding:
    """The engines serving this DSH home's sessions; others (other homes: the demo's, tests') only counted."""
    if engines is None:  # Windows, macOS
        return ok("engine processes", "not listed on this OS (doctor reads Linux's /proc)")
    mine = [e for e in engines if e.home == home.resolve()]
    others = len(engines) - len(mine)
    elsewhere = f"; {others} more serve other DSH homes" if others else ""
    if not mine:
        return ok("engine processes", "none running for this DSH home (DSH starts one per process, with its first "
                                      f"session){elsewhere}")
    shown = "; ".join(f"pid {e.pid}: {e.command}" for e in mine[:3])  # whole commands: paths are not cut
    more = f"; and {len(mine) - 3} more" if len(mine) > 3 else ""
    return ok("engine processes", f"{len(mine)} running for this DSH home: {shown}{more}{elsewhere}")
