"""Routes worker tool calls to the job that owns the worker (turn or session compaction)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError


def preview(text: str, limit: int = 120) -> str:
    """One line of at most `limit` characters for catalogs."""
    # catalogs preview every node on every call and a node can be many KB: collapse the
    # whitespace of a head first; when that already exceeds the limit it is a prefix of the
    # whole text's collapsed form, so the preview is the same
    head = text[: 4 * limit]
    flat = " ".join(head.split())
    if len(flat) <= limit and len(head) < len(text):
        flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class ToolError(Exception):
    """A worker tool call that cannot be applied; the job's state is unchanged."""


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def parse_args(model: type[ToolArgs], args: Any) -> Any:
    """Validate a tool's arguments as the model sent them (an object, or a raw JSON string)."""
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            raise ToolError(f"arguments are not valid JSON: {exc}") from None
    try:
        return model.model_validate(args or {})
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
        raise ToolError(f"invalid arguments: {details}") from None


@dataclass
class ToolAnswer:
    text: str
    is_error: bool = False
    #: the caller's turn ends with this result (an accepted finish, a hand-off)
    conclude: bool = False
    #: an ImageAttachmentRef returned to the model as an image block beside the text
    image: dict[str, Any] | None = None


class WorkerJob(Protocol):
    #: the session the job works for (a MirroredSession)
    session: Any

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolAnswer: ...


#: a public tool a worker may call too: (the job's session, args) -> answer; raises ToolError
SharedTool = Callable[[Any, Any], ToolAnswer]


class WorkerRegistry:
    def __init__(self, shared: dict[str, SharedTool] | None = None) -> None:
        self._jobs: dict[str, WorkerJob] = {}
        self._shared = shared or {}

    def add(self, job_id: str, job: WorkerJob) -> None:
        self._jobs[job_id] = job

    def remove(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def call(self, job_id: str, worker_id: str, name: str, args: Any) -> ToolAnswer:
        job = self._jobs.get(job_id)
        if job is None:
            return ToolAnswer("this job is over; stop now", is_error=True, conclude=True)
        shared = self._shared.get(name)
        if shared is not None:  # read-only, answered for the session the worker edits
            try:
                return shared(job.session, args)
            except ToolError as exc:
                return ToolAnswer(str(exc), is_error=True)
        return job.tool_call(worker_id, name, args)
