"""One turn rewritten by several workers at once, each on its own part (`turns.split`).

Each part is a `WorkerTask` with a worker run of its own (its workers, requests and progress
are the part's; every part has the job's bounds), all editing the turn's one editor within
disjoint ranges of its positions. The job waits for every part; if one gives up, the turn
stays raw like any job that gives up (the parts that finished are not landed alone: a turn
lands whole).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import ToolResult
from turn_memory.config import TurnConfig
from turn_memory.host.reasoning import Hint
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.worker_run import Allowance, GaveUp, Mode, WorkerRun
from turn_memory.turns import prompt as worker_prompt
from turn_memory.turns.batch_run import run_spec
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.tools import FINISH, WorkerTools

log = logging.getLogger("turn_memory.turns")


@dataclass
class PartTask:
    """Part `index` of `count` of one turn: original positions `scope`."""

    session_id: str
    editor: TurnNodeEditor
    hints: list[Hint]
    index: int
    count: int
    scope: tuple[int, int]
    tools: WorkerTools
    finish: str = FINISH

    @property
    def where(self) -> str:
        return f"session {self.session_id} turn {self.editor.turn} part {self.index}/{self.count}"

    @property
    def label(self) -> str:
        return f"turn-memory turn {self.editor.turn} ({self.index}/{self.count})"

    def prompt(self, mode: Mode) -> str:
        return worker_prompt.task([self.editor], self.hints, spawn=mode == "spawn",
                                  continuing=any(n.changed for n in self.editor.in_scope(self.scope)),
                                  part=(self.index, self.count, self.scope))

    def shape(self) -> Hashable:
        return self.editor.shape(self.scope)

    def call(self, name: str, args: Any) -> str:
        return self.tools.call(name, args)


@dataclass
class Totals:
    """The parts' runs together, as a job reports its one run."""

    runs: Sequence[WorkerRun]

    @property
    def workers(self) -> list[str]:
        return [w for run in self.runs for w in run.workers]

    @property
    def modes(self) -> list[Mode]:
        return [m for run in self.runs for m in run.modes]

    @property
    def requests(self) -> int:
        return sum(run.requests for run in self.runs)


@dataclass
class SplitRun:
    editor: TurnNodeEditor
    parts: list[PartTask]
    runs: list[WorkerRun]
    #: seconds each part's run took (set by `work`): how fast this session's workers write
    seconds: list[float] = field(default_factory=list)

    @classmethod
    def start(cls, session: MirroredSession, port: HostPort, job_id: str, config: TurnConfig,
              editor: TurnNodeEditor, hints: list[Hint], scopes: Sequence[tuple[int, int]],
              allowance: Allowance | None = None) -> "SplitRun":
        parts = [PartTask(session.id, editor, hints, k, len(scopes), scope,
                          WorkerTools(editor, config.readLimitChars, scope))
                 for k, scope in enumerate(scopes, start=1)]
        # one job id for every part: the host routes a worker's tool calls by it, the job by worker id
        runs = [WorkerRun.start(session, port, job_id, run_spec(config), allowance) for _ in scopes]
        return cls(editor, parts, runs)

    @property
    def turns(self) -> list[int]:
        return [self.editor.turn]

    @property
    def run(self) -> Totals:
        return Totals(self.runs)

    async def work(self) -> GaveUp | None:
        """Every part's workers at once; the first part that gave up, or None when all finished."""
        loop = asyncio.get_running_loop()

        async def part(task: PartTask, run: WorkerRun) -> tuple[GaveUp | None, float]:
            started = loop.time()
            outcome = await run.until_finished(task)
            return outcome, loop.time() - started

        results = await asyncio.gather(*(part(t, r) for t, r in zip(self.parts, self.runs)))
        self.seconds = [s for _, s in results]
        for task, (gave_up, _) in zip(self.parts, results):
            if gave_up is not None:
                return GaveUp(gave_up.bound, f"part {task.index}/{task.count}: {gave_up.reason}")
        return None

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        """A worker's call, answered by the part whose worker it is."""
        for run in self.runs:
            if run.current == worker_id:
                return run.tool_call(worker_id, name, args)
        return ToolResult("this worker is no longer active; stop now", is_error=True, conclude=True)
