"""Differential test: our v02 surface model against the real DSH 0.2.1-rc.2 host code.

Every case is a stored log (`seed`, ending in session/end-seed, so the host adds no marker of
its own), what the host appends before the plan (`live`: the next turn's turn/start, maybe
the loop's step/start), the plan, and what the agent loop appends right after it (`after`).
The plans are the ones the engine makes (pending marker, the four landing modes, no-op
marker, tool-result rewrite, the checkpoint transaction of `compaction/transaction.py`) plus
hand-made ones covering every refusal class of the host. The host judges each case in one
node run (`v021_host_verdicts.mjs`):
- seed: persist the whole log with the host's JSONL writer and open it again (format v4 row
  admission, lifecycle relationships, validateStoredEvents, Session.fromRestore);
- append: session.append each planned event, then the `after` events, then persist and
  reopen everything.
Our verdicts (check_plan, the mirror `append`, the constructor) must match, refusals
included; strict cases are plans the host takes but the model's API would not (a tool call
without its result), which check_plan refuses on purpose.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from surface_builders import (
    PROVIDER,
    LogBuilder,
    assistant_message,
    base_log,
    real_v021_log,
    rewritten_tool_result,
    tool_message,
    user_message,
)
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.selection import Selection, select_manual_range
from turn_memory.host.dialects import V02
from turn_memory.host.surface import SessionLog, SurfaceError
from turn_memory.prompts import read_prompt
from turn_memory.runtime.land import Plan
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import BlockTurn, LandingContext, pending_plan, plan_block_landing, plan_landing
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turn_nodes

Event = dict[str, Any]
SCRIPT = Path(__file__).with_name("v021_host_verdicts.mjs")
MODEL = "model"
TIME = 1_796_000_000_000


def stamped(start: int, events: list[Event]) -> list[Event]:
    """Events with consecutive seqs from `start` (planned events carry no seq/time yet)."""
    return [{"type": e["type"], "seq": start + i, "time": TIME + start + i,
             **{k: v for k, v in e.items() if k not in ("type", "seq", "time")}} for i, e in enumerate(events)]


@dataclass
class World:
    seed: list[Event]
    live: list[Event] = field(default_factory=list)

    @property
    def events(self) -> list[Event]:
        return self.seed + self.live

    def log(self) -> SessionLog:
        return SessionLog(V02, self.events)

    def then(self, *live: dict[str, Any]) -> "World":
        return World(self.seed, self.live + stamped(len(self.events), list(live)))


def _closed() -> World:
    events, _ = base_log(V02, turns=2)  # system head inside turn 1, snapshots, 0.2 tool results
    b = LogBuilder(V02, len(events))
    b.end_seed()
    return World(events + b.events)


def _pending() -> World:
    """Turn 2 marked pending at its turn/end (our first plan), then a restart."""
    events, _ = base_log(V02, turns=2)
    log = SessionLog(V02, events)
    events += stamped(len(events), pending_plan(log, turn_nodes(log, 2)[0], 2).events)
    return World(events + stamped(len(events), [{"type": "session/end-seed", "data": {}}]))


def _real() -> World:
    _, events = real_v021_log()
    return World(events + stamped(len(events), [{"type": "session/end-seed", "data": {}}]))


CLOSED, PENDING, REAL = _closed(), _pending(), _real()
TURN3 = {"type": "turn/start", "data": {"turn": 3}}
STEP31 = {"type": "step/start", "data": {"turn": 3, "step": 1}}
PRESTEP, INSTEP = PENDING.then(TURN3), PENDING.then(TURN3, STEP31)


@dataclass
class Case:
    world: World
    plan: list[Event]
    #: what the agent loop appends after the plan (host events, judged with it)
    after: list[Event] = field(default_factory=list)
    #: MODEL: the host takes it, the model's API would not; check_plan refuses on purpose
    strict: str | None = None


def _case(world: World, plan: list[Event] | Plan, after: list[dict[str, Any]] = (), strict: str | None = None) -> Case:
    events = plan.events if isinstance(plan, Plan) else plan
    base = len(world.events)
    planned = stamped(base, events)
    return Case(world, planned, stamped(base + len(planned), list(after)), strict)


# -- landings the engine makes -------------------------------------------------------------


def _editor(log: SessionLog, turn: int = 2) -> tuple[TurnNodeEditor, list[int]]:
    positions = turn_nodes(log, turn)
    return TurnNodeEditor(turn, original_nodes(log, positions)), positions


def _landing(world: World, edit: Callable[[TurnNodeEditor], None], *, open_step: int | None = None,
             dialect: Any = V02, turn: int = 2, open_turn: int = 3) -> Plan:
    log = SessionLog(dialect, world.events)
    editor, positions = _editor(log, turn)
    edit(editor)
    return plan_landing(log, editor, positions, LandingContext(turn, open_turn, 1, ("fork",), open_step=open_step))


def _block(world: World, edits: dict[int, Callable[[TurnNodeEditor], None]], *, open_step: int = 1) -> Plan:
    """Turns 1 and 2 (they reach the surface tail) landed as one block inside the loop's step."""
    log = SessionLog(V02, world.events)
    block = []
    for turn, edit in edits.items():
        positions = turn_nodes(log, turn)
        editor = TurnNodeEditor(turn, original_nodes(log, positions), id_prefix=f"t{turn}.")
        edit(editor)
        block.append(BlockTurn(editor, positions, LandingContext(turn, 3, 1, ("fork",), open_step=open_step)))
    return plan_block_landing(log, block)


def _tool_id(editor: TurnNodeEditor) -> str:
    return next(n.id for n in editor.nodes if n.role == "tool")


def _fold(editor: TurnNodeEditor) -> None:
    editor.replace(editor.nodes[0].id, editor.nodes[-1].id, [Output("user", "Task 1, in short."),
                                                             Output("assistant", "Listed a.txt and b.txt.")])


def _mode2(editor: TurnNodeEditor) -> None:
    editor.replace("n1", None, [Output("user", "t1")])
    editor.replace(_tool_id(editor), None, [Output("tool", "[2]")])


def _kept(editor: TurnNodeEditor) -> None:
    """0.2's default: the assistant nodes stay; the user nodes merge and the result shrinks."""
    editor.replace("n1", "n2", [Output("user", "t1")])
    editor.replace(_tool_id(editor), None, [Output("tool", "[2]")])


def _mode3(editor: TurnNodeEditor) -> None:
    editor.replace(_tool_id(editor), None, [Output("tool", "[2]")])
    editor.replace(editor.nodes[-1].id, None, [Output("assistant", "Ok.")])


#: the planner as it was before the 0.2.1 host decided: mode 3 in a landing step of its own
V02_OWN_STEPS = dataclasses.replace(V02, lifecycle_checked=False)


def _old_mode3() -> list[Event]:
    return _landing(PRESTEP, _mode3, dialect=V02_OWN_STEPS).events


def _mode3_step1() -> list[Event]:
    """The old mode 3 with its landing step numbered 1: valid alone, broken by the loop's own step 1."""
    events = copy.deepcopy(_old_mode3())
    for e in events:
        if isinstance(e["data"], dict) and e["data"].get("step") == 0:
            e["data"]["step"] = 1
    return events


def _mode3_result_as_user() -> list[Event]:
    """The old bug: the rewritten tool result appended as a user/message after its calling assistant."""
    events = copy.deepcopy(_landing(INSTEP, _mode3, open_step=1).events)
    at = next(i for i, e in enumerate(events) if e["type"] == "tool/call")
    text = "\n".join(b["text"] for b in V02.tool_result_blocks(events[at + 1]["data"]["message"]))
    events[at:at + 2] = [{"type": "user/message", "data": user_message(text, source=V02.plugin_source("turn-memory", phase="compression", turn=2)),
                          "surfaceOp": "append", "sourceEventSeqs": [0]}]
    return events


# -- the checkpoint transaction ------------------------------------------------------------


def _checkpoint(world: World, turn: int | None, *, selection: Selection | None = None,
                dialect_source: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> list[Event]:
    """compaction/start, then summary + checkpoint + end, as compaction/manual.py lands them."""
    log = world.log()
    tx = tx_.Transaction("cmp-1", None, turn)
    selection = selection or select_manual_range(log, retain_turns=1)
    assert selection is not None
    start = stamped(len(log), tx_.start_plan(tx).events)
    after_start = SessionLog(V02, world.events + start)
    summary = tx_.Summary(blocks=[{"type": "text", "text": "it happened"}], raw_output=[{"type": "text", "text": "it happened"}],
                          provider=PROVIDER["provider"], model=PROVIDER["model"])
    message = tx_.checkpoint_message(V02, tx, summary, read_prompt("checkpoint"))
    if dialect_source is not None:
        message["source"] = dialect_source(message["source"])
    shadowed = tx_.shadowed_tokens(after_start, selection)
    commit = tx_.commit_plan(after_start, tx, start[0]["seq"], selection, summary, message, shadowed)
    return start + stamped(len(after_start), commit.events)


# -- hand-made plans -------------------------------------------------------------------------


def _p(world: World) -> LogBuilder:
    b = LogBuilder(V02, len(world.events))
    b.turn_no, b.step_no = (3, 1) if world is INSTEP else (3, 0)
    return b


def _seq_of(world: World, pred: Callable[[Event], bool]) -> int:
    return next(e["seq"] for e in world.events if pred(e))


def _turn2(world: World) -> list[int]:
    return turn_nodes(world.log(), 2)


def _tool_result_seq(world: World) -> int:
    return next(s for s in _turn2(world) if world.events[s]["type"] == "tool/result")


def _tool_rewrite(world: World, mutate: Callable[[Event], None] | None = None) -> list[Event]:
    ev = rewritten_tool_result(world.events[_tool_result_seq(world)], len(world.events), V02)
    if mutate:
        mutate(ev)
    return [ev]


def _paired_tool_step(world: World, mutate: Callable[[LogBuilder], None] | None = None, *, call: bool = True) -> list[Event]:
    p = _p(world)
    p.assistant("look", tool_calls=("cx",))
    seq = p.tool_call("cx") if call else None
    p.tool_result("cx", "out", call_seq=seq)
    if mutate:
        mutate(p)
    return p.events


def _user_replace(world: World, first: int, last: int, message: dict[str, Any] | None = None) -> list[Event]:
    nodes = world.log().nodes
    span = nodes[nodes.index(first):nodes.index(last) + 1]
    return [{"type": "user/message", "data": message or user_message("s"), "surfaceOp": V02.replace_op(first, last),
             "sourceEventSeqs": span}]


def _head(world: World) -> int:
    return world.log().nodes[0]


def _with(event: Event, path: str, value: Any) -> Event:
    out = copy.deepcopy(event)
    target = out
    *parents, leaf = path.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value == "-":
        del target[leaf]
    else:
        target[leaf] = value
    return out


def _one(world: World, etype: str, data: Any, **surface: Any) -> list[Event]:
    return [{"type": etype, "data": data, **surface}]


def _sys_message(turn: int, step: int, kind: str = "system-prompt") -> dict[str, Any]:
    return {"turn": turn, "step": step, "message": {"id": "sys-new", "role": "system", "source": {"kind": kind},
                                                    "content": [{"type": "text", "text": "new prompt"}]}}


def _cases() -> dict[str, Case]:
    u2 = _turn2(PENDING)[0]
    head = _head(CLOSED)
    real_log = REAL.log()
    return {
        # -- plans the engine makes --------------------------------------------------------
        "ok-pending-marker": _case(CLOSED, pending_plan(CLOSED.log(), _turn2(CLOSED)[0], 2)),
        "ok-noop-marker": _case(PRESTEP, _landing(PRESTEP, lambda e: None)),
        "ok-mode1-noop-between-turns": _case(PENDING, _landing(PENDING, lambda e: None)),
        "ok-mode2-in-place": _case(PRESTEP, _landing(PRESTEP, _mode2)),
        "ok-assistants-kept-users-merged-in-place": _case(PRESTEP, _landing(PRESTEP, _kept)),
        "ok-assistants-kept-in-place-in-the-loops-step": _case(INSTEP, _landing(INSTEP, _kept, open_step=1), after=[
            {"type": "user/message", "data": user_message("third task"), "surfaceOp": "append"},
            {"type": "step/end", "data": {"turn": 3, "step": 1}}]),
        "ok-tool-result-rewrite": _case(PRESTEP, _landing(PRESTEP, lambda e: e.replace(_tool_id(e), None, [Output("tool", "[2]")]))),
        "ok-mode3-in-the-loops-step": _case(INSTEP, _landing(INSTEP, _mode3, open_step=1),
                                            after=[{"type": "step/end", "data": {"turn": 3, "step": 1}}]),
        "ok-mode3-in-prestep-degrades-to-mode4": _case(PRESTEP, _landing(PRESTEP, _mode3)),
        "ok-block-of-two-turns-in-the-loops-step": _case(INSTEP, _block(INSTEP, {1: _fold, 2: _fold}),
                                                         after=[{"type": "step/end", "data": {"turn": 3, "step": 1}}]),
        "ok-block-keeping-a-tool-call-in-the-loops-step": _case(INSTEP, _block(INSTEP, {1: _mode3, 2: _mode3}),
                                                                after=[{"type": "step/end", "data": {"turn": 3, "step": 1}}]),
        "ok-block-then-the-loops-own-input": _case(INSTEP, _block(INSTEP, {1: _fold, 2: _mode3}), after=[
            {"type": "user/message", "data": user_message("third task"), "surfaceOp": "append"},
            {"type": "step/end", "data": {"turn": 3, "step": 1}}]),
        "ok-mode4-checkpoint": _case(PRESTEP, _landing(PRESTEP, _fold)),
        "ok-checkpoint-transaction-manual": _case(CLOSED, _checkpoint(CLOSED, None)),
        "ok-checkpoint-transaction-automatic": _case(PRESTEP, _checkpoint(PRESTEP, 3)),
        "ok-real-log-pending-marker": _case(REAL, pending_plan(real_log, turn_nodes(real_log, 1)[0], 1)),
        "ok-real-log-turn1-compressed": _case(REAL.then(TURN3 | {"data": {"turn": 2}}),
                                              _landing(REAL.then(TURN3 | {"data": {"turn": 2}}), _fold, turn=1, open_turn=2)),
        "ok-real-log-checkpoint": _case(REAL, _checkpoint(REAL, None, selection=Selection(turn_nodes(real_log, 1)))),
        # -- the old planner's plans the host refuses ----------------------------------------
        "bad-old-mode3-own-landing-step": _case(PRESTEP, _old_mode3()),
        "bad-old-mode3-step1-then-the-loops-step1": _case(PRESTEP, _mode3_step1(), after=[STEP31]),
        "bad-old-mode3-result-as-user-unanswered-call": _case(INSTEP, _mode3_result_as_user(),
                                                              after=[{"type": "step/end", "data": {"turn": 3, "step": 1}}]),
        "ok-old-mode3-result-as-user-mid-step": _case(INSTEP, _mode3_result_as_user(), strict=MODEL),
        "bad-old-marker-source-kind-plugin": _case(CLOSED, [_with(pending_plan(CLOSED.log(), _turn2(CLOSED)[0], 2).events[0],
                                                                  "data.source", {"kind": "plugin", "plugin": "turn-memory", "phase": "pending", "turn": 2})]),
        "bad-rc8-checkpoint-source": _case(CLOSED, _checkpoint(CLOSED, None, dialect_source=lambda s: {"kind": "plugin", "plugin": "compact", "compactionId": "cmp-1"})),
        "bad-tool-rewrite-outside-a-turn": _case(PENDING, _tool_rewrite(PENDING)),
        # -- checkpoints -------------------------------------------------------------------
        "bad-manual-checkpoint-inside-a-turn": _case(PRESTEP, _checkpoint(PRESTEP, None)),
        "bad-checkpoint-without-compaction": _case(CLOSED, _user_replace(CLOSED, _turn2(CLOSED)[0], _turn2(CLOSED)[-1],
                                                                         user_message("summary", source=V02.checkpoint_source("cmp-x")))),
        "bad-checkpoint-over-system-head": _case(CLOSED, _checkpoint(CLOSED, None, selection=Selection(CLOSED.log().nodes[:3]))),
        # -- append-time refusals (session.append throws) ------------------------------------
        "bad-rc8-replace-keys": _case(PENDING, [_with(_user_replace(PENDING, u2, u2)[0], "surfaceOp", {"op": "replace", "start": u2, "end": u2})]),
        "bad-replace-coverage": _case(PENDING, [_with(_user_replace(PENDING, u2, _turn2(PENDING)[-1])[0], "sourceEventSeqs", [u2])]),
        "bad-empty-sources": _case(PENDING, [_with(_user_replace(PENDING, u2, u2)[0], "sourceEventSeqs", [])]),
        "bad-endpoint-not-earlier": _case(PENDING, [_with(_user_replace(PENDING, u2, u2)[0], "surfaceOp", V02.replace_op(u2, len(PENDING.events)))]),
        "bad-assistant-with-sources": _case(INSTEP, [_with(_paired_tool_step(INSTEP)[0], "sourceEventSeqs", [1])]),
        "bad-assistant-replaces": _case(INSTEP, [_with(_paired_tool_step(INSTEP)[0], "surfaceOp", V02.replace_op(u2, u2))]),
        "bad-user-replaces-system-head": _case(CLOSED, _user_replace(CLOSED, head, head)),
        "bad-tool-rewrite-changes-is-error": _case(PRESTEP, _tool_rewrite(PRESTEP, lambda e: e["data"]["message"].update(isError=True))),
        "bad-tool-rewrite-changes-message-id": _case(PRESTEP, _tool_rewrite(PRESTEP, lambda e: e["data"]["message"].update(id="other"))),
        "bad-tool-rewrite-two-nodes": _case(PRESTEP, _tool_rewrite(PRESTEP, lambda e: e.update(
            surfaceOp=V02.replace_op(_tool_result_seq(PRESTEP), _turn2(PRESTEP)[-1]),
            sourceEventSeqs=[_tool_result_seq(PRESTEP), _turn2(PRESTEP)[-1]]))),
        "bad-tool-error-without-is-error": _case(INSTEP, _paired_tool_step(INSTEP, lambda p: p.events[-1]["data"].update(
            error={"name": "Boom", "code": "X"}))),
        "bad-developer-role-in-user-message": _case(PRESTEP, _one(PRESTEP, "user/message", user_message("x") | {"role": "developer"}, surfaceOp="append")),
        "bad-surface-op-on-turn-start": _case(PENDING, _one(PENDING, "turn/start", {"turn": 3}, surfaceOp="append")),
        # -- write-time refusals (format v4 row admission at the next flush) -----------------
        "bad-rc8-tool-result-wrapper": _case(INSTEP, _paired_tool_step(INSTEP, lambda p: p.events[-1]["data"].update(
            message=tool_message(dataclasses.replace(V02, first_class_tool_results=False, tool_result_role="tool"), "cx", "out")))),
        "bad-tool-result-wrapper-in-user-content": _case(PRESTEP, _one(PRESTEP, "user/message", user_message("x") | {
            "content": [{"type": "tool-result", "toolCallId": "c", "content": [], "isError": False}]}, surfaceOp="append")),
        "bad-tool-call-id-mismatch": _case(INSTEP, _paired_tool_step(INSTEP, lambda p: p.events[-1]["data"]["message"].update(toolCallId="other"))),
        "bad-system-message-turn-zero": _case(INSTEP, _one(INSTEP, "system/message", _sys_message(0, 0), surfaceOp=V02.replace_op(head, head), sourceEventSeqs=[head])),
        # -- reload-time refusals ----------------------------------------------------------
        "bad-system-source-kind": _case(INSTEP, _one(INSTEP, "system/message", _sys_message(3, 1, kind="plugin:x"), surfaceOp=V02.replace_op(head, head), sourceEventSeqs=[head])),
        "bad-assistant-outside-a-step": _case(PRESTEP, _paired_tool_step(PRESTEP)[:1]),
        "bad-assistant-without-stream": _case(INSTEP, [_with(_paired_tool_step(INSTEP)[0], "data.stream", "-")]),
        "bad-tool-result-without-tool-call": _case(INSTEP, _paired_tool_step(INSTEP, call=False)),
        "bad-tool-call-not-advertised": _case(INSTEP, _paired_tool_step(INSTEP, lambda p: p.events[1]["data"].update(arguments="{}"))),
        "bad-step-ends-with-unanswered-call": _case(INSTEP, _paired_tool_step(INSTEP)[:1], after=[{"type": "step/end", "data": {"turn": 3, "step": 1}}]),
        "bad-unknown-event-type": _case(PENDING, _one(PENDING, "turn-memory/ledger", {"x": 1})),
        "bad-rc8-only-event-type": _case(PENDING, _one(PENDING, "assistant/chunk", {"turn": 2, "step": 1})),
        "bad-request-header-without-reason": _case(INSTEP, _one(INSTEP, "request/header", {"header": {"config": dict(PROVIDER)}})),
        "bad-compaction-start-wrong-turn": _case(PRESTEP, _one(PRESTEP, "compaction/start", {"compactionId": "c", "turn": 2})),
        # -- valid hand-made plans ---------------------------------------------------------
        "ok-user-append": _case(PRESTEP, _one(PRESTEP, "user/message", user_message("more"), surfaceOp="append")),
        "ok-paired-tool-step": _case(INSTEP, _paired_tool_step(INSTEP)),
        "ok-assistant-append-empty-stream": _case(INSTEP, _one(INSTEP, "assistant/message", V02.assistant_data(3, 1, assistant_message("hi")), surfaceOp="append")),
        "ok-system-replaces-exactly-the-head": _case(INSTEP, _one(INSTEP, "system/message", _sys_message(3, 1), surfaceOp=V02.replace_op(head, head), sourceEventSeqs=[head])),
        "ok-user-replaces-tool-result": _case(PRESTEP, _user_replace(PRESTEP, _tool_result_seq(PRESTEP), _tool_result_seq(PRESTEP)), strict=MODEL),
        "ok-ignorable-unknown-dropped-by-append": _case(PENDING, _one(PENDING, "todo/write", {"todos": []}, ignorable=True), strict="shim"),
    }


CASES = _cases()


def _run(node: str, modules: Path, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    run = subprocess.run([node, str(SCRIPT), str(modules)], input=json.dumps(batch), capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def host_verdicts(node: str, dsh_v021_modules: Path) -> dict[str, dict[str, Any]]:
    names = list(CASES)
    batch: list[dict[str, Any]] = []
    for name in names:
        c = CASES[name]
        batch.append({"mode": "seed", "seed": c.world.events + c.plan + c.after})
        batch.append({"mode": "append", "seed": c.world.seed, "live": c.world.live, "plan": c.plan, "after": c.after})
    results = _run(node, dsh_v021_modules, batch)
    return {name: {"seed": results[2 * i], "append": results[2 * i + 1]} for i, name in enumerate(names)}


def _verdict(fn: Callable[[], Any]) -> tuple[bool, str]:
    try:
        fn()
    except SurfaceError as error:
        return False, str(error)
    return True, ""


def test_known_event_types_are_the_hosts(node: str, dsh_v021_modules: Path) -> None:
    (constants,) = _run(node, dsh_v021_modules, [{"mode": "constants"}])
    assert sorted(V02.known_event_types) == constants["knownEventTypes"]


@pytest.mark.parametrize("world", ["CLOSED", "PENDING", "REAL", "PRESTEP", "INSTEP"])
def test_base_logs_are_valid_for_the_model(world: str) -> None:
    assert SessionLog(V02, globals()[world].events).reload_problems == []  # the host: every ok- seed case


def test_builders_write_what_the_real_host_writes() -> None:
    """Key sets of the builder's v02 events equal those of the recorded 0.2.1 log's."""
    _, real = real_v021_log()

    def keys(events: list[Event], pick: Callable[[Event], bool]) -> dict[str, Any]:
        e = next(e for e in events if pick(e))
        data = e["data"]
        message = data if e["type"] == "user/message" else data.get("message", {})
        return {"envelope": sorted(e), "data": sorted(data), "message": sorted(message),
                "source": sorted((message.get("source") or {}))}

    picks: dict[str, Callable[[Event], bool]] = {
        "system": lambda e: e["type"] == "system/message",
        "user": lambda e: e["type"] == "user/message" and e["data"]["source"]["kind"] == "user",
        "snapshot": lambda e: e["type"] == "user/message" and e["data"]["source"]["kind"] == "runtime-context",
        "call": lambda e: e["type"] == "tool/call",
        "result": lambda e: e["type"] == "tool/result",
        "header": lambda e: e["type"] == "request/header",
    }
    ours = CLOSED.events
    for name, pick in picks.items():
        assert keys(ours, pick) == keys(real, pick), name
    mine = keys(ours, lambda e: e["type"] == "assistant/message")
    theirs = keys(real, lambda e: e["type"] == "assistant/message")
    assert mine["data"] == theirs["data"] and mine["message"] == theirs["message"]
    assert set(mine["source"]) <= set(theirs["source"])  # the real one adds provider replay state


def test_every_host_refusal_stage_is_covered(host_verdicts: Any) -> None:
    stages = {h["append"].get("stage", "append") for h in host_verdicts.values()
              if not (h["append"].get("appendOk") and h["append"].get("reloadOk"))}
    assert {"append", "write", "scan", "validate", "restore"} <= stages, stages


@pytest.mark.parametrize("name", list(CASES))
def test_seed_verdict_matches_host(name: str, host_verdicts: Any) -> None:
    c = CASES[name]
    host = host_verdicts[name]["seed"]
    events = c.world.events + c.plan + c.after

    def mirror() -> None:
        log = SessionLog(V02, events)
        if log.reload_problems:
            raise SurfaceError("reload", "; ".join(log.reload_problems))

    ours, why = _verdict(mirror)
    assert ours == host["ok"], f"mirror: ours={ours} ({why}) host={host}"
    if c.strict == "shim":
        return  # a stored log may carry the marker; a plan never can (check_plan refuses it)
    ours, why = _verdict(lambda: SessionLog(V02).check_plan(events))
    if c.strict == MODEL:
        assert not ours and host["ok"] and "[rule: model-" in why, f"model-strict: ours={ours} ({why}) host={host}"
    else:
        assert ours == host["ok"], f"check_plan: ours={ours} ({why}) host={host}"


@pytest.mark.parametrize("name", list(CASES))
def test_append_verdict_matches_host(name: str, host_verdicts: Any) -> None:
    c = CASES[name]
    host = host_verdicts[name]["append"]
    assert "setupError" not in host, host
    # mirror what the host committed; the event it refused must be refused by us too
    mirror = SessionLog(V02, c.world.events)
    problems: list[str] = []
    for event in host["committed"]:
        problems += mirror.append(event)
    if not host["appendOk"]:
        with pytest.raises(SurfaceError):
            mirror.append(c.plan[host["failedAt"]])
    else:
        for event in c.after:
            problems += mirror.append(event)
        assert (problems == []) == host["reloadOk"], f"mirror reload problems {problems} vs host {host}"
        assert mirror.nodes == host.get("nodes", mirror.nodes)
    host_ok = host["appendOk"] and host["reloadOk"]
    ours, why = _verdict(lambda: SessionLog(V02, c.world.events).check_plan(c.plan + c.after))
    if c.strict is not None:
        assert not ours and host_ok, f"strict ({c.strict}) case: ours={ours} ({why}) host={host}"
        if c.strict == MODEL:
            assert "[rule: model-" in why, why
    else:
        assert ours == host_ok, f"check_plan: ours={ours} ({why}) host={host}"
    assert name.startswith("ok-") == host_ok, f"case label disagrees with the host: {host}"
