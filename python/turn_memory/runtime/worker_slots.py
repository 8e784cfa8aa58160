"""How many of a session's workers run at once, turn and compaction workers together
(`maxActiveWorkers`).

DSH 0.2 starts every child of a session, ours and the agent's own subagents alike, from one
pool of slots (0.2.1 `ActivationPool`, `maxActiveSubagents`, 8 by default) and refuses a child
once it is full (`ACTIVATION_LIMIT_REACHED`). Our workers wait for a slot and start again; the
agent's own subagent call fails instead. So the engine never runs more than its share of the
pool, and leaves the rest to the agent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class WorkerSlots:
    #: workers of the session that may run at once (the engine's config sets it)
    limit: int = 4
    running: int = 0
    _freed: asyncio.Condition | None = field(default=None, repr=False)

    async def acquire(self, timeout: float) -> bool:
        """Take a slot, waiting at most `timeout` seconds for one (False: none came free)."""
        if self._freed is None:
            self._freed = asyncio.Condition()
        async with self._freed:
            if self.running >= self.limit:
                try:
                    await asyncio.wait_for(self._freed.wait_for(lambda: self.running < self.limit), max(0.0, timeout))
                except asyncio.TimeoutError:
                    return False
            self.running += 1
            return True

    async def release(self) -> None:
        """Give a slot back and wake the workers waiting for one."""
        assert self._freed is not None and self.running > 0
        async with self._freed:
            self.running -= 1
            self._freed.notify_all()
