"""A session's spend on workers while none of them succeeds, bounded
(docs/decisions.md#a-session-stops-compressing-when-its-workers-keep-failing).

Pure. Every worker a turn job starts asks the session's breaker for its request allowance
first. Until a job of the session has finished (the model is not known to do the protocol),
the breaker grants each worker at most a quarter of `turns.failingRequests` (four workers
run at once) from what is left of it less what running workers hold, and a worker that finds
nothing left while others hold some waits for them: however
many jobs run at once, a session whose workers never finish spends at most that many
requests. Once a job finished, workers get what they ask while the requests spent since the
last finished job stay under the same bound. It opens —
no worker starts, turns stay raw and pending, nothing is lost — once that allowance is spent
or `turns.failingJobs` jobs in a row gave up; a finished job resets both counts. It closes
again when something changes: `/compact`, a config change, a new engine process (a breaker
lives in memory only).
"""

from __future__ import annotations

from dataclasses import dataclass


#: until a job finished, a worker gets at most this share of the allowance (so this many run at once)
UNPROVEN_SHARES = 4


@dataclass
class Breaker:
    #: worker requests a session may spend while no job finishes
    max_requests: int
    #: consecutive jobs that gave up before the session stops dispatching
    max_failed_jobs: int
    #: requests spent since the last finished job, and requests running workers hold
    spent: int = 0
    held: int = 0
    failed_jobs: int = 0
    #: why it opened (None: closed)
    reason: str | None = None
    #: the one plain notice about it has been handed out
    told: bool = False
    #: a job of the session finished: its model does the worker protocol
    proven: bool = False

    @property
    def open(self) -> bool:
        return self.reason is not None

    def grant(self, want: int) -> int | None:
        """Requests a starting worker may make: 0 for none (the breaker opens when none are
        left), None to wait until a running worker ends."""
        if self.open:
            return 0
        left = self.max_requests - self.spent - (0 if self.proven else self.held)
        if left <= 0 and self.held > 0 and not self.proven:
            return None
        if left <= 0:
            self._trip(f"the workers made {self.spent} model requests without finishing a compression "
                       f"(turns.failingRequests: {self.max_requests})")
            return 0
        granted = want if self.proven else min(want, left, max(1, self.max_requests // UNPROVEN_SHARES))
        self.held += granted
        return granted

    def used(self, granted: int, requests: int) -> None:
        """A worker that was granted `granted` requests ended after `requests`."""
        self.held = max(0, self.held - granted)
        self.spent += max(0, requests)

    def finished(self) -> None:
        """A job finished its compression: the workers work with this model."""
        self.spent = self.failed_jobs = 0
        self.proven = True

    def gave_up(self, why: str) -> None:
        self.failed_jobs += 1
        if self.failed_jobs >= self.max_failed_jobs and not self.open:
            self._trip(f"{self.failed_jobs} compressions in a row gave up (turns.failingJobs), the last: {why}")

    def close(self) -> None:
        """Something changed (`/compact`, a config change): try the workers again."""
        self.spent = self.held = self.failed_jobs = 0
        self.reason, self.told = None, False

    def _trip(self, why: str) -> None:
        self.reason = why

    def notice(self) -> str | None:
        """The one plain line for DSH's output once it opened (None after that, or while closed)."""
        if not self.open or self.told:
            return None
        self.told = True
        return (f"turn-memory stopped compressing this session's turns: {self.reason}. The turns stay as they are "
                "(nothing is lost); it tries again after /compact, a change of its config, or a new DSH process.")
