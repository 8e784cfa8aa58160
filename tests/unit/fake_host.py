"""An in-memory stand-in for the shim + DSH session, for unit tests of engine jobs.

The "host" log is a `SessionLog` (the surface model, which enforces both dialects' rules),
so an append the real host would refuse also fails here. Events reach the engine's mirror
the way the shim sends them: as JSON batches, before each reply.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, Sequence

from turn_memory.bridge.protocol import (ApplyResult, Expectation, LlmRequest, SessionEventsParams, WorkerRunParams,
                                         WorkerRunResult)
from turn_memory.config import EngineConfig
from turn_memory.engine import Engine
from turn_memory.host.dialect import Dialect
from turn_memory.host.surface import SessionLog, SurfaceError
from turn_memory.runtime.mirror import MirroredSession, SessionMirror

SESSION = "session-test"


def text_reply(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": text},
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}},
        {"type": "usage", "usage": {"inputTokens": 10, "outputTokens": 5}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]


class FakeHost:
    def __init__(self, dialect: Dialect, events: Sequence[dict[str, Any]]):
        events = list(events)  # another log's `events` (an EventStore) is no JSON list
        self.dialect = dialect
        self.log = SessionLog(dialect, events)
        self.mirror = SessionMirror()
        self.mirror.receive(None, dialect, SessionEventsParams(sessionId=SESSION, start=0, count=len(events), reset=True),
                            json.dumps(events).encode())
        self.llm_requests: list[LlmRequest] = []
        self.llm_tool_history: list[bool] = []
        #: each call returns the chunks of one llm reply; may also mutate the host (a concurrent writer)
        self.llm_script: list[Callable[["FakeHost"], list[dict[str, Any]]]] = []
        self.applied: list[list[dict[str, Any]]] = []
        self.flushes = 0
        #: Agent.followup calls: (message id, content, source), each also logged as rc8 does
        self.followups: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = []
        self._sent = len(events)

    @property
    def session(self) -> MirroredSession:
        state = self.mirror.get(SESSION)
        assert state is not None
        return state

    # -- what another writer (the agent loop) would do --------------------------------
    def host_append(self, event_type: str, data: Any, **surface: Any) -> dict[str, Any]:
        event = {"type": event_type, "seq": len(self.log), "time": int(time.time() * 1000), "data": data, **surface}
        self.log.check_plan([event], model=False)  # the host's own rules only
        self.log.append(event)
        return event

    def _forward(self) -> None:
        """What the shim's mirror does before every reply: send the events not yet sent."""
        new = self.log.events[self._sent:]
        if new:
            params = SessionEventsParams(sessionId=SESSION, start=self._sent, count=len(new))
            assert self.mirror.receive(None, self.dialect, params, json.dumps(new).encode()) is not None
            self._sent = len(self.log)

    # -- HostPort ----------------------------------------------------------------------
    async def apply(self, session_id: str, expect: Expectation, events: list[dict[str, Any]], label: str) -> ApplyResult:
        try:
            if len(self.log) != expect.logLength:
                return ApplyResult(ok=False, reason="log-moved", logLength=len(self.log))
            nodes = self.log.nodes
            for span in expect.spans:
                at = nodes.index(span[0]) if span[0] in nodes else -1
                if at < 0 or nodes[at:at + len(span)] != span:
                    return ApplyResult(ok=False, reason="span-moved", logLength=len(self.log))
            seqs = []
            for e in events:
                try:
                    appended = self.host_append(e["type"], e["data"], **{k: v for k, v in e.items() if k not in ("type", "data")})
                except SurfaceError as exc:
                    return ApplyResult(ok=False, reason="append-threw", detail=str(exc), appended=len(seqs))
                seqs.append(appended["seq"])
            self.applied.append(events)
            return ApplyResult(ok=True, seqs=seqs)
        finally:
            self._forward()

    async def llm_stream(self, session_id: str, request: LlmRequest, on_chunks: Callable[[list[dict[str, Any]]], None],
                         timeout: float, with_tool_history: bool = True) -> None:
        self.llm_requests.append(request)
        self.llm_tool_history.append(with_tool_history)
        step = self.llm_script.pop(0) if self.llm_script else (lambda host: text_reply("SUMMARY"))
        chunks = step(self)
        self._forward()
        on_chunks(chunks)

    async def flush(self, session_id: str) -> None:
        self.flushes += 1

    async def resync(self, session_id: str) -> None:
        pass

    async def followup(self, session_id: str, message_id: str, content: list[dict[str, Any]],
                       source: dict[str, Any]) -> None:
        self.followups.append((message_id, content, source))
        # rc8 records the queued message durably as an inbox insertion
        message = {"id": message_id, "role": "user", "content": content, "source": source}
        self.host_append("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [message]})
        self._forward()


class HostEngine(Engine):
    """The real engine, its port and config bound to one in-memory host."""

    def __init__(self, host: FakeHost, config: EngineConfig) -> None:
        super().__init__()
        self.host, self.config = host, config
        self.mirror = host.mirror

    def _port(self, peer: Any) -> Any:
        return self.host

    def _config(self, peer: Any) -> EngineConfig:
        return self.config


class WorkerScript:
    """A scripted worker for FakeHost.run_worker: a list of (tool, args) calls, then a stop."""

    def __init__(self, calls: list[tuple[str, Any]], stop: str = "completed", gate: asyncio.Event | None = None):
        self.calls = calls
        self.stop = stop
        self.answers: list[Any] = []
        #: the worker's first call waits for this (a slow worker), when given
        self.gate = gate


def attach_workers(host: FakeHost, service: Any, scripts: list[WorkerScript]) -> list[dict[str, Any]]:
    """Make `host.run_worker` play `scripts` in order, routing tool calls as the shim's
    `worker.tool` does: through `service`'s worker registry (a service with `workers`, a
    registry, or anything with `tool_call`)."""
    started: list[dict[str, Any]] = []
    registry = getattr(service, "workers", service)
    route = getattr(service, "tool_call", None) or registry.call

    async def run_worker(params: WorkerRunParams, timeout: float) -> WorkerRunResult:
        spec = params.model_dump(exclude={"sessionId"})  # the `worker.run` fields the tests read
        started.append(spec)
        script = scripts.pop(0) if scripts else WorkerScript([], stop="completed")
        if script.gate is not None:
            await script.gate.wait()
        for requests, (tool, args) in enumerate(script.calls, start=1):
            if requests > spec["maxRequests"]:
                return WorkerRunResult(stop="request-limit", requests=requests - 1)
            answer = route(spec["jobId"], spec["workerId"], tool, args)
            script.answers.append(answer)
            if answer.conclude:
                return WorkerRunResult(stop="concluded", requests=requests)
        return WorkerRunResult(stop=script.stop, requests=len(script.calls))

    host.run_worker = run_worker  # type: ignore[method-assign]
    return started
