"""What the engine may ask of the host, as an interface.

`BridgeHostPort` goes over ZeroMQ to the shim; unit tests use an in-memory port backed by
the surface model. Planners and jobs only ever see this interface.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Protocol

from turn_memory.bridge.protocol import (
    ApplyParams,
    ApplyResult,
    Expectation,
    FlushParams,
    FollowupParams,
    LlmRequest,
    LlmStreamParams,
    MeasureParams,
    MeasureResult,
    ResyncParams,
    WorkerRunParams,
    WorkerRunResult,
)


class HostPort(Protocol):
    async def apply(self, session_id: str, expect: Expectation, events: list[dict[str, Any]], label: str) -> ApplyResult: ...

    async def llm_stream(self, session_id: str, request: LlmRequest,
                         on_chunks: Callable[[list[dict[str, Any]]], None], timeout: float,
                         with_tool_history: bool = True) -> None: ...

    async def flush(self, session_id: str) -> None: ...

    async def resync(self, session_id: str) -> None: ...

    async def run_worker(self, params: WorkerRunParams, timeout: float) -> WorkerRunResult: ...

    async def measure(self, session_id: str) -> MeasureResult: ...

    async def followup(self, session_id: str, message_id: str, content: list[dict[str, Any]],
                       source: dict[str, Any]) -> None: ...


class BridgeHostPort:
    def __init__(self, server: Any, peer: Any, timeout: float):
        self._server = server
        self._peer = peer
        self._timeout = timeout

    async def apply(self, session_id: str, expect: Expectation, events: list[dict[str, Any]], label: str) -> ApplyResult:
        payload = json.dumps(events, separators=(",", ":"), ensure_ascii=False).encode()
        result = await self._server.call(self._peer, "session.apply",
                                         ApplyParams(sessionId=session_id, expect=expect, label=label),
                                         payload=payload, timeout=self._timeout)
        return ApplyResult.model_validate(result)

    async def llm_stream(self, session_id: str, request: LlmRequest,
                         on_chunks: Callable[[list[dict[str, Any]]], None], timeout: float,
                         with_tool_history: bool = True) -> None:
        params = LlmStreamParams(sessionId=session_id, request=request, withToolHistory=with_tool_history)
        await self._server.call(self._peer, "llm.stream", params,
                                timeout=timeout, on_stream=lambda params: on_chunks(params.get("chunks", [])))

    async def flush(self, session_id: str) -> None:
        await self._server.call(self._peer, "session.flush", FlushParams(sessionId=session_id), timeout=self._timeout)

    async def resync(self, session_id: str) -> None:
        await self._server.call(self._peer, "session.resync", ResyncParams(sessionId=session_id), timeout=self._timeout)

    async def run_worker(self, params: WorkerRunParams, timeout: float) -> WorkerRunResult:
        result = await self._server.call(self._peer, "worker.run", params, timeout=timeout)
        return WorkerRunResult.model_validate(result) if isinstance(result, dict) else WorkerRunResult(stop=str(result))

    async def measure(self, session_id: str) -> MeasureResult:
        result = await self._server.call(self._peer, "session.measure", MeasureParams(sessionId=session_id),
                                         timeout=self._timeout)
        return MeasureResult.model_validate(result) if isinstance(result, dict) else MeasureResult(error="no measurement")

    async def followup(self, session_id: str, message_id: str, content: list[dict[str, Any]],
                       source: dict[str, Any]) -> None:
        await self._server.call(self._peer, "agent.followup", FollowupParams(
            sessionId=session_id, id=message_id, content=content, source=source), timeout=self._timeout)
