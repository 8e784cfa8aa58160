"""Fault injection for the reliability tests: `TURN_MEMORY_FAULTS=name[,name…]` in the
environment DSH starts the engine with. Unset (always, outside tests) nothing here changes
any behaviour. Each fault names the one place that reads it.
"""

from __future__ import annotations

import os

#: landing/land.py: every turn landing plan loses the sources of its first replacement — a plan
#: the host would refuse (`replace-coverage`); the engine must refuse it before appending
CORRUPT_TURN_PLAN = "corrupt-turn-plan"


def active(name: str) -> bool:
    return name in os.environ.get("TURN_MEMORY_FAULTS", "").split(",")
