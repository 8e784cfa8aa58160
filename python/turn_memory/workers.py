"""Routes worker tool calls to the job that owns the worker (turn or session compaction)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class ToolAnswer:
    text: str
    is_error: bool = False
    #: the worker's turn ends with this result (an accepted finish)
    conclude: bool = False


class WorkerJob(Protocol):
    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolAnswer: ...


class WorkerRegistry:
    def __init__(self) -> None:
        self._jobs: dict[str, WorkerJob] = {}

    def add(self, job_id: str, job: WorkerJob) -> None:
        self._jobs[job_id] = job

    def remove(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def call(self, job_id: str, worker_id: str, name: str, args: Any) -> ToolAnswer:
        job = self._jobs.get(job_id)
        if job is None:
            return ToolAnswer("this job is over; stop now", is_error=True, conclude=True)
        return job.tool_call(worker_id, name, args)
