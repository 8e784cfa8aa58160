"""The engine's dispatch table (`engine.DISPATCH`) against the wire protocol and the shim.

Three lists name the same methods: the protocol's union of what the shim may send, the
engine's table of handlers, and the shim's own calls (`shim-js/lib/*.js`). They must agree,
kind and params model included; so must the engine -> shim calls and the shim's `HostOps.handle`.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from turn_memory.bridge import protocol
from turn_memory.engine import DISPATCH, Engine

SHIM_LIB = Path(__file__).resolve().parents[2] / "shim-js" / "lib"
HANDSHAKE = "hello"  # served by the bridge server itself (`on_hello`), never through the table


def _protocol_methods() -> dict[str, tuple[str, type]]:
    """method -> (kind, params model) of every call and notify in `ShimMessage`."""
    union = typing.get_args(protocol.ShimMessage)[0]
    out = {}
    for member in typing.get_args(union):
        model = typing.get_args(member)[0]
        fields = model.model_fields
        if "method" not in fields:
            continue  # reply, stream, cancel
        (method,) = typing.get_args(fields["method"].annotation)
        (kind,) = typing.get_args(fields["kind"].annotation)
        out[method] = (kind, fields["params"].annotation)
    return out


def _shim_sends() -> dict[str, set[str]]:
    """method -> kinds, from every `_call('…'` / `.call('…'` / `callEngine('…'` / `notify('…'` in the shim."""
    sent: dict[str, set[str]] = {}
    for path in sorted(SHIM_LIB.glob("*.js")):
        text = path.read_text()
        for verb, method in re.findall(r"\b(_call|call|callEngine|notify)\(\s*'([A-Za-z.]+)'", text):
            sent.setdefault(method, set()).add("notify" if verb == "notify" else "call")
    return sent


def test_the_table_serves_exactly_the_protocols_methods_with_their_params():
    wire = _protocol_methods()
    assert set(wire) == set(DISPATCH) | {HANDSHAKE}
    for method, handler in DISPATCH.items():
        assert (handler.kind, handler.params) == wire[method], method
        assert callable(handler.fn) and getattr(Engine, handler.fn.__name__) is handler.fn


def test_only_in_memory_calls_are_inline():
    assert {m for m, h in DISPATCH.items() if h.inline} == {"ping", "worker.tool"}
    assert all(h.kind == "call" for h in DISPATCH.values() if h.inline)


def test_the_shim_sends_exactly_the_protocols_methods():
    sent = _shim_sends()
    wire = _protocol_methods()
    assert set(sent) == set(wire)
    for method, kinds in sent.items():
        assert kinds == {wire[method][0]}, method


def test_the_shim_handles_exactly_the_engines_calls():
    host_ops = (SHIM_LIB / "host-ops.js").read_text()
    handle = host_ops[host_ops.index("handle(method"):]
    handle = handle[:handle.index("default:")]
    assert set(re.findall(r"case '([A-Za-z.]+)':", handle)) == set(protocol.ENGINE_CALLS)


def test_the_shims_apply_refusals_are_exactly_the_protocols():
    """Issue 27: `ApplyResult.reason` is a closed set on both sides of the bridge: every reason
    host-ops.js answers is one the engine's type names, and the engine names no other."""
    sent = set(re.findall(r"ok: false, reason: '([a-z-]+)'", (SHIM_LIB / "host-ops.js").read_text()))
    assert sent == set(typing.get_args(protocol.ApplyRefusal)) == {"unknown-session", "log-moved", "span-moved",
                                                                   "append-threw"}
