"""select_pressure_range and Pressure: what automatic compaction folds, and what it keeps."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from session_builders import SessionBuilder, work_session
from surface_builders import compaction_plan, new_id
from turn_memory.compaction.policy import Pressure, select_pressure_range, surface_prices
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog

DIALECTS = [pytest.param(RC8, id="rc8"), pytest.param(V02, id="v02")]


def add_checkpoint(b: SessionBuilder, through: int) -> int:
    """Fold every content node up to the answer of turn `through` into one checkpoint; its seq."""
    log = SessionLog(b.dialect, b.events)
    nodes = [s for s in log.nodes if b.events[s]["type"] != "system/message"]
    last = max(s for s in nodes if b.turn_of.get(s) == through)
    shadowed = nodes[:nodes.index(last) + 1]
    plan = compaction_plan(b.dialect, b.next_seq, shadowed, cid=new_id("cmp"))
    b.events += plan
    return plan[2]["seq"]


def tokens(log: SessionLog, seqs) -> int:
    prices = surface_prices(log)
    return sum(prices.get(s, 0) for s in seqs)


def after(log: SessionLog, seq: int) -> list[int]:
    return log.nodes[log.nodes.index(seq) + 1:]


def test_pressure_is_over_from_the_threshold_on():
    assert Pressure(800, 1000, 0.8).threshold == 800
    assert Pressure(800, 1000, 0.8).over and not Pressure(799, 1000, 0.8).over
    assert Pressure(0, 1000, 0.5).threshold == 500 and not Pressure(0, 1000, 0.5).over


@pytest.mark.parametrize("dialect", DIALECTS)
def test_retain_zero_keeps_only_the_open_turn(dialect):
    b = work_session(dialect, 4, system=dialect is V02, open_turn=True)
    log = SessionLog(dialect, b.events)
    sel = select_pressure_range(log, surface_prices(log), 0)
    assert sel is not None
    content = [s for s in log.nodes if b.events[s]["type"] != "system/message"]
    assert sel.shadowed == [s for s in content if b.turn_of[s] != 5]
    assert {b.turn_of[s] for s in after(log, sel.end)} == {5}  # the open turn, nothing else
    assert log.nodes[0] not in sel.shadowed or dialect is RC8  # never the protected system head


def test_the_tail_keeps_at_least_the_requested_tokens_on_turn_boundaries():
    b = work_session(RC8, 8, open_turn=True)
    log = SessionLog(RC8, b.events)
    prices = surface_prices(log)
    per_turn = {t: sum(p for s, p in prices.items() if b.turn_of[s] == t) for t in range(1, 10)}
    # retain a bit more than the open turn and the last two closed turns: the third-last is kept too
    want = per_turn[9] + per_turn[8] + per_turn[7] + 1
    sel = select_pressure_range(log, prices, want)
    assert sel is not None
    kept = after(log, sel.end)
    assert {b.turn_of[s] for s in kept} == {6, 7, 8, 9}
    assert tokens(log, kept) >= want and sel.shadowed[0] == log.nodes[0]
    assert b.turn_of[sel.end] == 5 and log.message_of(sel.end)["role"] == "assistant"
    # exactly enough is enough
    exact = select_pressure_range(log, prices, per_turn[9] + per_turn[8] + per_turn[7])
    assert exact is not None and b.turn_of[exact.end] == 6


def test_the_meter_prices_decide_not_the_engine_estimate():
    b = work_session(RC8, 4, open_turn=True)
    log = SessionLog(RC8, b.events)
    prices = {s: 10 for s in log.nodes}
    prices[b.events[-1]["seq"]] = 0  # the open turn's request costs nothing in this meter
    last_answer = max(s for s in log.nodes if b.turn_of[s] == 4)
    prices[last_answer] = 10_000  # the meter says turn 4 alone fills the tail
    sel = select_pressure_range(log, prices, 5_000)
    assert sel is not None and {b.turn_of[s] for s in sel.shadowed} == {1, 2, 3}


def test_nothing_outside_the_tail_or_only_the_open_turn_means_no_range():
    b = work_session(RC8, 3, open_turn=True)
    log = SessionLog(RC8, b.events)
    prices = surface_prices(log)
    assert select_pressure_range(log, prices, sum(prices.values())) is None
    # the last turn alone is too little, the last two are enough: only turn 1 is folded
    t2_t3 = tokens(log, [s for s in log.nodes if b.turn_of[s] in (2, 3, 4)])
    sel = select_pressure_range(log, prices, t2_t3)
    assert sel is not None and {b.turn_of[s] for s in sel.shadowed} == {1}
    assert select_pressure_range(log, prices, t2_t3 + 1) is None
    only_open = SessionBuilder(RC8)
    only_open.preamble()
    only_open.open_turn()
    assert select_pressure_range(SessionLog(RC8, only_open.events), {}, 0) is None


def test_a_lone_checkpoint_is_never_folded_into_itself():
    b = work_session(RC8, 3)
    checkpoint = add_checkpoint(b, through=3)
    b.open_turn()
    log = SessionLog(RC8, b.events)
    assert log.nodes[0] == checkpoint
    assert select_pressure_range(log, surface_prices(log), 0) is None
    # with a completed turn after it, checkpoint and turn fold together
    b2 = work_session(RC8, 3)
    checkpoint = add_checkpoint(b2, through=2)
    b2.open_turn()
    log2 = SessionLog(RC8, b2.events)
    sel = select_pressure_range(log2, surface_prices(log2), 0)
    assert sel is not None and sel.shadowed[0] == checkpoint
    assert {b2.turn_of.get(s) for s in sel.shadowed[1:]} == {3}


def test_between_turns_everything_closed_may_be_folded():
    b = work_session(RC8, 3)
    log = SessionLog(RC8, b.events)
    sel = select_pressure_range(log, surface_prices(log), 0)
    assert sel is not None and sel.shadowed == log.nodes


def test_a_turn_left_with_an_unanswered_tool_call_bounds_the_range():
    b = work_session(RC8, 2)
    b.turn_no += 1
    b.add("turn/start", {"turn": 3})
    b.step_no = 1
    b.add("step/start", {"turn": 3, "step": 1})
    b.user("run the slow benchmark")
    b.assistant("Starting it.", tool_calls=(new_id("call"),))  # interrupted before its result
    b.add("step/end", {"turn": 3, "step": 1})
    b.add("turn/end", {"turn": 3, "reason": {"kind": "interrupted"}})
    for _ in range(2):
        b.work_turn()
    b.open_turn()
    log = SessionLog(RC8, b.events)
    sel = select_pressure_range(log, surface_prices(log), 0)
    assert sel is not None
    assert {b.turn_of[s] for s in sel.shadowed} == {1, 2}  # no cut after the unanswered call is balanced
    assert log.balanced_before(sel.start) and log.balanced_after(sel.end)


# -- random layouts ------------------------------------------------------------------------

layouts = st.fixed_dictionaries({
    "dialect": st.sampled_from([RC8, V02]),
    "system": st.booleans(),
    "turns": st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12)), max_size=7),
    "checkpoint_after": st.integers(0, 7),
    "open": st.sampled_from(["none", "request", "working"]),
    "retain_share": st.floats(0, 1.2),
    "seed": st.integers(0, 1000),
})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts)
def test_random_layouts_fold_the_largest_prefix_that_keeps_the_tail(spec):
    dialect = spec["dialect"]
    b = SessionBuilder(dialect, spec["seed"])
    b.preamble(system=spec["system"] and dialect is V02)
    checkpoint = None
    for k, (calls, lines) in enumerate(spec["turns"], start=1):
        b.work_turn(calls=calls, log_lines=lines)
        if k == spec["checkpoint_after"]:
            checkpoint = add_checkpoint(b, through=k)
    if spec["open"] == "request":
        b.open_turn()
    elif spec["open"] == "working":
        b.work_turn(calls=2, log_lines=5, close=False)
    log = SessionLog(dialect, b.events)
    prices = surface_prices(log)
    open_turn = b.turn_no if spec["open"] != "none" else None

    content = [s for s in log.nodes if b.events[s]["type"] != "system/message"]
    key = {s: ("checkpoint", s) if s == checkpoint else ("turn", b.turn_of[s]) for s in content}
    units: list[list[int]] = []
    for s in content:
        if units and key[units[-1][0]] == key[s]:
            units[-1].append(s)
        else:
            units.append([s])
    closed = [u for u in units if key[u[0]] != ("turn", open_turn)]
    open_tokens = tokens(log, [s for u in units if key[u[0]] == ("turn", open_turn) for s in u])
    retain = int(spec["retain_share"] * sum(prices.values()))

    sel = select_pressure_range(log, prices, retain)

    # the model: fold closed units [0:c) for the largest c whose retained rest is >= retain
    best = max((c for c in range(1, len(closed) + 1)
                if open_tokens + tokens(log, [s for u in closed[c:] for s in u]) >= retain), default=0)
    event(f"checkpoint: {checkpoint is not None}; folded units: {min(best, 3)}")
    if best == 0 or (best == 1 and key[closed[0][0]][0] == "checkpoint"):
        assert sel is None
        return
    assert sel is not None and sel.shadowed == [s for u in closed[:best] for s in u]
    # what a user notices: prefix of the content, whole units, the open turn untouched, the tail kept
    assert sel.shadowed == content[:len(sel.shadowed)]
    rest = content[len(sel.shadowed):]
    assert not rest or key[rest[0]] != key[sel.end]
    assert all(key[s] != ("turn", open_turn) for s in sel.shadowed)
    assert tokens(log, rest) >= retain
    assert log.balanced_before(sel.start) and log.balanced_after(sel.end)
