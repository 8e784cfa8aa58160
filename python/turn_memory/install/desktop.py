"""DSH Desktop's install layout, found from the folder the user names with `--desktop`. Pure.

DSH Desktop (Windows) lives in one install folder, e.g. `D:\\DeepSeek Harness`:

    <install>\\home                                  the DSH home (profiles, sessions)
    <install>\\resources\\runtime\\cli\\bin\\dsh.cmd     its CLI wrapper, the only `dsh` that may manage
                                                    the `desktop` profile

`--desktop` takes that folder or any path inside it (the home, `resources`, the wrapper, the
app's .exe): the install folder is the nearest one, from the given path up, that holds the
wrapper. Path flavour and file test are parameters, so the Windows layout is tested anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

DESKTOP_WRAPPER_PARTS = ("resources", "runtime", "cli", "bin", "dsh.cmd")


class DesktopNotFound(Exception):
    """No DSH Desktop install at or above the given path; the message says what to pass."""


@dataclass(frozen=True)
class DesktopLayout:
    install: PurePath
    home: PurePath
    wrapper: PurePath


def layout_of(install: PurePath) -> DesktopLayout:
    return DesktopLayout(install, install / "home", install.joinpath(*DESKTOP_WRAPPER_PARTS))


def find_desktop(value: str, *, path_type: type[PurePath] = Path,
                 is_file: Callable[[PurePath], bool] = lambda p: Path(p).is_file()) -> DesktopLayout:
    if '"' in value:
        # cmd.exe and the C runtime read `\"` as a literal quote: "D:\DeepSeek Harness\" gives
        # `D:\DeepSeek Harness"` and swallows the arguments after it
        raise DesktopNotFound(
            f"--desktop {value!r} contains a double quote: a backslash right before a closing quote "
            'escapes it on Windows; write the folder without a trailing backslash, e.g. --desktop "D:\\DeepSeek Harness"')
    given = path_type(value)
    for folder in (given, *given.parents):
        if is_file(layout_of(folder).wrapper):
            return layout_of(folder)
    raise DesktopNotFound(
        f"--desktop {value}: no DSH Desktop CLI wrapper (resources\\runtime\\cli\\bin\\dsh.cmd) in it or in a folder "
        "above it; pass the folder DSH Desktop is installed in, the one holding `resources` and `home`")
