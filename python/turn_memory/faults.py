"""Fault injection for the reliability tests: `TURN_MEMORY_FAULTS=name[,name…]` in the
environment DSH starts the engine with. Unset (always, outside tests) nothing here changes
any behaviour. Each fault names the one place that reads it.

A one-shot fault (`fire`) acts once. With `TURN_MEMORY_FAULTS_SPENT=<dir>` "once" holds
across engine processes: the first engine that fires it leaves `<dir>/<name>` behind and no
later engine (the one the shim restarts after the fault killed or hung its predecessor)
fires it again. Without it, once per process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

#: runtime/land.py: every turn landing plan loses the sources of its first replacement — a plan
#: the host would refuse (`replace-coverage`); the engine must refuse it before appending
CORRUPT_TURN_PLAN = "corrupt-turn-plan"
#: runtime/land.py: the host refuses every turn landing when it is applied (nothing is appended)
#: — after the plan validated, so a check ahead of the landing (the follow-up's) still passes
REFUSE_TURN_LANDING = "refuse-turn-landing"
#: runtime/land.py (one-shot): the first turn landing whose plan validated makes the engine
#: `os._exit` before the shim's apply call — killed between validation and apply
KILL_BEFORE_APPLY = "kill-before-apply"
#: engine.py (one-shot): the first pre-step of a turn after the first blocks the engine's
#: event loop for good — it stops answering everything, pings included, as a deadlocked or
#: runaway engine does
HANG_PRESTEP = "hang-prestep"
#: bridge/server.py (one-shot): the reply to the first pre-step of a turn after the first goes
#: out with an unparsable header frame
CORRUPT_REPLY = "corrupt-reply"

_fired: set[str] = set()


def active(name: str) -> bool:
    return name in os.environ.get("TURN_MEMORY_FAULTS", "").split(",")


def fire(name: str) -> bool:
    """True the first time a one-shot fault is asked for while it is active, then never again."""
    if not active(name) or name in _fired:
        return False
    _fired.add(name)
    spent = os.environ.get("TURN_MEMORY_FAULTS_SPENT")
    if spent:
        marker = Path(spent) / name
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            with open(marker, "x"):
                pass
        except FileExistsError:
            return False  # an earlier engine process already fired it
    return True


def die() -> None:
    """The process ends at once: no cleanup, no reply, as SIGKILL would leave it."""
    os._exit(137)


def hang() -> None:
    """Block the calling thread (the engine's event loop) until the process is killed."""
    while True:
        time.sleep(3600)
