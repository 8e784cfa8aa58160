"""Turn a validated working surface into one append plan
(docs/decisions.md#a-finished-turn-is-rewritten-into-fewer-nodes).

Pure. The plan is host-shaped through the dialect and is validated by the surface model
before it is sent. Landing happens in a pre-step of a later turn (the first one after the
compression is ready): that turn is open and its next step has not started; the compressed
turn need not be the surface tail any more.

- 0.1.0-rc.8 (assistant/message may replace): the pure N→M replacement in place — one
  replacement per changed node over its landing slice, citing its semantic sources and
  its slice; unchanged nodes keep their original events.
- 0.2.x (assistant/message may only be appended): the four modes
  (docs/decisions.md#where-assistants-can-only-be-appended-a-turn-lands-in-one-of-four-ways), with one
  correction from the real 0.2.1 host: mode 3 appends assistant and tool-result nodes,
  which reload only inside a step the agent loop opened (see `Dialect.plugin_steps`); in
  the next turn's pre-step no such step exists, so there mode 3 degrades to mode 4.
  Several ready turns that together reach the surface tail land as one block
  (`plan_block_landing`): mode 3 over the whole block, every turn keeping its shape.

Assistant events a landing writes sit inside a step: the loop's open step when the landing
runs in one (`LandingContext.open_step`), else (rc8 only) a short landing step (`step/start`
… `step/end` of the open turn, numbered 0 — the loop numbers its steps from 1): DSH's token
meter prices every assistant/message as the output of an open step and throws, for the
rest of the session, on one that is not. Tool results are appended right after their
calling assistant, each behind a replayed `tool/call`, so the model never sees a call
without its result (and v02's reload finds every result started).

The turn's first user node always ends up carrying the `compression` marker (a no-op
exact-content copy when the worker left it unchanged), so a landed turn is recognisable
after reload.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from typing import Any

from turn_memory.host.dialect import Dialect, is_runtime_context
from turn_memory.host.markers import COMPRESSED_TURN, CONTINUATION_KEY, Phase, marker_source
from turn_memory.host.surface import SessionLog, SurfaceError
from turn_memory.host.turn_index import LANDING_STEP
from turn_memory.runtime.land import Plan, PlanKind
from turn_memory.turns.editor import TurnNodeEditor, WorkingNode
from turn_memory.turns.nodes import OriginalNode


@dataclass(frozen=True)
class LandingContext:
    turn: int
    #: the turn open while landing (the landing step belongs to it), or None between turns
    open_turn: int | None
    workers: int
    #: how each worker started, in order ("fork", "spawn", …): landing provenance
    modes: tuple[str, ...] = ()
    #: the step of `open_turn` the agent loop has open while landing (e.g. its first step's
    #: request hook, before the step's own input is appended), or None in a pre-step. Appended
    #: assistant/tool nodes then belong to that step. Recovery (host.turn_index) does
    #: not yet attribute such appends to the landed turn: the engine lands in pre-steps only.
    open_step: int | None = None
    #: events appended before this plan (a turn/step opening planned ahead of the landing)
    ahead: int = 0
    #: the workers left the assistant nodes as they were: the marker says so (recovery and
    #: inspect then take their raw reasoning as by design, not as a stale landing)
    kept_assistants: bool = False


class LandingImpossible(Exception):
    """This dialect/moment cannot land this surface (nothing is appended). `transient`: a
    later landing point may (the turn or step it was asked to land in is no longer open)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def _uuid() -> str:
    return str(uuid.uuid4())


def _user_message(text: str, source: dict[str, Any]) -> dict[str, Any]:
    return {"id": _uuid(), "role": "user", "content": [{"type": "text", "text": text}], "source": source}


def _model_source(originals: list[OriginalNode]) -> dict[str, Any] | None:
    """The provider/model of the turn's last model output (never its replay state)."""
    for original in reversed(originals):
        if original.role == "assistant":
            source = original.message.get("source") or {}
            if source.get("kind") == "model" and source.get("provider") and source.get("model"):
                return {"kind": "model", "provider": source["provider"], "model": source["model"]}
    return None


def _cites(node: WorkingNode, positions: list[int]) -> list[int]:
    """Semantic sources plus every position the node shadows (the host requires the latter)."""
    return sorted({*node.sources, *positions[node.slice[0]:node.slice[1] + 1]})


def _marker(dialect: Dialect, ctx: LandingContext, phase: Phase = "compression") -> dict[str, Any]:
    return marker_source(dialect, phase, ctx.turn, workers=ctx.workers,
                         **({"workerModes": list(ctx.modes)} if ctx.modes else {}),
                         **({"keptAssistants": True} if ctx.kept_assistants else {}))


def pending_plan(log: SessionLog, first_seq: int, turn: int) -> Plan:
    """turn/end: mark the turn pending with an exact-content copy of its first user node."""
    event = log.events[first_seq]
    message = copy.deepcopy(event["data"])
    # a marker copy of an automatic continuation stays host context, not human words
    carried = {k: v for k, v in (message.get("source") or {}).items() if k == CONTINUATION_KEY}
    message.update(id=_uuid(), source=marker_source(log.dialect, "pending", turn, **carried))
    sources = sorted({*event.get("sourceEventSeqs", ()), first_seq})
    return Plan([{"type": "user/message", "data": message, "surfaceOp": log.dialect.replace_op(first_seq, first_seq),
                  "sourceEventSeqs": sources}], spans=[[first_seq]], label=f"turn {turn} pending marker",
                kind=PlanKind.TURN_MARKER)


def noop_plan(log: SessionLog, first_seq: int, ctx: LandingContext) -> Plan:
    """Nothing to rewrite: re-mark the first user node as landed (content unchanged)."""
    plan = pending_plan(log, first_seq, ctx.turn)
    plan.events[0]["data"]["source"] = _marker(log.dialect, ctx)
    plan.label = f"turn {ctx.turn} no-op landing"
    return plan


def _step_of(dialect: Dialect, ctx: LandingContext) -> tuple[int, int] | None:
    """(turn, step) appended assistant/tool nodes belong to, or None when they cannot land now."""
    if ctx.open_turn is None:
        return None
    if ctx.open_step is not None:
        return ctx.open_turn, ctx.open_step
    return (ctx.open_turn, LANDING_STEP) if dialect.plugin_steps else None


def _landing_step(dialect: Dialect, ctx: LandingContext, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not any(e["type"] in ("assistant/message", "tool/call") or
               (e["type"] == "tool/result" and e.get("surfaceOp") == "append") for e in events):
        return events
    if ctx.open_turn is None:
        raise LandingImpossible("assistant nodes can only land while a turn is open (in a later turn's pre-step)",
                                transient=True)
    if ctx.open_step is not None:
        return events  # inside the loop's own step
    if not dialect.plugin_steps:
        raise LandingImpossible(f"{dialect.name}: appended assistant/tool nodes need a step the agent loop opened")
    step = {"turn": ctx.open_turn, "step": LANDING_STEP}
    return [{"type": "step/start", "data": dict(step)}, *events, {"type": "step/end", "data": dict(step)}]


def _assistant_event(dialect: Dialect, where: tuple[int, int], text: str, source: dict[str, Any],
                     surface: dict[str, Any]) -> dict[str, Any]:
    message = {"id": _uuid(), "role": "assistant", "content": [{"type": "text", "text": text}], "source": source}
    return {"type": "assistant/message", "data": dialect.assistant_data(*where, message), **surface}


def _retained_snapshot(log: SessionLog) -> int | None:
    """The runtime-context snapshot the host currently retains (newest one on the surface)."""
    # over the surface, not back through the log: off the surface the log keeps its events
    # compact (`host.event_store`), and a read there parses one again
    events = log.events
    return max((seq for seq in log.nodes if events[seq]["type"] == "user/message"
                and is_runtime_context((events[seq].get("data") or {}).get("source"))), default=None)


def _keep_snapshot(log: SessionLog, shadowed: set[int]) -> list[dict[str, Any]]:
    """rc8 does not re-emit a snapshot before the step about to run: if the landing shadows
    the one it retains, restate it at the tail so that step still carries it. (0.2's loop
    forgets a retained snapshot a replacement cites and emits it again itself.)"""
    if log.dialect.reemits_shadowed_snapshot:
        return []
    retained = _retained_snapshot(log)
    if retained is None or retained not in shadowed:
        return []
    original = log.events[retained]
    message = {**copy.deepcopy(original["data"]), "id": _uuid()}
    return [{"type": "user/message", "data": message, "surfaceOp": "append", "sourceEventSeqs": [retained]}]


def plan_landing(log: SessionLog, editor: TurnNodeEditor, positions: list[int], ctx: LandingContext) -> Plan:
    """The whole landing of one compressed turn, for the log's dialect."""
    if editor.final_problems():
        raise LandingImpossible("the working surface is not final: " + "; ".join(editor.final_problems()))
    if not editor.changed:
        return noop_plan(log, positions[0], ctx)
    dialect = log.dialect
    if dialect.assistant_may_replace:
        events, shadowed = _in_place(log, editor, positions, ctx)
    else:
        events, shadowed = _assistants_appended(log, editor, positions, ctx)
    events = _landing_step(dialect, ctx, events) + _keep_snapshot(log, shadowed)
    return Plan(events, spans=surface_runs(log, positions),
                label=f"turn {ctx.turn} landing ({len(positions)} -> {len(editor.nodes)})", kind=PlanKind.TURN_LANDING)


def surface_runs(log: SessionLog, positions: list[int]) -> list[list[int]]:
    """The turn's positions as runs contiguous on the surface: the spans a landing needs
    unchanged (0.2's tool-registry developer message may sit between two of them)."""
    runs: list[list[int]] = []
    previous = None
    for seq in positions:
        at = log.index_of(seq)
        if runs and previous is not None and at == previous + 1:
            runs[-1].append(seq)
        else:
            runs.append([seq])
        previous = at
    return runs


def _in_place(log: SessionLog, editor: TurnNodeEditor, positions: list[int],
              ctx: LandingContext) -> tuple[list[dict[str, Any]], set[int]]:
    dialect = log.dialect
    model = _model_source(editor.originals)
    events: list[dict[str, Any]] = []
    shadowed: set[int] = set()
    for index, node in enumerate(editor.nodes):
        if not node.changed and index != 0:
            continue
        if not node.changed:  # the unchanged first user node still gets the landed marker
            events.append(noop_plan(log, positions[0], ctx).events[0])
            continue
        span = positions[node.slice[0]:node.slice[1] + 1]
        shadowed.update(span)
        surface = {"surfaceOp": dialect.replace_op(span[0], span[-1]), "sourceEventSeqs": _cites(node, positions)}
        if node.role == "user":
            source = _marker(dialect, ctx) if index == 0 else marker_source(dialect, "compression", ctx.turn)
            events.append({"type": "user/message", "data": _user_message(node.text, source), **surface})
        elif node.role == "assistant":
            if model is None:
                raise LandingImpossible("no model source to attribute rewritten assistant nodes to")
            where = _step_of(dialect, ctx) or (ctx.open_turn or 0, LANDING_STEP)
            events.append(_assistant_event(dialect, where, node.text, model, surface))
        else:
            events.append(_tool_rewrite(log, editor, node, positions, surface))
    return events, shadowed


def _tool_rewrite(log: SessionLog, editor: TurnNodeEditor, node: WorkingNode, positions: list[int],
                  surface: dict[str, Any]) -> dict[str, Any]:
    """A tool result may only change its content, one-to-one (both dialects)."""
    original = editor.originals[node.slice[0]]
    assert original.role == "tool"
    data = copy.deepcopy(log.events[positions[node.slice[0]]]["data"])
    data["message"] = log.dialect.with_tool_result_blocks(data["message"], [{"type": "text", "text": node.text}])
    return {"type": "tool/result", "data": data, **surface}


def _assistants_appended(log: SessionLog, editor: TurnNodeEditor, positions: list[int],
                         ctx: LandingContext) -> tuple[list[dict[str, Any]], set[int]]:
    """A host where an assistant/message can only be appended: in place when only user and tool
    nodes changed, else the turn's head replaces the whole turn and the rest is appended, else
    one user checkpoint stands for the turn."""
    dialect = log.dialect
    nodes = editor.nodes
    if _one_to_one(editor, ctx.open_turn):  # mode 2
        return _in_place(log, editor, positions, ctx)
    shadowed = set(positions)
    whole = {"surfaceOp": dialect.replace_op(positions[0], positions[-1])}
    if _block_problem(log, [BlockTurn(editor, positions, ctx)]) is None:
        return _block_events(log, [BlockTurn(editor, positions, ctx)]), shadowed  # mode 3
    # mode 4: one user checkpoint standing for the whole turn, roles written out; its source
    # says so, so a later reader (the session worker's catalog) can split it back
    label = {"user": "User", "assistant": "Assistant", "tool": "Tool result"}
    text = "\n\n".join(f"{label[n.role]}: {n.text}" for n in nodes)
    source = {**_marker(dialect, ctx), "form": COMPRESSED_TURN}
    return [{"type": "user/message", "data": _user_message(text, source), **whole,
             "sourceEventSeqs": sorted({s for n in nodes for s in n.sources} | set(positions))}], shadowed


def lands_in_place(log: SessionLog, editor: TurnNodeEditor, open_turn: int | None) -> bool:
    """Whether the turn lands node by node (rc8, nothing changed, or only user/tool nodes
    one-to-one): wherever it sits, it keeps its shape."""
    return log.dialect.assistant_may_replace or not editor.changed or _one_to_one(editor, open_turn)


def _one_to_one(editor: TurnNodeEditor, open_turn: int | None) -> bool:
    """Mode 2 (in place): assistant nodes unchanged; each changed node is a user node over user
    positions only (consecutive user nodes may merge) or a one-to-one tool-result rewrite; a
    tool-result rewrite reloads only inside an open turn (v02 lifecycle)."""
    def in_place(n: WorkingNode) -> bool:
        if n.original is not None:
            return True
        roles = {editor.originals[i].role for i in range(n.slice[0], n.slice[1] + 1)}
        return roles == {n.role} and (n.role == "user" or (n.role == "tool" and n.capacity == 1))
    return all(in_place(n) for n in editor.nodes) \
        and (open_turn is not None or not any(n.changed and n.role == "tool" for n in editor.nodes))


@dataclass(frozen=True)
class BlockTurn:
    """One turn of a block landing: its working surface, its positions, its landing context."""

    editor: TurnNodeEditor
    positions: list[int]
    ctx: LandingContext


def _block_problem(log: SessionLog, block: list[BlockTurn]) -> str | None:
    """Why these turns cannot land as one block (mode 3 over all of them), or None: their nodes
    must follow each other to the surface tail, each turn must open with a user node and name
    the model its assistant nodes came from, and the agent loop's step must be open."""
    if not block:
        return "no turns"
    ctx = block[0].ctx
    if _step_of(log.dialect, ctx) is None:
        return "appended assistant nodes need a step the agent loop opened"
    try:
        start = log.index_of(block[0].positions[0])
    except SurfaceError:
        return f"turn {block[0].ctx.turn} is no longer on the surface"
    if log.nodes[start:] != [p for member in block for p in member.positions]:
        return "the turns do not reach the surface tail one after another"
    for member in block:
        if member.editor.nodes[0].role != "user":
            return f"turn {member.ctx.turn} does not open with a user node"
        if _model_source(member.editor.originals) is None:
            return f"turn {member.ctx.turn} names no model for its assistant nodes"
    return None


def _block_events(log: SessionLog, block: list[BlockTurn]) -> list[dict[str, Any]]:
    """Mode 3 over consecutive turns reaching the tail: the first turn's first node replaces
    them all; every other node is appended in order, each later turn's first user node
    carrying that turn's marker (its head: recovery and the turn index read a turn's nodes
    from it), tool results behind replays of their calls."""
    dialect = log.dialect
    ctx = block[0].ctx
    where = _step_of(dialect, ctx)
    assert where is not None
    everything = [p for member in block for p in member.positions]
    events: list[dict[str, Any]] = []
    base = len(log) + ctx.ahead
    calls: dict[str, dict[str, Any]] = {}
    for member in block:
        first, *rest = member.editor.nodes
        model = _model_source(member.editor.originals)
        assert model is not None
        kept = first.original  # None: the head was rewritten
        message = _user_message(first.text, _marker(dialect, member.ctx)) if kept is None else {
            **copy.deepcopy(kept.message), "id": _uuid(), "source": _marker(dialect, member.ctx)}
        if not events:
            events.append({"type": "user/message", "data": message,
                           "surfaceOp": dialect.replace_op(everything[0], everything[-1]),
                           "sourceEventSeqs": sorted({*first.sources, *everything})})
        else:
            events.append({"type": "user/message", "data": message, "surfaceOp": "append",
                           "sourceEventSeqs": sorted({*first.sources, *member.positions})})
        for node in rest:
            events += _appended(log, member.ctx, node, model, where, calls, base + len(events))
    return events


def plan_block_landing(log: SessionLog, block: list[BlockTurn]) -> Plan:
    """Consecutive compressed turns that reach the surface tail, landed as one plan inside the
    loop's step, each keeping its user/assistant shape (0.2: mode 3 over the block). Raises
    `LandingImpossible` when they cannot (nothing is planned)."""
    for member in block:
        if member.editor.final_problems():
            raise LandingImpossible(f"turn {member.ctx.turn}: the working surface is not final: "
                                    + "; ".join(member.editor.final_problems()))
    why = _block_problem(log, block)
    if why is not None:
        raise LandingImpossible(f"turns {', '.join(str(m.ctx.turn) for m in block)} cannot land as one block: {why}")
    turns = [m.ctx.turn for m in block]
    nodes = sum(len(m.positions) for m in block)
    kept = sum(len(m.editor.nodes) for m in block)
    return Plan(_block_events(log, block), spans=[[p for m in block for p in m.positions]],
                label=f"turns {', '.join(map(str, turns))} block landing ({nodes} -> {kept})", kind=PlanKind.TURN_LANDING)


def _appended(log: SessionLog, ctx: LandingContext, node: WorkingNode, model: dict[str, Any],
              where: tuple[int, int], calls: dict[str, dict[str, Any]], seq: int) -> list[dict[str, Any]]:
    """Re-materialise one node after a mode-3 head (the first event lands at `seq`).

    Unchanged nodes keep their event data, re-homed to `where`. A tool result (kept or
    rewritten) stays a tool/result answering the call of the kept assistant before it (the
    editor keeps every result paired with its verbatim call), behind a replayed tool/call:
    v02 reloads a result only after its call started in the same step.
    """
    dialect = log.dialect
    turn, step = where
    original = node.original
    if node.role == "tool":
        call_id = node.result_for
        block = calls.get(call_id or "")
        if block is None:
            raise LandingImpossible(f"tool result for {call_id} has no kept calling assistant before it")
        origin = original.seq if original is not None else _result_seq(log, node)
        data = copy.deepcopy(log.events[origin]["data"])
        data.update(turn=turn, step=step)
        data["message"]["id"] = _uuid()
        if original is None:
            data["message"] = dialect.with_tool_result_blocks(data["message"], [{"type": "text", "text": node.text}])
        call = {"type": "tool/call", "data": {"turn": turn, "step": step, "callId": call_id,
                                              "name": block.get("name"), "arguments": block.get("arguments")}}
        return [call, {"type": "tool/result", "data": data, "surfaceOp": "append", "sourceEventSeqs": sorted({origin, seq})}]
    if original is None:
        if node.role == "assistant":
            return [_assistant_event(dialect, where, node.text, model, {"surfaceOp": "append"})]
        return [{"type": "user/message", "data": _user_message(node.text, marker_source(dialect, "compression", ctx.turn)),
                 "surfaceOp": "append", "sourceEventSeqs": list(node.sources)}]
    data = copy.deepcopy(original.event["data"])
    if original.event["type"] == "assistant/message":
        data.update(turn=turn, step=step)
        data["message"]["id"] = _uuid()
        for block in data["message"].get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool-call" and isinstance(block.get("id"), str):
                calls[block["id"]] = block
        return [{"type": "assistant/message", "data": data, "surfaceOp": "append"}]
    data["id"] = _uuid()
    return [{"type": "user/message", "data": data, "surfaceOp": "append", "sourceEventSeqs": [original.seq]}]


def _result_seq(log: SessionLog, node: WorkingNode) -> int:
    """The original tool/result a rewritten tool node stands for (its one-position slice)."""
    return next(s for s in node.sources if log.events[s]["type"] == "tool/result")
