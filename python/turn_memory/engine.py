"""The engine: answers the shim. Owns the session mirrors and dispatches the work."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, TypeVar

from pydantic import BaseModel

from turn_memory import __version__, faults
from turn_memory.bridge.protocol import (
    PROTOCOL_VERSION,
    AgentOptions,
    AgentStreamParams,
    CompactIfNeededParams,
    CompactNowParams,
    CompactRegionParams,
    ElideExcept,
    ErrorInfo,
    HelloParams,
    HelloResult,
    OverflowParams,
    OverflowResult,
    PingParams,
    PreStepParams,
    PreStepResult,
    RequestParams,
    RequestResult,
    PublicToolParams,
    ToolResult,
    SessionClosedParams,
    SessionEventsParams,
    WorkerToolParams,
)
from turn_memory.bridge.port import BridgeHostPort
from turn_memory.bridge.server import BridgeServer, Peer, RemoteError
from turn_memory.catalog import carried_tools, context_sections, declared, public_tools, worker_tools
from turn_memory.compaction.failures import CompactionFailed, error_info
from turn_memory.compaction.scope import CompactionScope
from turn_memory.compaction.service import CompactionService
from turn_memory.config import ConfigError, EngineConfig, check_config
from turn_memory.continuation.dispatch import FollowupDispatcher
from turn_memory.hints.client import warm_up
from turn_memory.hints.detect import stream_block
from turn_memory.hints.service import HintService
from turn_memory.host.dialect import Dialect
from turn_memory.host.dialects import dialect_for_host
from turn_memory.prompts import PromptError
from turn_memory.runtime.mirror import MirroredSession, SessionMirror
from turn_memory.runtime.public_tools import PublicCall, PublicTools
from turn_memory.runtime.workers import WorkerRegistry
from turn_memory.turns.results import ResultStore
from turn_memory.turns.service import TurnService

log = logging.getLogger("turn_memory.engine")

#: event types the engine never reads the data of: the shim sends only their envelope
ELIDED = ["assistant/chunk"]
#: except a reasoning block's block-end (the assembled thought): thought hints start from it
REASONING_BLOCK_END = ElideExcept(type="assistant/chunk", path=["chunk", "block", "type"], equals="reasoning")


class Engine:
    def __init__(self) -> None:
        self.mirror = SessionMirror()
        self.workers = WorkerRegistry(worker_tools())
        self.hints = HintService()
        self.compaction = CompactionService(self.workers)
        # the compression policy reads how full the routed model's window is
        self.turns = TurnService(self.workers, self.hints, window_of=self.compaction.window)
        self.followups = FollowupDispatcher(self.turns)
        self.public_tools = PublicTools(public_tools())
        self.contexts = context_sections()
        #: sessions whose agents carry the public tools: once named, always named (a tool list
        #: that shrank again would break the cached prefix a second time)
        self._carrying: set[str] = set()
        self.server: BridgeServer | None = None
        self._peers: dict[bytes, tuple[Dialect, EngineConfig]] = {}
        #: where each peer's DSH home keeps finished compressions until they land
        self._results: dict[bytes, ResultStore] = {}

    async def close(self) -> None:
        """Stop every job before the socket closes: their workers die with DSH anyway, and a
        job must not read the closing socket as a string of failed workers."""
        self.hints.close()
        await asyncio.gather(*self.turns.close(), return_exceptions=True)
        await asyncio.gather(*self.compaction.close(), return_exceptions=True)
        await self.followups.close()

    # -- handshake ---------------------------------------------------------------------
    def on_hello(self, peer: Peer, params: HelloParams) -> HelloResult:
        try:
            dialect = dialect_for_host(params.host.replaceKeys if params.host else None, params.dialect)
        except ValueError as exc:
            raise RemoteError(ErrorInfo(code="dialect", message=f"cannot tell this DSH's dialect: {exc}")) from exc
        if params.checkpointSource.get("kind") != dialect.checkpoint_source("probe")["kind"]:
            raise RemoteError(ErrorInfo(code="dialect", message=(
                f"host checkpoint source {params.checkpointSource} does not match the {dialect.name} dialect")))
        try:
            config = check_config(params.config)
        except ConfigError as exc:
            # the key is named once, by the shim's line in DSH's log (this log goes there too)
            log.warning("refused the handshake: the turn-memory row's config is invalid "
                        "(see the shim's line; `turn-memory doctor` shows it)")
            first = exc.problems[0]
            raise RemoteError(ErrorInfo(code="config", message=f"invalid turn-memory config: {exc}",
                                        key=first.key, nearest=first.nearest, fix=exc.fix())) from exc
        self._peers[peer.identity] = (dialect, config)
        if params.dshHome:
            self._results[peer.identity] = ResultStore(params.dshHome)
        warm_up(config.thoughtHints)
        log.info("shim connected: DSH %s (%s dialect), pid %d", params.dshVersion, dialect.name, params.pid)
        # the pre-step may hold the step for the opt-in landing barrier and, at pressure, the
        # rewrite barrier plus a whole compaction (as stock compaction-basic does); past that
        # the shim lets the step go on without it
        barrier = config.turns.enabled and config.turns.landingBarrier
        # a continuation follow-up's first pre-step may wait as long for its hand-off turn
        followups = config.turns.enabled and config.turnContinuation.enabled
        wait_s = 2.0 + (config.turns.landingWaitS if barrier or followups else 0.0) \
            + ((config.compaction.rewriteWaitS if config.turns.enabled else 0.0) + config.compaction.workerTimeoutS
               if config.compaction.auto else 0.0)
        hints = config.thoughtHints.enabled and config.turns.enabled
        try:
            tools, sections = declared(config, self.public_tools, self.contexts)
        except PromptError as exc:
            raise RemoteError(ErrorInfo(code="prompt", message=str(exc))) from exc
        return HelloResult(protocol=PROTOCOL_VERSION, engineVersion=__version__, dialect=dialect.name, elide=ELIDED,
                           elideExcept=[REASONING_BLOCK_END] if hints else [],
                           preStepTimeoutMs=int(wait_s * 1000), bootWait=barrier, publicTools=tools,
                           contextSections=sections,
                           snapshotSources=[dict(m) for m in dialect.snapshot_sources],
                           workerShadowContexts=list(dialect.required_context_sections),
                           workerSnapshotFirst=dialect.snapshot_projected_in_step, eventLoop=_loop_name())

    # -- messages (routed by DISPATCH, below) --------------------------------------------
    def is_inline(self, method: str) -> bool:
        handler = DISPATCH.get(method)
        return handler is not None and handler.inline

    def on_notify(self, peer: Peer, method: str, params: BaseModel, payload: bytes | None) -> None:
        handler = DISPATCH.get(method)
        if handler is not None and handler.kind == "notify":
            handler.fn(self, peer, params, payload)

    def on_call(self, peer: Peer, method: str, params: BaseModel, payload: bytes | None) -> Any:
        handler = DISPATCH.get(method)
        if handler is None or handler.kind != "call":
            raise RemoteError(ErrorInfo(code="unknown-method", message=method))
        return handler.fn(self, peer, params, payload)

    def _session_events(self, peer: Peer, params: SessionEventsParams, payload: bytes | None) -> None:
        dialect, config = self._peers[peer.identity]
        events = self.mirror.receive(peer, dialect, params, payload)
        if events is None:
            self._request_resync(peer, params.sessionId)
            return
        session = self.mirror.get(params.sessionId)
        assert session is not None
        session.worker_slots.limit = config.maxActiveWorkers
        self.hints.on_events(session, events, params.reset, lambda: self._port(peer), config)
        self.turns.on_events(session, events, params.reset, lambda: self._port(peer), config,
                             self._results.get(peer.identity))
        # after the turn service saw the same events: it owns the compression jobs
        self.followups.on_events(session, events, params.reset, lambda: self._port(peer), config)

    def _agent_stream(self, peer: Peer, params: AgentStreamParams, payload: bytes | None) -> None:
        session = self.mirror.get(params.sessionId)
        block = stream_block(params.turn, params.step, params.chunk)
        if session is not None and block is not None:
            self.hints.on_stream(session, block, lambda: self._port(peer), self._peers[peer.identity][1])

    def _session_closed(self, peer: Peer, params: SessionClosedParams, payload: bytes | None) -> None:
        self.mirror.close(params.sessionId)
        self.hints.forget_session(params.sessionId)
        self._carrying.discard(params.sessionId)

    def _ping(self, peer: Peer, params: PingParams, payload: bytes | None) -> dict[str, Any]:
        return {"echo": params.echo}

    def _compact_now(self, peer: Peer, params: CompactNowParams, payload: bytes | None) -> Any:
        # imported on first use: serving turns does not need it, and the engine's start-up
        # imports compete with DSH's own boot and turn 1 for the CPU
        from turn_memory.compaction.manual import compact_now

        session = self._session(params.sessionId)
        self.turns.resume(session.id, "/compact")  # the person asked for memory: let the workers try again
        self.compaction.folds.drop(session.id, "/compact folds the history now")
        return _answered(compact_now(self._scope(session, peer, params.agentOptions), params.sourceCommandId))

    def _compact_region(self, peer: Peer, params: CompactRegionParams, payload: bytes | None) -> Any:
        from turn_memory.compaction.manual import compact_region  # on first use, as compact.now

        session = self._session(params.sessionId)
        return _answered(compact_region(self._scope(session, peer, params.agentOptions), params.start, params.end))

    def _turn_pre_step(self, peer: Peer, params: PreStepParams, payload: bytes | None) -> Any:
        session = self.mirror.get(params.sessionId)
        if session is None or not session.is_user_session:
            return {}
        return self._pre_step(session, params, self._config(peer))

    def _turn_request(self, peer: Peer, params: RequestParams, payload: bytes | None) -> Any:
        return self._at_request(params)

    def _worker_tool(self, peer: Peer, params: WorkerToolParams, payload: bytes | None) -> ToolResult:
        return self.workers.call(params.jobId, params.workerId, params.tool, params.args)

    def _tool_call(self, peer: Peer, params: PublicToolParams, payload: bytes | None) -> Any:
        return self._public_tool(peer, params)

    def _compact_if_needed(self, peer: Peer, params: CompactIfNeededParams, payload: bytes | None) -> Any:
        scope = self._scope(self._session(params.sessionId), peer, params.agentOptions)
        return self.compaction.if_needed(scope, params.trigger, scope.port.measure)

    def _compact_overflow(self, peer: Peer, params: OverflowParams, payload: bytes | None) -> Any:
        session = self._session(params.sessionId)
        return self._overflow(session, params, peer)

    async def _pre_step(self, session: MirroredSession, params: PreStepParams, config: EngineConfig) -> PreStepResult:
        if params.turn > 1 and faults.fire(faults.HANG_PRESTEP):
            faults.hang()
        # an automatic continuation about to be taken in waits (bounded) for its hand-off turn
        await self.followups.before_step(session, params.turn, params.step, config)
        # lands what is ready; waits only with the opt-in landing barrier
        at_request = await self.turns.pre_step(session, params.turn, params.step, config)
        if config.compaction.auto:
            # measures the surface as it is; waits for the rewrite in flight only when it compacts
            scope = self._scope(session, session.peer, params.agentOptions)
            await self.compaction.pre_step(scope, params.turn, scope.port.measure)
        withhold = self.followups.withheld(session, params.turn, params.step, at_request)
        return PreStepResult(contexts={c.name: c.render(session, params.turn, params.step, config)
                                       for c in self.contexts if c.enabled(config)}, landAtRequest=at_request,
                             withhold=withhold, notice=self.turns.notice(session.id),
                             tools=self._tools_of(session, params.turn, config))

    async def _at_request(self, params: RequestParams) -> RequestResult:
        session = self.mirror.get(params.sessionId)
        if session is None or not session.is_user_session:
            return RequestResult()
        await session.wait_for_length(params.logLength)  # the step/start the loop just appended
        await self.turns.at_request(session, params.turn, params.step)
        # a follow-up this step takes in whose hand-off turn the host just refused to land
        return RequestResult(withhold=self.followups.withheld(session, params.turn, params.step, False),
                             tools=self._tools_of(session, params.turn, self._config(session.peer)))

    def _tools_of(self, session: MirroredSession, turn: int, config: EngineConfig) -> list[str]:
        """The public tools this session's agent carries from this request on (sticky)."""
        if session.id in self._carrying:
            return self.public_tools.names(config)
        tools = carried_tools(session, turn, config, self.public_tools)
        if tools:
            self._carrying.add(session.id)
        return tools

    async def _public_tool(self, peer: Peer, params: PublicToolParams) -> ToolResult:
        session = self.mirror.get(params.sessionId)
        if session is None or not session.is_user_session:
            return ToolResult(text="turn-memory does not keep this session's history (it is not a user session "
                                   "mirrored by this engine)", is_error=True)
        call = PublicCall(session=session, args=params.args, turn=session.log.index.open_turn, call_id=params.callId,
                          agent_options=params.agentOptions, config=self._config(peer), port=self._port(peer))
        answer = await self.public_tools.call(params.tool, call)
        log.info("session %s turn %s: %s%s", session.id, call.turn, params.tool, " (error)" if answer.is_error else "")
        return answer

    async def _overflow(self, session: MirroredSession, params: OverflowParams, peer: Peer) -> OverflowResult:
        retry = await self.compaction.overflow(self._scope(session, peer, params.agentOptions), params.turn)
        return OverflowResult(retry=retry)

    # -- helpers -----------------------------------------------------------------------
    def _session(self, session_id: str) -> MirroredSession:
        session = self.mirror.get(session_id)
        if session is None:
            raise RemoteError(ErrorInfo(code="unknown-session", manual="busy",
                                        message=f"session {session_id} is not mirrored yet"))
        return session

    def _scope(self, session: MirroredSession, peer: Peer, agent: AgentOptions) -> CompactionScope:
        """What a compaction of `session` runs with; it enters the turn service's rewrite
        barrier (two writers must never rewrite one span)."""
        return CompactionScope(session, self._port(peer), self._config(peer), agent, self.workers, self.turns)

    def _config(self, peer: Peer) -> EngineConfig:
        return self._peers[peer.identity][1]

    def _port(self, peer: Peer) -> BridgeHostPort:
        assert self.server is not None
        return BridgeHostPort(self.server, peer, self._config(peer).hostCallTimeoutS)

    def _request_resync(self, peer: Peer, session_id: str) -> None:
        async def ask() -> None:
            try:
                await self._port(peer).resync(session_id)
            except Exception as exc:
                log.error("session %s: resync request failed: %s", session_id, exc)

        asyncio.get_running_loop().create_task(ask())


T = TypeVar("T")


async def _answered(compaction: Awaitable[T]) -> T:
    """A compaction DSH asked for; its failure becomes the wire error here, and only here."""
    try:
        return await compaction
    except CompactionFailed as exc:
        raise RemoteError(error_info(exc)) from exc


def _loop_name() -> str | None:
    try:
        return type(asyncio.get_running_loop()).__name__
    except RuntimeError:  # called outside a loop (unit tests)
        return None


@dataclass(frozen=True)
class Handler:
    """How the engine serves one shim method."""

    kind: Literal["call", "notify"]
    params: type[BaseModel]
    #: (engine, peer, params, payload) -> the result, or an awaitable of it (run as a task)
    fn: Callable[..., Any]
    #: answered in order, at once, never as a task: it only touches in-memory state
    inline: bool = False


#: every method the shim may send, but `hello` (the bridge server authenticates it and calls
#: `on_hello`); `tests/unit/test_dispatch.py` checks it against `bridge.protocol` and the shim
DISPATCH: dict[str, Handler] = {
    "ping": Handler("call", PingParams, Engine._ping, inline=True),
    # worker tool calls only touch the in-memory editor: answered in order, at once
    "worker.tool": Handler("call", WorkerToolParams, Engine._worker_tool, inline=True),
    "tool.call": Handler("call", PublicToolParams, Engine._tool_call),
    "turn.preStep": Handler("call", PreStepParams, Engine._turn_pre_step),
    "turn.request": Handler("call", RequestParams, Engine._turn_request),
    "compact.now": Handler("call", CompactNowParams, Engine._compact_now),
    "compact.region": Handler("call", CompactRegionParams, Engine._compact_region),
    "compact.ifNeeded": Handler("call", CompactIfNeededParams, Engine._compact_if_needed),
    "compact.overflow": Handler("call", OverflowParams, Engine._compact_overflow),
    "session.events": Handler("notify", SessionEventsParams, Engine._session_events),
    "agent.stream": Handler("notify", AgentStreamParams, Engine._agent_stream),
    "session.closed": Handler("notify", SessionClosedParams, Engine._session_closed),
}
