"""Behaviour of the surface model (turn_memory.host.surface) under both host dialects."""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import pytest

from surface_builders import (
    LogBuilder,
    base_log,
    compaction_plan,
    rewritten_tool_result,
    span,
    user_message,
)
from turn_memory.host.dialect import Dialect
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog, SurfaceError

BOTH = pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])


# -- helpers ---------------------------------------------------------------------------------


def world(dialect: Dialect, *, system: bool | None = None, turns: int = 2) -> tuple[SessionLog, list[dict[str, int]]]:
    events, marks = base_log(dialect, turns=turns, system=system)
    log = SessionLog(dialect, events)
    assert log.reload_problems == []
    return log, marks


def first_content(log: SessionLog) -> int:
    """Index of the first surface node after a v02 system head."""
    return 1 if log.events[log.nodes[0]]["type"] == "system/message" else 0


def plan_for(log: SessionLog) -> LogBuilder:
    b = LogBuilder(log.dialect, len(log))
    b.turn_no, b.step_no = _open_turn_step(log)
    return b


def _open_turn_step(log: SessionLog) -> tuple[int, int]:
    """The (turn, step) a plan appended now would sit in (0 when none is open)."""
    step = None
    for event in reversed(log.events):
        data = event.get("data") if isinstance(event.get("data"), dict) else {}
        if step is None and event["type"] in ("step/start", "step/end"):
            step = data["step"] if event["type"] == "step/start" else 0
        if event["type"] == "turn/end":
            return 0, 0
        if event["type"] == "turn/start":
            return data["turn"], step or 0
    return 0, 0


def open_turn(log: SessionLog, *, step: bool = False) -> None:
    """Start the next turn (and its first step) in the log, as the agent loop would: v02 lets
    tool-result rewrites land only in an open turn, and new assistant/tool nodes only in an
    open step (the reload lifecycle rules)."""
    turns = sum(1 for e in log.events if e["type"] == "turn/start")
    b = LogBuilder(log.dialect, len(log))
    b.add("turn/start", {"turn": turns + 1})
    if step:
        b.add("step/start", {"turn": turns + 1, "step": 1})
    for event in b.events:
        assert log.append(event) == []


def snapshot(log: SessionLog) -> tuple[Any, ...]:
    return (len(log), list(log.nodes), log.replace_generation, copy.deepcopy(log.events), list(log.reload_problems))


def rejects(log: SessionLog, plan: list[dict[str, Any]], rule: str, *, index: int | None = None) -> SurfaceError:
    before = snapshot(log)
    with pytest.raises(SurfaceError) as caught:
        log.check_plan(plan)
    assert caught.value.rule == rule, str(caught.value)
    if index is not None:
        assert caught.value.index == index
    assert snapshot(log) == before, "check_plan mutated the log"
    return caught.value


def accepts(log: SessionLog, plan: list[dict[str, Any]]) -> None:
    before = snapshot(log)
    log.check_plan(plan)
    assert snapshot(log) == before
    for event in plan:  # the mirror path must agree and see nothing that would break a reload
        assert log.append(event) == []


def user_replace(log: SessionLog, first: int, last: int, *, extra: tuple[int, ...] = (), op: Any = None) -> list[dict[str, Any]]:
    p = plan_for(log)
    shadowed = span(log.nodes, first, last)
    p.add("user/message", user_message("summary"), op=op or log.dialect.replace_op(first, last), sources=[*extra, *shadowed])
    return p.events


# -- replace op shape ---------------------------------------------------------------------


def test_rejects_rc8_op_keys_under_v02() -> None:
    log, m = world(V02)
    plan = user_replace(log, m[0]["user"], m[0]["user"], op={"op": "replace", "start": m[0]["user"], "end": m[0]["user"]})
    rejects(log, plan, "surface-op-shape")


def test_rejects_v02_op_keys_under_rc8() -> None:
    log, m = world(RC8)
    u = m[0]["user"]
    rejects(log, user_replace(log, u, u, op={"op": "replace", "startSeq": u, "endSeq": u}), "surface-op-shape")


@BOTH
def test_rejects_replace_op_with_extra_key(dialect: Dialect) -> None:
    log, m = world(dialect)
    u = m[0]["user"]
    rejects(log, user_replace(log, u, u, op={**dialect.replace_op(u, u), "why": "x"}), "surface-op-shape")


@BOTH
def test_rejects_replace_op_with_missing_key(dialect: Dialect) -> None:
    log, m = world(dialect)
    u = m[0]["user"]
    op = dialect.replace_op(u, u)
    del op[dialect.replace_keys[1]]
    rejects(log, user_replace(log, u, u, op=op), "surface-op-shape")


@BOTH
@pytest.mark.parametrize("bad", ["3", 3.0, True, None, -1], ids=["str", "float", "bool", "null", "negative"])
def test_rejects_replace_op_with_non_integer_or_negative_endpoint(dialect: Dialect, bad: Any) -> None:
    log, m = world(dialect)
    u = m[0]["user"]
    op = dialect.replace_op(u, u)
    op[dialect.replace_keys[0]] = bad
    rejects(log, user_replace(log, u, u, op=op), "surface-op-shape")


@BOTH
@pytest.mark.parametrize("op", ["replace", ["append"], None, {"op": "append"}], ids=["string", "list", "null", "dict-append"])
def test_rejects_malformed_surface_op(dialect: Dialect, op: Any) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("user/message", user_message("x"), surfaceOp=op)
    rejects(log, p.events, "surface-op-shape")


@BOTH
def test_rejects_replace_op_with_wrong_op_name(dialect: Dialect) -> None:
    log, m = world(dialect)
    u = m[0]["user"]
    rejects(log, user_replace(log, u, u, op={**dialect.replace_op(u, u), "op": "insert"}), "surface-op-shape")


# -- surface eligibility ------------------------------------------------------------------


@BOTH
def test_rejects_surface_op_on_non_surface_event_type(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("turn/start", {"turn": 9}, op="append")
    rejects(log, p.events, "surface-op-ineligible")


@BOTH
def test_rejects_source_seqs_on_non_surface_event_type(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("compaction/start", {"compactionId": "c", "turn": None}, sources=[0])
    rejects(log, p.events, "source-seqs-ineligible")


def test_rejects_system_message_on_rc8_surface() -> None:
    log, _ = world(RC8)
    p = plan_for(log)
    p.system()
    rejects(log, p.events, "surface-op-ineligible")


@BOTH
@pytest.mark.parametrize("kind", ["user", "assistant", "tool"])
def test_rejects_surface_event_without_op(dialect: Dialect, kind: str) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    {"user": p.user, "assistant": p.assistant, "tool": lambda **kw: p.tool_result("c1", **kw)}[kind](op=None)
    rejects(log, p.events, "surface-op-missing")


# -- provenance -----------------------------------------------------------------------------


@BOTH
def test_rejects_shadowed_seq_not_cited(dialect: Dialect) -> None:
    log, m = world(dialect)
    plan = user_replace(log, m[0]["user"], m[0]["answer"])
    plan[0]["sourceEventSeqs"].remove(m[0]["tool_result"])
    err = rejects(log, plan, "replace-coverage")
    assert str(m[0]["tool_result"]) in str(err)


@BOTH
def test_rejects_replacement_without_source_seqs(dialect: Dialect) -> None:
    log, m = world(dialect)
    plan = user_replace(log, m[0]["user"], m[0]["user"])
    del plan[0]["sourceEventSeqs"]
    rejects(log, plan, "replace-coverage")


@BOTH
@pytest.mark.parametrize("kind", ["user", "tool"])
def test_rejects_empty_source_seqs(dialect: Dialect, kind: str) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    if kind == "user":
        p.user(sources=[])
    else:
        p.tool_result("c1", sources=[])
    rejects(log, p.events, "source-seqs-empty")


@BOTH
def test_rejects_duplicate_source_seqs(dialect: Dialect) -> None:
    log, m = world(dialect)
    u = m[0]["user"]
    rejects(log, user_replace(log, u, u, extra=(u,)), "source-seqs-duplicate")


@BOTH
@pytest.mark.parametrize("offset", [0, 1], ids=["self", "later"])
def test_rejects_non_earlier_source_seqs(dialect: Dialect, offset: int) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.user(sources=[0, len(log) + offset])
    rejects(log, p.events, "source-seqs-earlier")


@BOTH
@pytest.mark.parametrize("entry", ["1", 1.0, -1, None, True])
def test_rejects_non_seq_source_entry(dialect: Dialect, entry: Any) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.user(sources=[0, entry])
    rejects(log, p.events, "source-seqs-entry")


@BOTH
@pytest.mark.parametrize("value", [3, "3", {"0": 3}, None])
def test_rejects_non_array_source_seqs(dialect: Dialect, value: Any) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.user(sourceEventSeqs=value)
    rejects(log, p.events, "source-seqs-array")


# -- replace range ------------------------------------------------------------------------


@BOTH
def test_rejects_endpoint_not_on_surface(dialect: Dialect) -> None:
    log, m = world(dialect)
    rejects(log, user_replace(log, m[0]["user"], m[0]["user"], op=dialect.replace_op(m[0]["turn_start"], m[0]["user"])), "replace-endpoint-missing")
    rejects(log, user_replace(log, m[0]["user"], m[0]["user"], op=dialect.replace_op(m[0]["user"], m[0]["tool_call"])), "replace-endpoint-missing")


@BOTH
def test_rejects_endpoint_shadowed_by_earlier_replacement(dialect: Dialect) -> None:
    log, m = world(dialect)
    first = user_replace(log, m[0]["user"], m[0]["answer"])
    p = LogBuilder(dialect, len(log) + 1)
    p.add("user/message", user_message("again"), op=dialect.replace_op(m[0]["user"], m[0]["user"]), sources=[m[0]["user"]])
    rejects(log, first + p.events, "replace-endpoint-missing", index=1)


@BOTH
def test_rejects_start_after_end(dialect: Dialect) -> None:
    log, m = world(dialect)
    a, b = m[0]["user"], m[0]["answer"]
    rejects(log, user_replace(log, a, b, op=dialect.replace_op(b, a)), "replace-order")


def test_v02_rejects_endpoint_not_earlier_than_event() -> None:
    log, m = world(V02)
    seq = len(log)
    rejects(log, user_replace(log, m[0]["user"], m[0]["user"], op=V02.replace_op(m[0]["user"], seq)), "replace-endpoint-earlier")


def test_rc8_rejects_self_endpoint_as_off_surface() -> None:
    log, m = world(RC8)
    rejects(log, user_replace(log, m[0]["user"], m[0]["user"], op=RC8.replace_op(m[0]["user"], len(log))), "replace-endpoint-missing")


# -- assistant provenance -------------------------------------------------------------------


@pytest.mark.parametrize("sources", [[], [0]], ids=["empty", "non-empty"])
def test_v02_rejects_any_source_seqs_on_assistant(sources: list[int]) -> None:
    log, _ = world(V02)
    p = plan_for(log)
    p.assistant("hi", sources=sources)
    rejects(log, p.events, "source-seqs-assistant")


@pytest.mark.parametrize("with_sources", [True, False])
def test_v02_rejects_assistant_replacement(with_sources: bool) -> None:
    log, m = world(V02)
    p = plan_for(log)
    a = m[0]["answer"]
    p.assistant("rewritten", op=V02.replace_op(a, a), sources=[a] if with_sources else None)
    rejects(log, p.events, "assistant-replace")


def test_rc8_rejects_assistant_replacement_with_empty_sources() -> None:
    # "empty allowed" only spares the array check: a replacement must still cite what it shadows
    log, m = world(RC8)
    p = plan_for(log)
    a = m[0]["answer"]
    p.assistant("rewritten", op=RC8.replace_op(a, a), sources=[])
    rejects(log, p.events, "replace-coverage")


# -- tool/result rewrite ------------------------------------------------------------------


@BOTH
def test_rejects_tool_rewrite_spanning_two_nodes(dialect: Dialect) -> None:
    log, m = world(dialect)
    open_turn(log)
    ev = rewritten_tool_result(log.events[m[0]["tool_result"]], len(log), dialect)
    ev["surfaceOp"] = dialect.replace_op(m[0]["tool_result"], m[0]["answer"])
    ev["sourceEventSeqs"] = [m[0]["tool_result"], m[0]["answer"]]
    rejects(log, [ev], "tool-rewrite-span")


@BOTH
def test_rejects_tool_rewrite_of_non_tool_node(dialect: Dialect) -> None:
    log, m = world(dialect)
    open_turn(log)
    ev = rewritten_tool_result(log.events[m[0]["tool_result"]], len(log), dialect)
    ev["surfaceOp"] = dialect.replace_op(m[0]["answer"], m[0]["answer"])
    ev["sourceEventSeqs"] = [m[0]["answer"]]
    rejects(log, [ev], "tool-rewrite-target")


@BOTH
@pytest.mark.parametrize("field", ["isError", "message-id", "turn", "extra-data"])
def test_rejects_tool_rewrite_changing_more_than_content(dialect: Dialect, field: str) -> None:
    log, m = world(dialect)
    open_turn(log)
    ev = rewritten_tool_result(log.events[m[0]["tool_result"]], len(log), dialect)
    if field == "isError":
        flagged = ev["data"]["message"] if dialect.first_class_tool_results else ev["data"]["message"]["content"][0]
        flagged["isError"] = True
    elif field == "message-id":
        ev["data"]["message"]["id"] = "other"
    elif field == "turn":
        ev["data"]["turn"] = 7
    else:
        ev["data"]["pruned"] = True
    rejects(log, [ev], "tool-rewrite-content-only")


# -- v02 system head ------------------------------------------------------------------------


def test_v02_rejects_non_system_replacement_of_system_head() -> None:
    log, _ = world(V02, system=True)
    head = log.nodes[0]
    rejects(log, user_replace(log, head, head), "system-head")


def test_v02_rejects_range_including_system_head() -> None:
    log, m = world(V02, system=True)
    rejects(log, user_replace(log, log.nodes[0], m[0]["answer"]), "system-head")
    p = plan_for(log)
    p.add("system/message", {"message": {"id": "s2", "role": "system", "source": {"kind": "system-prompt"}, "content": []}},
          op=V02.replace_op(log.nodes[0], m[0]["user"]), sources=span(log.nodes, log.nodes[0], m[0]["user"]))
    rejects(log, p.events, "system-head")


def test_v02_accepts_system_replacing_exactly_system_head() -> None:
    log, m = world(V02, system=True)
    open_turn(log, step=True)  # the loop re-renders the system prompt inside a step
    head = log.nodes[0]
    p = plan_for(log)
    p.add("system/message", {"turn": 3, "step": 1, "message": {"id": "s2", "role": "system", "source": {"kind": "system-prompt"},
                                                               "content": [{"type": "text", "text": "new"}]}},
          op=V02.replace_op(head, head), sources=[head])
    accepts(log, p.events)
    assert log.nodes[0] == p.events[0]["seq"]
    # the range after the head stays free to compact (automatic: owned by the open turn)
    accepts(log, compaction_plan(V02, len(log), span(log.nodes, m[0]["user"], m[0]["answer"]), turn=3))


# -- message shapes (reload checks) -------------------------------------------------------


def _one(log: SessionLog, kind: str) -> tuple[LogBuilder, dict[str, Any]]:
    """A plan with one valid appended message of `kind`; returns it and its message dict."""
    p = plan_for(log)
    if kind == "user":
        p.user()
        return p, p.events[0]["data"]
    if kind == "assistant":
        p.assistant("hi")
    else:
        p.tool_result("c1")
    return p, p.events[0]["data"]["message"]


@BOTH
@pytest.mark.parametrize("kind,role", [("user", "assistant"), ("assistant", "user"), ("tool", "assistant")])
def test_rejects_wrong_message_role(dialect: Dialect, kind: str, role: str) -> None:
    log, _ = world(dialect)
    p, msg = _one(log, kind)
    msg["role"] = role
    rejects(log, p.events, "message-role")


@pytest.mark.parametrize("dialect,role", [(RC8, "tool"), (V02, "user")], ids=["rc8-tool-role", "v02-user-role"])
def test_rejects_tool_result_role_of_the_other_dialect(dialect: Dialect, role: str) -> None:
    log, _ = world(dialect)
    p, msg = _one(log, "tool")
    msg["role"] = role
    rejects(log, p.events, "message-role")


@BOTH
@pytest.mark.parametrize(
    "kind,source",
    [
        ("assistant", {"kind": "plugin", "plugin": "turn-memory"}),
        ("assistant", {"kind": "model", "provider": "p"}),
        ("assistant", {"kind": "model", "provider": "", "model": "m"}),
        ("tool", {"kind": "plugin", "callId": "c1"}),
        ("tool", {"kind": "tool"}),
        ("tool", {"kind": "tool", "callId": ""}),
        ("user", {"kind": ""}),
        ("user", {}),
        ("user", None),
        ("user", "user"),
    ],
)
def test_rejects_wrong_message_source(dialect: Dialect, kind: str, source: Any) -> None:
    log, _ = world(dialect)
    p, msg = _one(log, kind)
    if source is None:
        del msg["source"]
    else:
        msg["source"] = source
    rule = "message-source"
    if dialect is V02 and isinstance(source, dict) and source.get("kind") == "plugin":
        rule = "retired-source"  # format v4 refuses the retired kind before any other source check
    elif dialect is V02 and kind == "tool" and source in ({"kind": "tool"}, {"kind": "tool", "callId": ""}):
        rule = "tool-call-id"  # v4 checks toolCallId === source.callId before the source kind
    rejects(log, p.events, rule)


@BOTH
def test_rejects_tool_source_call_id_not_matching_block(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p, msg = _one(log, "tool")
    msg["source"]["callId"] = "c2"
    rejects(log, p.events, "tool-call-id")


@BOTH
@pytest.mark.parametrize("kind", ["user", "assistant", "tool"])
@pytest.mark.parametrize("bad_id", [None, "", 7])
def test_rejects_missing_message_id(dialect: Dialect, kind: str, bad_id: Any) -> None:
    log, _ = world(dialect)
    p, msg = _one(log, kind)
    if bad_id is None:
        del msg["id"]
    else:
        msg["id"] = bad_id
    rejects(log, p.events, "message-id")


@BOTH
def test_rejects_non_array_message_content(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p, msg = _one(log, "user")
    msg["content"] = "hello"
    rejects(log, p.events, "message-content")


@pytest.mark.parametrize("shape", ["none", "two", "text-block", "block-content-not-array"])
def test_rc8_rejects_tool_result_not_exactly_one_tool_result_block(shape: str) -> None:
    dialect = RC8
    log, _ = world(dialect)
    p, msg = _one(log, "tool")
    block = msg["content"][0]
    if shape == "none":
        msg["content"] = []
    elif shape == "two":
        msg["content"] = [block, copy.deepcopy(block)]
    elif shape == "text-block":
        msg["content"] = [{"type": "text", "text": "x"}]
    else:
        block["content"] = "x"
    rejects(log, p.events, "tool-result-block")


@pytest.mark.parametrize("content,rule", [
    ([{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "x"}], "isError": False}],
     "tool-result-wrapper"),
    ("x", "message-content"),
])
def test_v02_rejects_rc8_wrapper_and_non_array_tool_content(content: Any, rule: str) -> None:
    log, _ = world(V02)
    p, msg = _one(log, "tool")
    msg["content"] = content
    rejects(log, p.events, rule)


@pytest.mark.parametrize("field,value,rule", [
    ("toolCallId", "c2", "tool-call-id"), ("isError", "no", "v4-tool-result"), ("role", "user", "message-role"),
])
def test_v02_rejects_malformed_first_class_tool_result(field: str, value: Any, rule: str) -> None:
    log, _ = world(V02)
    p, msg = _one(log, "tool")
    msg[field] = value
    rejects(log, p.events, rule)


def test_v02_accepts_tool_result_with_any_blocks_in_an_open_step() -> None:
    log, _ = world(V02)
    open_turn(log, step=True)
    p = plan_for(log)
    p.assistant("call", tool_calls=("c1",))
    p.tool_call("c1")
    p.tool_result("c1", call_seq=p.events[-1]["seq"])
    p.events[-1]["data"]["message"]["content"] = []  # empty output is still a result
    accepts(log, p.events)


@pytest.mark.parametrize("stream", ["missing", None, {}, "[]"])
def test_v02_rejects_assistant_without_stream_array(stream: Any) -> None:
    log, _ = world(V02)
    p = plan_for(log)
    p.assistant("hi")
    if stream == "missing":
        del p.events[0]["data"]["stream"]
    else:
        p.events[0]["data"]["stream"] = stream
    rejects(log, p.events, "assistant-stream")


@pytest.mark.parametrize("field,value", [("turn", -1), ("step", "1"), ("turn", None)])
def test_v02_rejects_assistant_bad_turn_step(field: str, value: Any) -> None:
    log, _ = world(V02)
    p = plan_for(log)
    p.assistant("hi")
    p.events[0]["data"][field] = value
    rejects(log, p.events, "assistant-turn-step")


def test_rc8_assistant_needs_no_stream() -> None:
    log, _ = world(RC8)
    p = plan_for(log)
    p.assistant("hi")
    assert "stream" not in p.events[0]["data"]
    accepts(log, p.events)


@BOTH
def test_rejects_unknown_event_type(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("turn-memory/ledger", {"x": 1})
    rejects(log, p.events, "known-type")


def test_v02_only_event_type_is_unknown_to_rc8() -> None:
    for dialect, ok in ((RC8, False), (V02, True)):
        log, _ = world(dialect)
        p = plan_for(log)
        p.add("model/selection", {"provider": "p", "model": "m"})
        if ok:
            accepts(log, p.events)
        else:
            rejects(log, p.events, "known-type")


# -- envelope -------------------------------------------------------------------------------


@BOTH
def test_rejects_ignorable_marker_in_plan(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("turn-memory/ledger", {}, ignorable=True)
    rejects(log, p.events, "ignorable")


@BOTH
def test_rejects_envelope_problems(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.user(sourceEventSeq=[1])  # misspelt key
    rejects(log, p.events, "envelope")
    p = plan_for(log)
    p.user()
    del p.events[0]["data"]
    rejects(log, p.events, "envelope")
    p = plan_for(log)
    p.user(time=1.5)
    rejects(log, p.events, "envelope")


@BOTH
def test_time_may_be_left_to_the_host(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.user()
    del p.events[0]["time"]
    log.check_plan(p.events)


@BOTH
def test_rejects_non_contiguous_seq(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = LogBuilder(dialect, len(log) + 1)
    p.user()
    rejects(log, p.events, "seq")


@BOTH
@pytest.mark.parametrize("value", [math.nan, math.inf, -0.0, 2**60, object()], ids=["nan", "inf", "neg-zero", "big-int", "object"])
def test_rejects_non_json_data(dialect: Dialect, value: Any) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("todo/write", {"value": value})
    rejects(log, p.events, "json")


@BOTH
def test_rejects_legacy_request_header_delta(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("request/header-delta", {})
    rejects(log, p.events, "legacy-header")
    p = plan_for(log)
    p.add("request/header", {"reason": "fallback", "header": {"config": {"provider": "p", "model": "m"}}})
    rejects(log, p.events, "legacy-header")


@BOTH
def test_rejects_request_header_without_provider_model(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("request/header", {"header": {"config": {"provider": "p"}}})
    rejects(log, p.events, "request-header")
    p = plan_for(log)
    p.add("request/header", {"header": {"config": {"provider": "p", "model": "m"}, "adapterDefaults": {"maxTokens": True}}})
    rejects(log, p.events, "request-header")


# -- valid forms --------------------------------------------------------------------------


@BOTH
def test_accepts_user_append(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    seq = p.user("more")
    accepts(log, p.events)
    assert log.nodes[-1] == seq


@BOTH
def test_accepts_user_replacement_of_span_with_full_and_extra_citation(dialect: Dialect) -> None:
    log, m = world(dialect)
    gen = log.replace_generation
    plan = user_replace(log, m[0]["user"], m[0]["answer"], extra=(0, m[0]["turn_start"]))
    accepts(log, plan)
    assert log.nodes[first_content(log)] == plan[0]["seq"]
    assert m[0]["tool_result"] not in log.nodes
    assert log.replace_generation == gen + 1


@pytest.mark.parametrize("extra", [(), (0,)], ids=["exact", "extra"])
def test_rc8_accepts_assistant_replacement_with_sources(extra: tuple[int, ...]) -> None:
    log, m = world(RC8)
    p = plan_for(log)
    shadowed = span(log.nodes, m[0]["call_assistant"], m[0]["answer"])
    p.assistant("rewritten", op=RC8.replace_op(shadowed[0], shadowed[-1]), sources=[*extra, *shadowed])
    accepts(log, p.events)


def test_rc8_accepts_assistant_append_with_empty_sources() -> None:
    log, _ = world(RC8)
    p = plan_for(log)
    p.assistant("hi", sources=[])
    accepts(log, p.events)


@BOTH
def test_accepts_tool_result_content_only_rewrite(dialect: Dialect) -> None:
    log, m = world(dialect)
    open_turn(log)
    ev = rewritten_tool_result(log.events[m[0]["tool_result"]], len(log), dialect)
    accepts(log, [ev])
    assert dialect.tool_result_blocks(log.message_of(ev["seq"])) == [{"type": "text", "text": "[pruned]"}]
    assert m[0]["tool_result"] not in log.nodes


def test_v02_accepts_assistant_append_with_empty_stream() -> None:
    log, _ = world(V02)
    open_turn(log, step=True)
    p = plan_for(log)
    p.assistant("appended")
    p.events[0]["data"]["stream"] = []
    accepts(log, p.events)


def test_v02_rejects_assistant_append_outside_an_open_step() -> None:
    log, _ = world(V02)
    p = plan_for(log)
    p.assistant("appended")
    rejects(log, p.events, "lifecycle-step")


@BOTH
def test_accepts_compaction_transaction(dialect: Dialect) -> None:
    log, m = world(dialect, system=dialect is V02)
    shadowed = span(log.nodes, m[0]["user"], m[0]["answer"])
    plan = compaction_plan(dialect, len(log), shadowed)
    assert [e["type"] for e in plan] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    accepts(log, plan)
    checkpoint = plan[2]["seq"]
    assert checkpoint in log.nodes and not set(shadowed) & set(log.nodes)
    assert dialect.is_checkpoint_source(log.message_of(checkpoint)["source"])


@BOTH
def test_accepts_replacement_of_nodes_appended_in_same_batch(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    a = p.user("one")
    b = p.user("two")
    p.add("user/message", user_message("both"), op=dialect.replace_op(a, b), sources=[a, b])
    accepts(log, p.events)
    assert log.nodes[-1] == p.events[-1]["seq"]


# -- check_plan purity ------------------------------------------------------------------------


@BOTH
def test_check_plan_leaves_log_unchanged_after_failing_batch(dialect: Dialect) -> None:
    log, m = world(dialect)
    p = plan_for(log)
    p.user("fine")
    p.add("user/message", user_message("s"), op=dialect.replace_op(m[0]["user"], m[0]["answer"]), sources=span(log.nodes, m[0]["user"], m[0]["answer"]))
    p.add("turn-memory/ledger", {})  # third event is invalid
    rejects(log, p.events, "known-type", index=2)
    # the same batch minus the bad event still fits the untouched log
    accepts(log, p.events[:2])


@BOTH
def test_check_plan_leaves_log_unchanged_after_valid_batch(dialect: Dialect) -> None:
    log, m = world(dialect)
    before = snapshot(log)
    log.check_plan(compaction_plan(dialect, len(log), span(log.nodes, m[0]["user"], m[0]["answer"])))
    assert snapshot(log) == before


# -- mirror path ----------------------------------------------------------------------------


@BOTH
def test_append_raises_on_append_time_violation(dialect: Dialect) -> None:
    log, m = world(dialect)
    plan = user_replace(log, m[0]["user"], m[0]["answer"])
    plan[0]["sourceEventSeqs"] = [m[0]["user"]]
    with pytest.raises(SurfaceError) as caught:
        log.append(plan[0])
    assert caught.value.rule == "replace-coverage"
    assert len(log) == plan[0]["seq"]  # nothing committed
    with pytest.raises(SurfaceError, match="contiguous"):
        log.append({**plan[0], "seq": 0})


@BOTH
def test_append_returns_reload_problems(dialect: Dialect) -> None:
    log, _ = world(dialect)
    p = plan_for(log)
    p.add("turn-memory/ledger", {})
    p.user()
    p.events[1]["data"]["role"] = "assistant"
    problems = log.extend(p.events)
    assert len(problems) == 2 and "would not reload" in problems[0]
    assert log.reload_problems == problems
    assert log.nodes[-1] == p.events[1]["seq"]  # still folded: the host accepted it live


def test_v02_append_of_assistant_without_stream_is_reload_problem() -> None:
    log, _ = world(V02)
    p = plan_for(log)
    p.assistant("hi")
    del p.events[0]["data"]["stream"]
    assert any("stream" in s for s in log.append(p.events[0]))


@BOTH
def test_constructor_raises_on_invalid_log(dialect: Dialect) -> None:
    events, m = base_log(dialect)
    events[m[0]["user"]]["surfaceOp"] = dialect.replace_op(0, 0)
    with pytest.raises(SurfaceError):
        SessionLog(dialect, events)


def test_ignorable_unknown_event_reloads() -> None:
    events, _ = base_log(RC8)
    events.append({"type": "future/thing", "seq": len(events), "time": 1, "data": {}, "ignorable": True})
    assert SessionLog(RC8, events).reload_problems == []


# -- projection and lookup ------------------------------------------------------------------


@BOTH
def test_message_of_projects_like_the_host(dialect: Dialect) -> None:
    log, m = world(dialect, system=dialect is V02)
    assert log.message_of(m[0]["user"]) is log.events[m[0]["user"]]["data"]
    assert log.message_of(m[0]["answer"]) is log.events[m[0]["answer"]]["data"]["message"]
    assert log.message_of(m[0]["tool_result"]) is log.events[m[0]["tool_result"]]["data"]["message"]
    assert log.message_of(m[0]["turn_start"]) is None
    p = plan_for(log)
    empty = p.assistant("")  # usage-only assistant message
    log.extend(p.events)
    assert log.message_of(empty) is None
    if dialect is V02:
        assert log.message_of(log.nodes[0])["role"] == "system"
    with pytest.raises(IndexError):
        log.message_of(len(log))
    assert len(log.surface_messages()) == len(log.nodes) - 1


def test_rc8_system_message_projects_nothing() -> None:
    events, _ = base_log(RC8, turns=1)
    events.append({"type": "system/message", "seq": len(events), "time": 1, "data": {"message": {"content": [1]}}})
    log = SessionLog(RC8, events)
    assert log.message_of(len(events) - 1) is None
    assert log.reload_problems  # unknown to rc8


@BOTH
def test_index_of(dialect: Dialect) -> None:
    log, m = world(dialect)
    assert log.nodes[log.index_of(m[1]["answer"])] == m[1]["answer"]
    assert log.on_surface(m[0]["user"]) and not log.on_surface(m[0]["tool_call"])
    with pytest.raises(SurfaceError):
        log.index_of(m[0]["tool_call"])


# -- tool pairing ---------------------------------------------------------------------------


@BOTH
def test_tool_pairing_balance(dialect: Dialect) -> None:
    log, m = world(dialect)
    t = m[0]
    assert log.balanced_before(t["user"]) and log.balanced_after(t["user"])
    assert log.balanced_before(t["call_assistant"]) and not log.balanced_after(t["call_assistant"])
    assert not log.balanced_before(t["tool_result"]) and log.balanced_after(t["tool_result"])
    assert log.balanced_after(t["answer"])
    with pytest.raises(SurfaceError, match="not found"):
        log.balanced_before(t["tool_call"])


@BOTH
def test_tool_pairing_unmatched_result_raises_until_repaired(dialect: Dialect) -> None:
    log, m = world(dialect)
    t = m[0]
    # shadow the calling assistant but not its result: the result is now unmatched
    log.extend(user_replace(log, t["user"], t["call_assistant"]))
    with pytest.raises(SurfaceError, match="no matching tool-call"):
        log.balanced_after(m[1]["answer"])
    # swallowing the orphan result too repairs the surface
    first = log.nodes[first_content(log)]
    log.extend(user_replace(log, first, t["tool_result"]))
    first = log.nodes[first_content(log)]
    assert log.balanced_after(first) and log.balanced_after(m[1]["answer"])


@BOTH
def test_tool_pairing_multiple_calls(dialect: Dialect) -> None:
    log, _ = world(dialect, turns=0)
    p = plan_for(log)
    u = p.user()
    a = p.assistant("two", tool_calls=("x", "y"))
    r1 = p.tool_result("x")
    r2 = p.tool_result("y")
    log.extend(p.events)
    assert log.balanced_after(u) and not log.balanced_after(a) and not log.balanced_after(r1) and log.balanced_after(r2)


# -- scale ----------------------------------------------------------------------------------


def test_large_log_stays_incremental() -> None:
    b = LogBuilder(RC8)
    while len(b.events) < 100_000:
        b.turn(tool=True)
    started = time.perf_counter()
    log = SessionLog(RC8, b.events)
    fold_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(200):  # small plans against a huge log must not scale with the log
        p = plan_for(log)
        p.user()
        p.assistant("x")
        log.check_plan(p.events)
    check_s = time.perf_counter() - started
    assert fold_s < 10 and check_s < 1, (fold_s, check_s)


# -- rc8 loader: legacy turn shapes -----------------------------------------------------------


@pytest.mark.parametrize(
    "etype,data",
    [
        ("turn/end", {"turn": 3, "reason": {"kind": "completed"}, "note": "x"}),
        ("turn/end", {"turn": 0, "reason": {"kind": "completed"}}),
        ("turn/end", {"turn": 3, "reason": {"kind": "completed", "extra": 1}}),
        ("turn/end", {"turn": 3, "reason": {"kind": "error", "step": 1}}),
        ("turn/start", {"turn": 3, "trigger": {"kind": ""}}),
    ],
)
def test_rc8_rejects_turn_shapes_its_loader_refuses(etype: str, data: dict[str, Any]) -> None:
    log, _ = world(RC8)
    p = plan_for(log)
    p.add(etype, data)
    rejects(log, p.events, "turn-shape")
    log_v02, _ = world(V02)  # v02's loader has no rc8 upgrade path (only its lifecycle rules)
    p = plan_for(log_v02)
    p.add(etype, data)
    try:
        log_v02.check_plan(p.events)
    except SurfaceError as error:
        assert error.rule.startswith("lifecycle-"), str(error)


@pytest.mark.parametrize(
    "data",
    [
        {"turn": 3, "reason": {"kind": "aborted", "reason": {"kind": "user"}}},
        {"turn": 3, "reason": {"kind": "error", "error": {"message": "m", "code": "C"}}},
        {"turn": 3, "reason": {"kind": "error", "step": 1, "message": "m", "code": "C"}},
        {"turn": 3, "reason": {"kind": "something-new", "detail": 1}},
    ],
)
def test_rc8_accepts_current_and_upgradable_turn_end(data: dict[str, Any]) -> None:
    log, _ = world(RC8)
    p = plan_for(log)
    p.add("turn/end", data)
    log.check_plan(p.events)


# -- v02 system / developer nodes -----------------------------------------------------------


@pytest.mark.parametrize("etype,role,kind", [("system/message", "system", "system-prompt"),
                                             ("developer/message", "developer", "plugin:x")])
def test_v02_system_and_developer_messages_join_the_surface(etype: str, role: str, kind: str) -> None:
    log, _ = world(V02)
    open_turn(log, step=True)  # both are step events (0.2.1 lifecycle)
    p = plan_for(log)
    msg = {"id": "x1", "role": role, "source": {"kind": kind}, "content": [{"type": "text", "text": "t"}]}
    p.add(etype, {"turn": 3, "step": 1, "message": msg}, op="append")
    bad = copy.deepcopy(p.events)
    bad[0]["data"]["message"]["role"] = "user"
    # format v4 refuses these first (system-message.js; the developer role/type pairing)
    rejects(log, bad, "v4-system-message" if etype == "system/message" else "developer-role")
    accepts(log, p.events)
    assert log.nodes[-1] == p.events[0]["seq"] and log.message_of(p.events[0]["seq"]) is msg


# -- the model's view: tool calls and results stay paired -----------------------------------------


@BOTH
def test_rejects_plan_leaving_a_tool_call_without_its_result(dialect: Dialect) -> None:
    log, m = world(dialect)
    open_turn(log)
    rejects(log, user_replace(log, m[0]["tool_result"], m[0]["tool_result"]), "model-unanswered-call")
    log.check_plan(user_replace(log, m[0]["tool_result"], m[0]["tool_result"]), model=False)  # the host alone takes it


def test_rc8_rejects_plan_appending_a_result_without_its_call() -> None:
    log, _ = world(RC8)
    p = plan_for(log)
    p.tool_result("nobody-called-me")
    rejects(log, p.events, "model-orphan-result")


def test_v02_rejects_appended_result_without_an_advertised_call() -> None:
    log, _ = world(V02)
    open_turn(log, step=True)
    p = plan_for(log)
    p.tool_result("nobody-called-me")
    rejects(log, p.events, "lifecycle-tool-orphan")  # the reload rule fires first


@BOTH
def test_pairing_does_not_blame_a_plan_for_a_call_still_running(dialect: Dialect) -> None:
    log, _ = world(dialect)
    open_turn(log, step=True)
    b = plan_for(log)
    b.assistant("calling", tool_calls=("running",))
    for event in b.events:
        assert log.append(event) == []
    p = plan_for(log)
    p.user("a note")  # the call is the host's business, not this plan's
    accepts(log, p.events)


def test_v02_plan_may_not_open_a_step_out_of_order() -> None:
    log, _ = world(V02)
    open_turn(log)
    p = plan_for(log)
    p.add("step/start", {"turn": 3, "step": 0})  # the old landing step
    rejects(log, p.events, "lifecycle-step-number")


def test_v02_markers_use_the_producer_owned_kind() -> None:
    from turn_memory.host.markers import is_own_source, marker_of, marker_source

    source = marker_source(V02, "pending", 2)
    assert source == {"kind": "plugin:turn-memory", "phase": "pending", "turn": 2}
    assert marker_source(RC8, "pending", 2) == {"kind": "plugin", "plugin": "turn-memory", "phase": "pending", "turn": 2}
    # a released v3 marker lifted by format v4 reads exactly like a native one
    lifted = {"type": "user/message", "data": {"source": {"kind": "plugin:turn-memory", "phase": "compression", "turn": 4}}}
    assert marker_of(lifted) == ("compression", 4) and is_own_source(source)
    log, _ = world(V02)
    p = plan_for(log)
    p.add("user/message", user_message("x", source={"kind": "plugin", "plugin": "turn-memory"}), op="append")
    rejects(log, p.events, "retired-source")
