#!/usr/bin/env python3
"""Bridge + mirror benchmark launcher: `python bench/bridge.py [--calls N] [--events N] [--json]`.

Ensures the cached Node 22 + zeromq runtime, makes `zeromq` resolvable from
`shim-js/lib/` (symlinks the runtime's copy into the gitignored `shim-js/node_modules`
when no real install is there), then runs `bench/bridge.mjs` with the runtime's Node
against `[sys.executable, -m, turn_memory, serve]` and streams its table. The exit status
is the benchmark's: non-zero when anything failed (engine errors, gaps, resyncs, a probe).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON_SRC = ROOT / "python"

try:
    import turn_memory  # noqa: F401
except ImportError:  # running with a Python that has not pip-installed the project
    sys.path.insert(0, str(PYTHON_SRC))

from machine import python_info  # noqa: E402
from turn_memory.devtools.runtime import ensure_runtime  # noqa: E402


def ensure_zeromq(zeromq_modules: Path | None) -> str:
    """Make `import 'zeromq'` from shim-js/lib resolve; never touch a real install."""
    target = ROOT / "shim-js" / "node_modules" / "zeromq"
    if target.is_symlink() and not target.exists():
        target.unlink()  # dangling link from an older runtime cache
    if target.exists():
        return "shim-js/node_modules/zeromq" + (" (link)" if target.is_symlink() else "")
    if zeromq_modules is None or not (zeromq_modules / "zeromq" / "package.json").exists():
        raise SystemExit("bench: the runtime has no zeromq@6; run `python -m turn_memory.devtools.runtime`")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(zeromq_modules / "zeromq", target_is_directory=True)
    return f"shim-js/node_modules/zeromq -> {zeromq_modules / 'zeromq'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000, help="timed ping round trips per transport (default 3000)")
    ap.add_argument("--warmup", type=int, default=500, help="untimed pings first (default 500)")
    ap.add_argument("--events", type=int, default=20000, help="session events fed through the mirror (default 20000)")
    ap.add_argument("--repeats", type=int, default=3, help="mirror runs; the median is reported (default 3)")
    ap.add_argument("--json", action="store_true", help="print the full results as JSON instead of the table")
    args = ap.parse_args(argv)

    runtime = ensure_runtime()
    link = ensure_zeromq(runtime.zeromq_modules)
    if not args.json:
        print(f"runtime: node {runtime.node}; zeromq: {link}", flush=True)

    engine = [sys.executable, "-m", "turn_memory", "serve"]
    env = dict(os.environ, BENCH_PYTHON_INFO=python_info())
    # the engine must import this checkout's turn_memory even from a bare interpreter
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PYTHON_SRC), env.get("PYTHONPATH")) if p)
    cmd = [str(runtime.node), str(ROOT / "bench" / "bridge.mjs"),
           "--engine-command", json.dumps(engine),
           "--calls", str(args.calls), "--warmup", str(args.warmup),
           "--events", str(args.events), "--repeats", str(args.repeats)]
    if args.json:
        cmd.append("--json")
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())
