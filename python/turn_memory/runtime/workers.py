"""Routes worker tool calls to the job that owns the worker (turn or session compaction)."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from turn_memory.bridge.protocol import ToolResult
from turn_memory.host.tools import ToolError
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.read_image import worker_spec


class WorkerJob(Protocol):
    #: the session the job works for
    @property
    def session(self) -> MirroredSession: ...

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult: ...


#: a public tool a worker may call too: (the job's session, args) -> answer; raises ToolError
SharedTool = Callable[[MirroredSession, Any], ToolResult]


class WorkerRegistry:
    def __init__(self, shared: dict[str, SharedTool] | None = None) -> None:
        self._jobs: dict[str, WorkerJob] = {}
        self._shared = shared or {}

    def add(self, job_id: str, job: WorkerJob) -> None:
        self._jobs[job_id] = job

    def remove(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def call(self, job_id: str, worker_id: str, name: str, args: Any) -> ToolResult:
        job = self._jobs.get(job_id)
        if job is None:
            return ToolResult("this job is over; stop now", is_error=True, conclude=True)
        shared = self._shared.get(name)
        if shared is not None:  # read-only, answered for the session the worker edits
            try:
                return shared(job.session, args)
            except ToolError as exc:
                return ToolResult(str(exc), is_error=True)
        return job.tool_call(worker_id, name, args)


def worker_scope(own: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A compression worker's tools: its editor's own, then the public tools every worker scope
    mounts too (`read_memory_image`, answered by the registry's shared tools)."""
    return [*own, worker_spec()]
