"""Find the DSH home, the profile files and the `dsh` executable; run `dsh`.

Home resolution follows `@deepseek-ai/dsh-home-paths` `resolveDshHome`: an
explicit path, else a non-blank `$DSH_HOME`, else `~/.dsh`; `~` and environment
variables are expanded (`turn_memory.paths`: one rule for every path we read).
DSH Desktop keeps its home in `<install>\\home`, and only its bundled wrapper
`<install>\\resources\\runtime\\cli\\bin\\dsh.cmd` may manage the `desktop`
profile (a plain `dsh` refuses: "profile desktop is managed exclusively by
the Electron application"), so the wrapper next to a Desktop home wins over
a `dsh` on PATH.

Windows: a `.cmd` cannot be exec'd directly; it goes through
`cmd.exe /d /s /c "<quoted command line>"` (what Node does for shell spawns;
`/s` makes cmd strip exactly the outer quotes, so paths with spaces such as
`D:\\DeepSeek Harness\\...` survive). All of that lives in
:func:`build_invocation`; everything else passes argument lists.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath, PureWindowsPath

from turn_memory.paths import expand_path

from .desktop import DESKTOP_WRAPPER_PARTS, DesktopNotFound, find_desktop


class LocateError(Exception):
    """No usable dsh: the message names the problem; `suggest` is a `--dsh` that would do, if one was seen."""

    def __init__(self, message: str, suggest: str | None = None) -> None:
        super().__init__(message)
        self.suggest = suggest


def resolve_home(explicit: str | None, env: Mapping[str, str], desktop: str | None = None) -> Path:
    if explicit:
        return expand_path(explicit).resolve()
    if desktop:
        try:
            return Path(find_desktop(str(expand_path(desktop))).home).resolve()
        except DesktopNotFound:  # resolve_dsh says why, with the fix
            return (expand_path(desktop) / "home").resolve()
    from_env = env.get("DSH_HOME")
    if from_env is not None and from_env.strip():
        return expand_path(from_env).resolve()
    return (Path.home() / ".dsh").resolve()


def desktop_wrapper(install_dir: PurePath) -> PurePath:
    """`<install>/resources/runtime/cli/bin/dsh.cmd` (pure; works on Windows paths anywhere)."""
    return install_dir.joinpath(*DESKTOP_WRAPPER_PARTS)


def desktop_wrapper_from_home(home: PurePath) -> PurePath:
    """The Desktop home is `<install>/home`: its wrapper is `../resources/runtime/cli/bin/dsh.cmd`."""
    return desktop_wrapper(home.parent)


@dataclass(frozen=True)
class DshLocation:
    path: Path
    how: str  # "--dsh", "--desktop", "Desktop wrapper next to the home", "PATH"

    @property
    def is_desktop_wrapper(self) -> bool:
        parts = tuple(p.lower() for p in PureWindowsPath(str(self.path)).parts[-5:])
        return parts == DESKTOP_WRAPPER_PARTS


#: how a dsh recorded by `install --dsh` is found again (`install.recorded`)
RECORDED = "the --dsh an install recorded"


def _dsh_inside(folder: Path) -> str | None:
    """A dsh program in a folder given as --dsh (the demo's cache `bin/` holds `dsh-<version>`)."""
    candidates = [folder / "dsh", folder / "bin" / "dsh", folder / "dsh.cmd",
                  *sorted(folder.glob("dsh-*"), reverse=True)]  # newest version first
    return next((str(c) for c in candidates if c.is_file()), None)


def usable_program(path: Path, flag: str = "--dsh") -> Path:
    """`path` if it can be run; LocateError naming what it is instead (a folder, not executable)."""
    if path.is_dir():
        inside = _dsh_inside(path)
        raise LocateError(f"{flag} {path} is a folder, not the dsh program"
                          + (f" (it holds {inside})" if inside else ""), inside)
    # Windows runs .exe/.cmd by name, not by an execute bit (and a mounted Windows drive may show none)
    if os.name != "nt" and path.suffix.lower() not in (".exe", ".cmd", ".bat") and not os.access(path, os.X_OK):
        raise LocateError(f"{flag} {path} is not executable: it is not the dsh program, or it lost its "
                          f"execute bit (chmod +x {path})")
    return path


def resolve_dsh(
    explicit: str | None,
    desktop: str | None,
    home: Path,
    which: Callable[[str], str | None] = shutil.which,
    recorded: str | None = None,
) -> DshLocation:
    """The dsh to run: --dsh, --desktop's wrapper, the one `install --dsh` recorded, the Desktop
    wrapper next to the home, else PATH's."""
    if explicit:
        given = expand_path(explicit)
        found = str(given) if given.exists() else which(explicit)
        if not found:
            raise LocateError(f"--dsh {explicit}: no such file or command")
        return DshLocation(usable_program(Path(found).absolute()), "--dsh")
    if desktop:
        try:
            wrapper = Path(find_desktop(str(expand_path(desktop))).wrapper)
        except DesktopNotFound as err:
            raise LocateError(str(err)) from err
        return DshLocation(wrapper.absolute(), "--desktop")
    if recorded and Path(recorded).is_file():  # gone since: found as if never recorded
        return DshLocation(usable_program(Path(recorded), "the recorded dsh"), RECORDED)
    wrapper = Path(desktop_wrapper_from_home(home))
    if wrapper.is_file():
        return DshLocation(wrapper.absolute(), "Desktop wrapper next to the home")
    found = which("dsh")
    if found:
        return DshLocation(Path(found).absolute(), "PATH")
    raise LocateError(
        "no dsh found: pass --dsh PATH, --desktop <DSH Desktop install dir>, or put dsh on PATH"
    )


#: profiles dsh creates from its own template on first use (`sdk` and `acp`: 0.2.x only);
#: any other name must exist first (`dsh plugin --profile NAME add <package>` creates it)
SHIPPED_PROFILES = ("headless", "web", "sdk", "acp")


def nearest_profile(name: str, profiles: Sequence[str]) -> str | None:
    """The profile a misspelt name most likely meant (`headles`: `headless`), or None."""
    found = difflib.get_close_matches(name, [p for p in profiles if p != name], n=1, cutoff=0.6)
    return found[0] if found else None


def list_profiles(home: Path) -> list[str]:
    """The profiles a DSH home holds (a profile is a folder with a package.json)."""
    root = home / "profiles"
    return sorted(p.name for p in root.iterdir() if (p / "package.json").is_file()) if root.is_dir() else []


@dataclass(frozen=True)
class ProfilePaths:
    home: Path
    name: str

    @property
    def dir(self) -> Path:
        return self.home / "profiles" / self.name

    @property
    def patch_file(self) -> Path:
        return self.dir / "cordis.patch.yml"

    @property
    def package_json(self) -> Path:
        return self.dir / "package.json"

    @property
    def lock_file(self) -> Path:
        return self.dir / "pnpm-lock.yaml"

    @property
    def workspace_file(self) -> Path:
        return self.dir / "pnpm-workspace.yaml"

    @property
    def home_patch_file(self) -> Path:
        # Applied by DSH after every profile's own layer.
        return self.home / "cordis.patch.yml"

    @property
    def tarball_dir(self) -> Path:
        return self.home / "turn-memory"


# ---- running dsh -------------------------------------------------------------------------


#: characters cmd.exe acts on outside double quotes (list2cmdline quotes only for blanks)
_CMD_SPECIAL = frozenset("&|<>^()")


def _cmd_word(arg: str) -> str:
    """One argument for the cmd.exe line: quoted as the C runtime reads it, and also whenever
    cmd itself would act on it (`D:\\R&D\\...` would otherwise run `D:\\R`)."""
    word = subprocess.list2cmdline([arg])
    if word.startswith('"') or not _CMD_SPECIAL & set(arg):
        return word
    return '"' + re.sub(r"(\\+)$", r"\1\1", arg) + '"'  # a trailing backslash must not escape the quote


def build_invocation(exe: PurePath, args: Sequence[str], *, windows: bool, comspec: str = "cmd.exe") -> list[str] | str:
    """argv for subprocess; on Windows a `.cmd`/`.bat` becomes one cmd.exe command line."""
    if windows and exe.suffix.lower() in (".cmd", ".bat"):
        inner = " ".join(_cmd_word(arg) for arg in [str(exe), *args])
        return f'"{comspec}" /d /s /c "{inner}"'
    return [str(exe), *args]


@dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Path, Sequence[str], Mapping[str, str], Path | None, float | None], ProcResult]


def default_runner(exe: Path, args: Sequence[str], env: Mapping[str, str], cwd: Path | None, timeout: float | None) -> ProcResult:
    windows = os.name == "nt"
    invocation = build_invocation(exe, args, windows=windows, comspec=env.get("COMSPEC", "cmd.exe"))
    try:
        proc = subprocess.run(  # noqa: S603 - argv list (or the one cmd.exe line built above)
            invocation,
            env=dict(env),
            cwd=str(cwd) if cwd else None,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except OSError as error:  # a folder, no execute bit, not a program at all: one line, no traceback
        raise LocateError(f"cannot run {exe}: {error.strerror or error}") from error
    # DSH prints UTF-8 whatever the console code page; a lossy decode would
    # corrupt values we copy back into the patch file, so decode strictly.
    try:
        out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8", errors="replace")
    except UnicodeDecodeError as error:
        raise LocateError(f"{exe} printed non-UTF-8 output: {error}") from error
    argv = (invocation,) if isinstance(invocation, str) else tuple(invocation)
    return ProcResult(argv, proc.returncode, out, err)


class DshError(Exception):
    def __init__(self, message: str, result: ProcResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class Dsh:
    """The few `dsh` calls the installer makes, with `DSH_HOME` pinned to the resolved home."""

    location: DshLocation
    home: Path
    env: Mapping[str, str]
    runner: Runner = default_runner
    calls: list[ProcResult] | None = None
    #: before the first call, ask `--version` whether the program is DSH at all (a path someone typed)
    verify: bool = False

    def _run(self, args: Sequence[str], timeout: float | None, cwd: Path | None = None) -> ProcResult:
        if self.verify:
            self.verify = False
            dsh_version(self)  # LocateError: not DSH, before it is handed a profile
        env = {**self.env, "DSH_HOME": str(self.home)}
        result = self.runner(self.location.path, list(args), env, cwd, timeout)
        if self.calls is not None:
            self.calls.append(result)
        return result

    def dump_config(self, profile: str, *, default_only: bool = False) -> ProcResult:
        flag = "--dump-default-config" if default_only else "--dump-config"
        result = self._run(["--profile", profile, flag], timeout=300)
        if result.returncode != 0:
            raise DshError(f"dsh --profile {profile} {flag} failed ({result.returncode}): {tail(result)}", result)
        return result

    def plugin(self, profile: str, *args: str, cwd: Path | None = None) -> ProcResult:
        # pnpm resolves and may download; no timeout beyond the user's patience.
        return self._run(["plugin", "--profile", profile, *args], timeout=None, cwd=cwd)


#: what `dsh --version` prints last, and alone: `0.2.1-rc.2` (node's `v22.19.0` or python's
#: `Python 3.11.7` are other programs)
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?")


def dsh_version(dsh: Dsh) -> str:
    """`dsh --version`'s version; LocateError when the program answers it as DSH never would."""
    result = dsh._run(["--version"], timeout=120)
    lines = result.stdout.strip().splitlines()
    version = lines[-1].strip() if lines else ""
    if result.returncode == 0 and _VERSION.fullmatch(version):
        return version
    said = (f"exited {result.returncode}: {tail(result, 200)}" if result.returncode else
            f"printed {version[:80]!r}, not a version")
    raise LocateError(f"{dsh.location.path} is not a working DSH: `{dsh.location.path.name} --version` {said}")


def tail(result: ProcResult, limit: int = 1500) -> str:
    text = (result.stderr.strip() or result.stdout.strip())
    return text[-limit:] if text else "(no output)"
