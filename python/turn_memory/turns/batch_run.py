"""The worker run a turn job leads for the turns of its batch that need a worker.

One run (`runtime.worker_run`) for the whole batch: its workers edit every turn, each in its
own editor (with ids prefixed by the turn when there are several, so no call can mix two
turns up), and the run's bounds and progress are those of the batch as a whole: requests and
time over all its workers, and a worker progressed only when the combined shape of all the
batch's editors is new and not one a finish was refused on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import ToolResult
from turn_memory.config import TurnConfig
from turn_memory.host.reasoning import Hint
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.worker_run import Allowance, GaveUp, Mode, RunSpec, WorkerRun
from turn_memory.turns import prompt as worker_prompt
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.tools import FINISH, BatchTools, WorkerTools

log = logging.getLogger("turn_memory.turns")


def run_spec(config: TurnConfig) -> RunSpec:
    """How a turn job's workers run: bounded by `turns.*`, turn workers, the turns' logger
    (reads the persona and tool prompts: raises PromptError)."""
    return RunSpec(section="turns", job_noun="job", worker_prefix="w", bounds=config,
                   persona=worker_prompt.persona(), tools=worker_prompt.worker_tool_specs(), log=log,
                   forks=config.workerStart == "fork")


@dataclass
class BatchRun:
    """The batch's editors as the worker run's task (a `WorkerTask`), and that run."""

    session_id: str
    editors: list[TurnNodeEditor]
    hints: list[Hint]
    tools: WorkerTools | BatchTools
    run: WorkerRun
    finish: str = FINISH

    @classmethod
    def start(cls, session: MirroredSession, port: HostPort, job_id: str, config: TurnConfig,
              turns: Sequence[tuple[TurnNodeEditor, list[Hint]]], allowance: Allowance | None = None) -> "BatchRun":
        """The run over `turns` (each turn's editor and hints), its bounds starting now."""
        editors = [editor for editor, _ in turns]
        tools: WorkerTools | BatchTools = WorkerTools(editors[0], config.readLimitChars) if len(editors) == 1 else \
            BatchTools({e.turn: WorkerTools(e, config.readLimitChars) for e in editors})
        return cls(session.id, editors, [h for _, hints in turns for h in hints], tools,
                   WorkerRun.start(session, port, job_id, run_spec(config), allowance))

    @property
    def turns(self) -> list[int]:
        return [e.turn for e in self.editors]

    @property
    def where(self) -> str:
        """Where the run's own log lines point: its turn, or every turn of its batch."""
        turns = self.turns
        return f"session {self.session_id} turn{'s' if len(turns) > 1 else ''} {', '.join(map(str, turns))}"

    @property
    def label(self) -> str:
        turns = self.turns
        return f"turn-memory turn {turns[0]}" if len(turns) == 1 else f"turn-memory turns {turns[0]}-{turns[-1]}"

    def prompt(self, mode: Mode) -> str:
        return worker_prompt.task(self.editors, self.hints, spawn=mode == "spawn",
                                  continuing=sum(e.revision for e in self.editors) > 0)

    def shape(self) -> Hashable:
        """The combined working surface of every turn the workers edit."""
        return tuple(e.shape() for e in self.editors)

    def call(self, name: str, args: Any) -> str:
        return self.tools.call(name, args)

    async def work(self) -> GaveUp | None:
        """Run workers until one finishes (None) or a bound of the batch's run is reached."""
        return await self.run.until_finished(self)

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        return self.run.tool_call(worker_id, name, args)
