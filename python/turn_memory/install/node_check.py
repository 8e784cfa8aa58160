"""The one Node requirement, and the one way doctor, install and the runtime cache check it.

turn-memory itself needs no Node: its shim runs inside DSH. DSH does: 0.1.0-rc.8 runs on the
`node` on PATH and needs >= 22.19 (`node:zlib` zstd, `module.stripTypeScriptTypes`); the 0.2.x
runtime is one executable, but its `dsh plugin add` runs pnpm 11 on that `node` (>= 22.13).
DSH Desktop brings its own. The DSH the demo cached comes with a wrapper that puts its own
Node 22 first on PATH, and names it in a `turn-memory-node:` line that the check reads.
"""

from __future__ import annotations

import re
from pathlib import Path

MIN_NODE = (22, 19)
REQUIREMENT = (f"Node >= {MIN_NODE[0]}.{MIN_NODE[1]} on PATH (DSH 0.1.0-rc.8 runs on it; 0.2.x runs pnpm on it "
               "for `dsh plugin add`); DSH Desktop and the DSH the demo cached bring their own")
FIX = f"install Node >= {MIN_NODE[0]}.{MIN_NODE[1]} and put it first on PATH"
#: the line of a cached-DSH wrapper that names the node it puts first on PATH
WRAPPER_NODE_TAG = "turn-memory-node:"


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


def wrapper_node(dsh: Path) -> Path | None:
    """The node a cached-DSH wrapper runs DSH with (None: `dsh` is not such a wrapper)."""
    try:
        with open(dsh, "rb") as f:
            head = f.read(1024).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in head.splitlines():
        if WRAPPER_NODE_TAG in line:
            return Path(line.split(WRAPPER_NODE_TAG, 1)[1].strip())
    return None
