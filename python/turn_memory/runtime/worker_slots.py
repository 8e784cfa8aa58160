"""How many of a session's workers run at once, turn and compaction workers together
(`maxActiveWorkers`).

DSH 0.2 starts every child of a session, ours and the agent's own subagents alike, from one
pool of slots (0.2.1 `ActivationPool`, `maxActiveSubagents`, 8 by default) and refuses a child
once it is full (`ACTIVATION_LIMIT_REACHED`). Our workers wait for a slot and start again; the
agent's own subagent call fails instead. So the engine never runs more than its share of the
pool, and leaves the rest to the agent. Within it, a turn's workers go ahead of a checkpoint's
waiting ones: a turn rewrite is due at the next turns, a checkpoint only once the window fills
(in the coding bench a background fold's worker, ~35 s, held a slot a split turn's last part
waited for)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class WorkerSlots:
    #: workers of the session that may run at once (the engine's config sets it)
    limit: int = 4
    running: int = 0
    #: workers waiting that others yield to
    _ahead: int = 0
    _freed: asyncio.Condition | None = field(default=None, repr=False)

    async def acquire(self, timeout: float, yields: bool = False) -> bool:
        """Take a slot, waiting at most `timeout` seconds for one (False: none came free); a
        worker that `yields` takes one only while no other worker waits."""
        if self._freed is None:
            self._freed = asyncio.Condition()

        def free() -> bool:
            return self.running < self.limit and not (yields and self._ahead)

        async with self._freed:
            if not free():
                self._ahead += not yields
                try:
                    await asyncio.wait_for(self._freed.wait_for(free), max(0.0, timeout))
                except asyncio.TimeoutError:
                    return False
                finally:
                    self._ahead -= not yields
                    self._freed.notify_all()  # a yielding worker may go now
            self.running += 1
            return True

    async def release(self) -> None:
        """Give a slot back and wake the workers waiting for one."""
        assert self._freed is not None and self.running > 0
        async with self._freed:
            self.running -= 1
            self._freed.notify_all()
