#!/usr/bin/env python3
"""The path a `/compact` takes through the engine's modules: `python bench/compact_path.py [--all]`.

Not a timing: a trace. The real engine (`Engine.on_call("compact.now", …)`) compacts a
three-turn DSH 0.1.0-rc.8 session on the in-memory host (`tests/unit/fake_host.py`), one
scripted segment worker (`method: workers`, the default), while `sys.setprofile` records
every call from one `turn_memory` module into another, past asyncio and contextlib frames.

It prints each distinct call once, in the order first made, as `module.function [layer] ->
module.function [layer]` (layers from `turn_memory.devtools.layers`), between the modules a
compaction is routed through: the engine, the features, `runtime/` and `bridge/` (`--all`
adds the pure helpers below them: `host/`, `prompts`, base). Two counts close it: calls that
go *up* the layers (`UP`: a lower layer calling back into a higher one, e.g. `land()` calling
the plan builder a feature handed it), and calls whose target sits on a higher layer than the
call before (`^`: the path climbing back up after going down). Dataclass constructors,
properties and comprehensions are left out; the port's calls reach the in-memory host, which
is not a `turn_memory` module (in DSH they go through `bridge/port.py` to the shim).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
try:
    import turn_memory  # noqa: F401
except ImportError:  # a bare interpreter: this checkout's engine
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # the in-memory host and the session builders

from fake_host import FakeHost, WorkerScript, attach_workers  # noqa: E402
from session_builders import work_session  # noqa: E402

import turn_memory.compaction.manual  # noqa: E402,F401  (imported before the trace: no import calls in it)
from turn_memory.bridge.protocol import AgentOptions, CompactionResult, CompactNowParams  # noqa: E402
from turn_memory.bridge.server import Peer  # noqa: E402
from turn_memory.config import EngineConfig  # noqa: E402
from turn_memory.devtools.layers import LAYER_NAME, RANK  # noqa: E402
from turn_memory.engine import Engine  # noqa: E402
from turn_memory.host.dialects import RC8  # noqa: E402

#: the units a compaction is routed through; the others are pure helpers that never call back
ROUTED = {"engine", "catalog", "turns", "compaction", "history", "continuation", "hints", "runtime", "bridge"}
SKIPPED_CODE = {"<module>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "__init__"}
STDLIB = set(sys.stdlib_module_names)
ENTRY = "engine.Engine.on_call"  # the engine's dispatch hands the bridge the compaction's coroutine


class _Engine(Engine):
    def __init__(self, host: FakeHost) -> None:
        super().__init__()
        self.host = host
        self.mirror = host.mirror

    def _port(self, peer: Any) -> Any:
        return self.host

    def _config(self, peer: Any) -> EngineConfig:
        return EngineConfig()


def _name(frame: FrameType) -> str:
    return f"{frame.f_globals.get('__name__', '?').removeprefix('turn_memory.')}.{frame.f_code.co_qualname}"


def _is_property(frame: FrameType) -> bool:
    parts = frame.f_code.co_qualname.split(".")
    if "<locals>" in parts or len(parts) < 2:
        return False
    owner: Any = frame.f_globals.get(parts[0])
    for part in parts[1:-1]:
        owner = getattr(owner, part, None)
    return isinstance(getattr(owner, "__dict__", {}).get(parts[-1]), property)


def _caller(frame: FrameType) -> tuple[str, str] | None:
    """The module and name of the nearest turn_memory function that made this call, past stdlib frames."""
    back = frame.f_back
    while back is not None:
        module = back.f_globals.get("__name__", "")
        if module.startswith("turn_memory."):
            return module, _name(back)
        if back.f_code.co_name == "_drive":
            return "turn_memory.engine", ENTRY
        if module.split(".")[0] not in STDLIB:
            return None
        back = back.f_back
    return None


def trace() -> list[tuple[str, str]]:
    host = FakeHost(RC8, work_session(RC8, 3).events)
    engine = _Engine(host)
    fold = ("replace_session_memory", {"expected_revision": 0, "from": "P1", "nodes": [
        {"role": "user", "content": "Fix the modules."}, {"role": "assistant", "content": "Fixed them."}]})
    attach_workers(host, engine.workers, [WorkerScript([fold, ("finish_session_segment", {})])])
    params = CompactNowParams(sessionId=host.session.id, logLength=len(host.log), sourceCommandId="cmd-1",
                              agentOptions=AgentOptions(provider="p", model="m"))
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("turn_memory."):
            return
        if frame.f_code.co_name in SKIPPED_CODE or _is_property(frame):
            return
        found = _caller(frame)
        if found is None or found[0] == frame.f_globals["__name__"]:  # calls within one module are not listed
            return
        caller, callee = found[1], _name(frame)
        if (caller, callee) not in calls:
            calls.append((caller, callee))

    async def _drive() -> Any:
        sys.setprofile(profile)
        try:
            return await engine.on_call(Peer(b"p"), "compact.now", params, None)
        finally:
            sys.setprofile(None)

    result = asyncio.run(_drive())
    if not isinstance(result, CompactionResult):
        raise SystemExit(f"the compaction did not commit: {result}")
    return calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="also list calls into the pure helpers (host/, prompts, base)")
    args = ap.parse_args()
    unit = lambda name: name.split(".")[0]  # noqa: E731
    rows = [(a, b) for a, b in trace() if args.all or (unit(a) in ROUTED and unit(b) in ROUTED)]
    up = climbs = 0
    before: int | None = None
    for a, b in rows:
        ra, rb = RANK[unit(a)], RANK[unit(b)]
        is_up, climb = rb > ra, before is not None and rb > before
        up, climbs, before = up + is_up, climbs + climb, rb
        print(f"{'UP' if is_up else '  '}{'^' if climb else ' '} {a} [{LAYER_NAME[unit(a)]}] -> {b} [{LAYER_NAME[unit(b)]}]")
    print(f"{len(rows)} distinct calls between modules; {up} go up the layers (UP); {climbs} climb back to a higher "
          "layer than the call before (^)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
