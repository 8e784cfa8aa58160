"""The one Node requirement, and the one way doctor, install and the runtime cache check it.

turn-memory itself needs no Node: its shim runs inside DSH. DSH does: 0.1.0-rc.8 runs on the
`node` on PATH and needs >= 22.19 (`node:zlib` zstd, `module.stripTypeScriptTypes`); the 0.2.x
runtime is one executable, but its `dsh plugin add` runs pnpm 11 on that `node` (>= 22.13).
DSH Desktop brings its own. The DSH the demo cached comes with a wrapper that puts its own
Node 22 first on PATH, and names it in a `turn-memory-node:` line that the check reads.

A Windows DSH is judged by what it runs on (`windows_node`): seen from another system (WSL, a
shared drive, Wine) this machine's `node` is not the one its pnpm runs on, so it is not
checked, and a failing `dsh plugin add` does not blame it; on Windows the runtime exe brings
its own JavaScript runtime and needs only `pnpm` on PATH. npm's `dsh.cmd` (DSH 0.1.0) runs on
the `node` on PATH like on Linux, and gets the same check.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

MIN_NODE = (22, 19)
REQUIREMENT = (f"Node >= {MIN_NODE[0]}.{MIN_NODE[1]} on PATH (DSH 0.1.0-rc.8 runs on it; 0.2.x runs pnpm on it "
               "for `dsh plugin add`); DSH Desktop and the DSH the demo cached bring their own")
FIX = f"install Node >= {MIN_NODE[0]}.{MIN_NODE[1]} and put it first on PATH"
#: the line of a cached-DSH wrapper that names the node it puts first on PATH
WRAPPER_NODE_TAG = "turn-memory-node:"
#: the line of a wrapper that runs a Windows DSH as a local program (the Windows tests' `dsh-wine`,
#: the official Windows exe under Wine): `turn-memory-dsh-platform: win32`
WRAPPER_PLATFORM_TAG = "turn-memory-dsh-platform:"
PNPM_FIX = "install pnpm 11 (`npm install -g pnpm@11`, or pnpm's standalone installer) and put it on PATH"


def parse_version(text: str) -> tuple[int, int, int] | None:
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def node_problem(version_output: str | None) -> str | None:
    """What is wrong with the `node --version` output (None: no node), or None when it is fine."""
    if version_output is None:
        return f"no `node` found; DSH needs {REQUIREMENT}"
    version = parse_version(version_output)
    if version is None or version[:2] < MIN_NODE:
        return f"node {version_output.strip()} is older than {MIN_NODE[0]}.{MIN_NODE[1]}; DSH needs {REQUIREMENT}"
    return None


def _wrapper_tag(dsh: Path, tag: str) -> str | None:
    """The value of a `tag` line in the head of the `dsh` file (None: no such line)."""
    try:
        with open(dsh, "rb") as f:
            head = f.read(1024).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in head.splitlines():
        if tag in line:
            return line.split(tag, 1)[1].strip()
    return None


def wrapper_node(dsh: Path) -> Path | None:
    """The node a cached-DSH wrapper runs DSH with (None: `dsh` is not such a wrapper)."""
    found = _wrapper_tag(dsh, WRAPPER_NODE_TAG)
    return Path(found) if found else None


def is_windows_dsh(dsh: Path) -> bool:
    """A DSH that runs on Windows: an `.exe` or `.cmd` (the runtime exe, Desktop's or npm's
    wrapper), or a wrapper that says it runs one."""
    return (PureWindowsPath(str(dsh)).suffix.lower() in (".exe", ".cmd", ".bat")
            or _wrapper_tag(dsh, WRAPPER_PLATFORM_TAG) == "win32")


@dataclass(frozen=True)
class WindowsNode:
    """What the node check says about a Windows DSH instead of judging `node --version`."""

    status: str  # "ok" or "warn"
    detail: str
    #: why a failed `dsh plugin add` may have failed, for the installer's error (None: nothing to add)
    hint: str | None = None
    fix: str | None = None


def windows_node(dsh: Path, platform: str, which: Callable[[str], str | None] = shutil.which) -> WindowsNode | None:
    """The node check for a Windows DSH (DSH Desktop's wrapper is the caller's own case), or None
    where the plain check of the `node` on PATH applies: any other DSH, and npm's `dsh.cmd` on
    Windows (DSH 0.1.0, which runs on that node)."""
    if not is_windows_dsh(dsh):
        return None
    if platform != "win32":
        return WindowsNode(
            "warn", f"not checked: {dsh} is a Windows DSH; it and the pnpm its `dsh plugin add` runs use the "
                    f"Windows side's Node and PATH, not this {platform} machine's node (run turn-memory doctor on "
                    "that Windows machine)",
            hint=f"{dsh.name} is a Windows DSH: pnpm ran on the Windows side, so this {platform} machine's node "
                 "is not the cause; DSH's pnpm log says what is")
    if PureWindowsPath(str(dsh)).suffix.lower() != ".exe":
        return None
    pnpm = which("pnpm")
    if pnpm:
        return WindowsNode("ok", f"not used by the DSH exe, which brings its own JavaScript runtime; its `dsh plugin "
                                 f"add` runs the pnpm on PATH through cmd.exe: {pnpm}")
    return WindowsNode("warn", "the DSH exe brings its own JavaScript runtime, but its `dsh plugin add` runs `pnpm` "
                               "through cmd.exe, and there is no pnpm on PATH",
                       hint="no pnpm on PATH: the DSH exe runs `pnpm` through cmd.exe for `dsh plugin add`",
                       fix=PNPM_FIX)
