"""The turn-memory engine with its hook handlers timed, for `bench/soak.py --engine-timing`.

Run as the engine command (`[python, bench/soak_engine.py, serve]`; the shim appends its own
arguments): the same engine, with `Engine._pre_step` and `Engine._at_request` wrapped so that
each call's wall time inside the engine goes to the engine log as one line
(`soak-timing pre-step turn T step S: N ms`). The soak subtracts it from the pre-step the
driver timed around the whole hook chain: what is left is the shim and DSH itself.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from turn_memory import engine as engine_module  # noqa: E402
from turn_memory.cli import main  # noqa: E402

log = logging.getLogger("turn_memory.soak")


def timed(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await fn(self, *args, **kwargs)
        finally:
            params = args[1] if name == "pre-step" else args[0]
            log.info("soak-timing %s turn %s step %s: %d ms", name, params.turn, params.step,
                     (time.perf_counter() - started) * 1000)
    return wrapper


engine_module.Engine._pre_step = timed("pre-step", engine_module.Engine._pre_step)  # type: ignore[method-assign]
engine_module.Engine._at_request = timed("request", engine_module.Engine._at_request)  # type: ignore[method-assign]

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
