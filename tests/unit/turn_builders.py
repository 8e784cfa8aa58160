"""Realistic completed turns for editor/landing tests: steers, tool calls, reasoning, snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field

from surface_builders import LogBuilder, new_id
from turn_memory.host.dialect import Dialect
from turn_memory.host.surface import SessionLog
from turn_memory.host.turn_index import node_origins
from turn_memory.runtime.land import stamp
from turn_memory.turns.landing import pending_plan


@dataclass
class Shape:
    """steps: per step, (tool calls, with reasoning, steer before it)."""

    steps: list[tuple[int, bool, bool]] = field(default_factory=lambda: [(1, True, False), (0, False, False)])
    snapshot: bool = True
    #: the snapshot precedes the person's words (rc8 after a pause between tool turns)
    snapshot_first: bool = False


def add_turn(b: LogBuilder, shape: Shape, text: str = "please fix the parser") -> None:
    b.turn_no += 1
    turn = b.turn_no
    b.add("turn/start", {"turn": turn})
    for step_no, (calls, reasoning, steer) in enumerate(shape.steps, start=1):
        b.step_no = step_no
        b.add("step/start", {"turn": turn, "step": step_no})
        if step_no == 1:
            if shape.snapshot and shape.snapshot_first:
                b.snapshot()
            b.user(text + " " + "with care " * 10)
            if shape.snapshot and not shape.snapshot_first:
                b.snapshot()
        elif steer:
            b.user("actually, also check the lexer")
        ids = tuple(new_id("call") for _ in range(calls))
        b.assistant(f"step {step_no} answer " + "detail " * 15, tool_calls=ids)
        if reasoning:
            b.events[-1]["data"]["message"]["content"].insert(0, {"type": "reasoning", "text": "think " * 30})
        for call in ids:
            b.tool_result(call, "output " * 40, call_seq=b.tool_call(call))
        b.add("step/end", {"turn": turn, "step": step_no})
    b.add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def completed_turn_log(dialect: Dialect, shape: Shape, *, prior_turns: int = 1, pending: bool = True,
                       next_turn_open: bool = True) -> tuple[SessionLog, list[int]]:
    """A log whose last completed turn is the target; returns (log, its surface positions)."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    if dialect.protects_system_head:
        b.system()  # 0.2.1: node 0, inside turn 1's first step
    for _ in range(prior_turns):
        add_turn(b, Shape(steps=[(0, False, False)], snapshot=False), "earlier task")
    add_turn(b, shape)
    log = SessionLog(dialect, b.events)
    target = b.turn_no
    origins = node_origins(log.events, dialect)
    positions = [s for s in log.nodes if origins.get(s) == ("turn", target)]
    if pending:
        plan = pending_plan(log, positions[0], target)
        for event in stamp(log, plan.events):
            log.append(event)
        positions[0] = len(log) - 1
    if next_turn_open:
        log.append({"type": "turn/start", "seq": len(log), "time": 1, "data": {"turn": target + 1}})
    return log, positions

