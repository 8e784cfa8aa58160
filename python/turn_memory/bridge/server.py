"""ZeroMQ ROUTER side of the bridge (asyncio).

Fast messages (handshake, ping, mirrored session events) are handled inline in the
receive loop, so the mirror sees events in exactly the order the shim sent them, and
before any call the shim sends after them. Long work (compaction) runs as tasks.
The engine calls back into the shim with `call()`; every such call has a timeout.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import itertools
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

import zmq
import zmq.asyncio
from pydantic import BaseModel, ValidationError

from turn_memory import faults
from turn_memory.bridge.protocol import (
    ENGINE_CALLS,
    PROTOCOL_VERSION,
    SHIM_MESSAGE,
    Cancel,
    ErrorInfo,
    HelloParams,
    Reply,
    Stream,
)

log = logging.getLogger("turn_memory.bridge")


class RemoteError(Exception):
    """A failure reported across the bridge (either direction)."""

    def __init__(self, info: ErrorInfo):
        super().__init__(f"{info.code}: {info.message}")
        self.info = info


class ShimTimeout(Exception):
    pass


@dataclass
class Peer:
    identity: bytes
    hello: HelloParams | None = None
    #: calls from this peer running as tasks, by call id (for cancel)
    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.hello is not None


class Handlers(Protocol):
    def on_hello(self, peer: Peer, params: HelloParams) -> BaseModel: ...
    def on_notify(self, peer: Peer, method: str, params: BaseModel, payload: bytes | None) -> None: ...
    def is_inline(self, method: str) -> bool: ...
    def on_call(self, peer: Peer, method: str, params: BaseModel, payload: bytes | None) -> Any: ...


@dataclass
class _Pending:
    future: asyncio.Future[Any]
    on_stream: Callable[[dict[str, Any]], None] | None


class BridgeServer:
    def __init__(self, endpoint: str, secret: str, handlers: Handlers):
        self._ctx = zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        # reconnecting shims reuse nothing: a fresh DEALER gets a fresh identity
        self._sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # a plain view of the same socket: draining an already-queued backlog without an
        # await per message is ~4x cheaper than zmq.asyncio's per-message receive (bench/)
        self._drain: zmq.Socket[bytes] = zmq.Socket.shadow(self._sock.underlying)
        self._requested = endpoint
        self._secret = secret
        self._handlers = handlers
        self._peers: dict[bytes, Peer] = {}
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._send_lock = asyncio.Lock()
        self.endpoint = ""

    def bind(self) -> str:
        self._sock.bind(self._requested)
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return self.endpoint

    def close(self) -> None:
        for peer in self._peers.values():
            for task in peer.tasks.values():
                task.cancel()
        self._sock.close(0)

    # -- sending -----------------------------------------------------------------------
    async def _send(self, identity: bytes, header: dict[str, Any], payload: bytes | None = None) -> None:
        frames = [identity, json.dumps(header, separators=(",", ":")).encode()]
        if payload is not None:
            frames.append(payload)
        async with self._send_lock:
            await self._sock.send_multipart(frames)

    async def _reply(self, identity: bytes, call_id: str, result: Any = None, error: ErrorInfo | None = None,
                     payload: bytes | None = None) -> None:
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json", exclude_none=True)
        reply = Reply(id=call_id, result=result, error=error)
        await self._send(identity, reply.model_dump(mode="json", exclude_none=True), payload)

    async def call(self, peer: Peer, method: str, params: BaseModel, *, payload: bytes | None = None,
                   timeout: float = 30.0, on_stream: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """Call the shim; raises RemoteError, ShimTimeout or asyncio.CancelledError (after cancelling remotely)."""
        if not isinstance(params, ENGINE_CALLS[method]):  # every engine->shim call is declared once
            raise TypeError(f"{method} takes {ENGINE_CALLS[method].__name__}, not {type(params).__name__}")
        call_id = f"e{next(self._ids)}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = _Pending(future, on_stream)
        header = {"v": PROTOCOL_VERSION, "kind": "call", "id": call_id, "method": method,
                  "params": params.model_dump(mode="json", exclude_none=True)}
        try:
            await self._send(peer.identity, header, payload)
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            await self._send(peer.identity, Cancel(id=call_id).model_dump())
            raise ShimTimeout(f"shim did not answer {method} within {timeout:.0f}s") from None
        except asyncio.CancelledError:
            await asyncio.shield(self._send(peer.identity, Cancel(id=call_id).model_dump()))
            raise
        finally:
            self._pending.pop(call_id, None)

    # -- receiving ---------------------------------------------------------------------
    async def serve(self) -> None:
        while True:
            batch = [await self._sock.recv_multipart()]
            while len(batch) < 256:
                try:
                    batch.append(self._drain.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break
            for frames in batch:
                if len(frames) < 2:
                    continue
                identity, header = frames[0], frames[1]
                payload = frames[2] if len(frames) > 2 else None
                try:
                    await self._dispatch(identity, header, payload)
                except Exception:  # one bad message must never stop the loop
                    log.exception("bridge: failed to handle a message")

    async def _dispatch(self, identity: bytes, raw: bytes, payload: bytes | None) -> None:
        try:
            msg = SHIM_MESSAGE.validate_json(raw)
        except ValidationError as exc:
            call_id = _peek_id(raw)
            log.warning("bridge: rejected a malformed message: %s", _short(exc))
            if call_id is not None:
                await self._reply(identity, call_id, error=ErrorInfo(code="bad-message", message=_short(exc)))
            return
        peer = self._peers.get(identity)
        kind = msg.kind
        if kind == "reply":
            self._settle(msg)
            return
        if kind == "stream":
            pending = self._pending.get(msg.id)
            if pending and pending.on_stream:
                pending.on_stream(msg.params)
            return
        if kind == "cancel":
            if peer and (task := peer.tasks.get(msg.id)):
                task.cancel()
            return
        method = msg.method
        if method == "hello":
            await self._hello(identity, msg)
            return
        if peer is None or not peer.ready:
            # unauthenticated peers get nothing but a refusal
            if kind == "call":
                await self._reply(identity, msg.id, error=ErrorInfo(code="unauthorized", message="handshake first"))
            return
        if kind == "notify":
            self._handlers.on_notify(peer, method, msg.params, payload)
            return
        if self._handlers.is_inline(method):
            await self._run_call(peer, msg.id, method, msg.params, payload)
            return
        task = asyncio.create_task(self._run_call(peer, msg.id, method, msg.params, payload))
        peer.tasks[msg.id] = task
        task.add_done_callback(functools.partial(_forget_task, peer.tasks, msg.id))

    async def _hello(self, identity: bytes, msg: Any) -> None:
        params: HelloParams = msg.params
        if not hmac.compare_digest(params.secret.encode(), self._secret.encode()):
            log.warning("bridge: refused a client with a wrong secret")
            await self._reply(identity, msg.id, error=ErrorInfo(code="unauthorized", message="bad secret"))
            return
        if params.protocol != PROTOCOL_VERSION:
            await self._reply(identity, msg.id, error=ErrorInfo(
                code="protocol", message=f"engine speaks protocol {PROTOCOL_VERSION}, shim {params.protocol}"))
            return
        peer = Peer(identity, params)
        try:
            result = self._handlers.on_hello(peer, params)
        except RemoteError as exc:
            await self._reply(identity, msg.id, error=exc.info)
            return
        self._peers[identity] = peer
        await self._reply(identity, msg.id, result)

    async def _run_call(self, peer: Peer, call_id: str, method: str, params: BaseModel, payload: bytes | None) -> None:
        try:
            outcome = self._handlers.on_call(peer, method, params, payload)
            if isinstance(outcome, Awaitable):
                outcome = await outcome
            result, out_payload = outcome if isinstance(outcome, tuple) else (outcome, None)
            if method == "turn.preStep" and getattr(params, "turn", 0) > 1 and faults.fire(faults.CORRUPT_REPLY):
                async with self._send_lock:
                    await self._sock.send_multipart([peer.identity, b'{"v":1,"kind":"reply","id":"' + call_id.encode()])
                return
            await self._reply(peer.identity, call_id, result, payload=out_payload)
        except RemoteError as exc:
            await self._reply(peer.identity, call_id, error=exc.info)
        except asyncio.CancelledError:
            await self._reply(peer.identity, call_id, error=ErrorInfo(
                code="cancelled", message=f"{method} was cancelled", manual="cancelled"))
        except Exception as exc:
            log.exception("bridge: %s failed", method)
            await self._reply(peer.identity, call_id, error=ErrorInfo(code="internal", message=f"{type(exc).__name__}: {exc}"))

    def _settle(self, reply: Reply) -> None:
        pending = self._pending.get(reply.id)
        if pending is None or pending.future.done():
            return
        if reply.error is not None:
            pending.future.set_exception(RemoteError(reply.error))
        else:
            pending.future.set_result(reply.result)


def _forget_task(tasks: dict[str, "asyncio.Task[Any]"], call_id: str, _task: "asyncio.Task[Any]") -> None:
    tasks.pop(call_id, None)


def _peek_id(raw: bytes) -> str | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    call_id = value.get("id") if isinstance(value, dict) and value.get("kind") == "call" else None
    return call_id if isinstance(call_id, str) else None


def _short(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)
    return f"{'.'.join(str(p) for p in errors[0]['loc'])}: {errors[0]['msg']}"


__all__ = ["BridgeServer", "Peer", "RemoteError", "ShimTimeout", "Handlers", "Stream"]
