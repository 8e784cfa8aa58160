"""One session run's numbers, from what the scripted model received, the session log and the
engine log. Pure: no DSH, no I/O.

Besides the bill (`turn_memory.devtools.price_model`), it computes the *floor*: what an ideal
worker under the same design would have cost for the same compressed turns — one request per
turn, the history before the turn read at the cached price, the turn and its task at the
uncached price, the rewrite at the output price — plus every non-worker request as billed.
"""

from __future__ import annotations

import json

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from session_scenarios import (SEGMENT_TASK, STOCK_INSTRUCTION, WORKER_TOOLS, Scenario, answer_tag, result_tag,
                               turn_plan, worker_task, worker_turns)
from turn_memory.devtools import price_model as pm


@dataclass
class Received:
    """What the analysis needs of one request the fake received."""

    kind: str
    tool_names: list[str]
    text: str
    output_tokens: int
    last_user: str
    source: str
    time: float
    #: a turn worker's task prompt ("" for every other request)
    task: str = ""
    #: the scripted reply's tool calls (name, arguments)
    calls: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, req: Any) -> "Received":
        return cls(req.kind, req.tool_names, pm.canonical_text(req.tools, req.messages), pm.output_tokens(req.reply),
                   req.last_user_text, req.source, req.time,
                   worker_task(req.messages) if "replace_turn_nodes" in req.tool_names else "",
                   list((req.reply or {}).get("tool_calls") or []))


def label_of(r: Received) -> str:
    if WORKER_TOOLS & set(r.tool_names):
        return "worker"
    if STOCK_INSTRUCTION in r.last_user or r.kind == "compaction":
        return "summary"
    return "agent" if r.kind == "turn" else r.kind


#: how a spawned worker's request is told apart (a fork has the session in its context instead)
_SPAWN_TASK = "You start fresh"
WORKER_KINDS = ("turn fork", "turn spawn", "segment fork", "segment spawn")


def worker_kind(r: Received) -> str:
    return (f"{'segment' if SEGMENT_TASK.search(r.text) else 'turn'} "
            f"{'spawn' if _SPAWN_TASK in r.text else 'fork'}")


def call_tokens(call: Mapping[str, Any]) -> int:
    return pm.output_tokens({"tool_calls": [call]})


# -- the floor ----------------------------------------------------------------------------

@dataclass(frozen=True)
class IdealWorker:
    turn: int
    history_tokens: int
    turn_tokens: int
    output_tokens: int

    def cost(self, prices: pm.Prices = pm.DEEPSEEK) -> float:
        return prices.usd(self.history_tokens, self.turn_tokens, self.output_tokens)


_TASK_START = "<|user|>You are now the memory editor"
#: which part of a split turn a spawned worker's task hands it
_PART = re.compile(r"Yours\s+is part (\d+) of (\d+)")
#: where a spawned task's node texts begin (`## n3 · assistant · …`, `### t2.n4 · tool · …`)
_NODE_TEXT = re.compile(r"\n#{2,3} (?:t\d+\.)?n\d+ · ")


def _spawn_ideal(turn: int, requests: Sequence[Received], written: int) -> IdealWorker:
    """One spawned request for the whole turn: the worker's own prefix (system prompt and
    tools) cached, one task's framing and every part's node texts uncached. A split turn's
    parts each carry only their nodes, so all of them count, each once, and the framing the
    extra parts repeat does not."""
    first = requests[0]
    task_at = first.text.rfind(_TASK_START)
    prefix = pm.tokens(first.text[:task_at]) if task_at >= 0 else 0
    uncached = 0
    for i, r in enumerate(requests):
        at = r.text.rfind(_TASK_START)
        task = r.text[at:] if at >= 0 else r.text
        texts_at = _NODE_TEXT.search(task)
        framing = pm.tokens(task[:texts_at.start()]) if texts_at else 0
        uncached += pm.tokens(task) // max(1, len(worker_turns(r.task))) - (framing if i else 0)
    return IdealWorker(turn, prefix, uncached, written)


def ideal_workers(received: Sequence[Received], compressed: Iterable[int]) -> list[IdealWorker]:
    """One ideal request per compressed turn, sized from the worker requests that covered it:
    the history before the turn (a fork's session, a spawn's own prefix) cached, the turn and
    one task uncached, and the rewrite the workers wrote for it."""
    wanted, out = set(compressed), []
    written: dict[int, int] = {}
    first: dict[int, Received] = {}
    parts: dict[int, dict[tuple[int, ...], Received]] = {}  # a spawned turn's first request per part
    for r in received:
        if not r.task:
            continue
        turns = worker_turns(r.task)
        part = _PART.search(r.task)
        for turn in turns:
            first.setdefault(turn, r)
            parts.setdefault(turn, {}).setdefault((int(part.group(1)),) if part else (), r)
        for call in r.calls:
            if call.get("name") != "replace_turn_nodes":
                continue
            start = str((call.get("arguments") or {}).get("from", ""))
            m = re.match(r"t(\d+)\.", start)
            turn = int(m.group(1)) if m else (turns[0] if turns else 0)
            written[turn] = written.get(turn, 0) + call_tokens(call)
    for turn in sorted(wanted & set(first)):
        r = first[turn]
        text, turns = r.text, worker_turns(r.task)
        task_at = text.rfind(_TASK_START)
        at = text.find(f"<|user|>Task {turn}:")
        if at < 0 or (task_at >= 0 and at > task_at):  # a spawn: the turn is in its task
            out.append(_spawn_ideal(turn, [p for _, p in sorted(parts[turn].items())], written.get(turn, 0)))
            continue
        task_tokens = pm.tokens(text[task_at:]) // max(1, len(turns)) if task_at >= 0 else 0
        nxt = text.find(f"<|user|>Task {turn + 1}:", at)
        end = min(p for p in (nxt, task_at, len(text)) if p >= 0)
        out.append(IdealWorker(turn, pm.tokens(text[:at]), pm.tokens(text[at:end]) + task_tokens, written.get(turn, 0)))
    return out


# -- one run ------------------------------------------------------------------------------

def first_requests(received: Sequence[Received], labels: Sequence[str]) -> dict[int, Received]:
    """Each turn's first agent request."""
    out: dict[int, Received] = {}
    for r, label in zip(received, labels):
        m = re.match(r"Task (\d+):", r.last_user)
        if label == "agent" and m and int(m.group(1)) not in out:
            out[int(m.group(1))] = r
    return out


def still_raw(sc: Scenario, k: int, text: str) -> bool:
    """Whether a request still carries turn k's raw content."""
    p = turn_plan(sc, k)
    if p is None:
        return False
    return (result_tag(k, 1) if p.steps else answer_tag(k)) in text


def turn_alone_tokens(text: str) -> int:
    """An agent request with no history at all: its tools and system prompt, and its open turn
    from the person's message on. No memory that folds only between turns goes below it."""
    opening, turn = text.find("<|user|>"), text.rfind("<|user|>Task ")
    return pm.tokens(text[:opening]) + pm.tokens(text[turn:]) if 0 <= opening <= turn else pm.tokens(text)


def analyse_requests(received: Sequence[Received], sc: Scenario, compressed: Iterable[int] = (),
                     prices: pm.Prices = pm.DEEPSEEK) -> dict[str, Any]:
    labels = [label_of(r) for r in received]
    priced = pm.price([pm.Request(r.text, r.output_tokens, label) for r, label in zip(received, labels)], prices)
    total = pm.bill(priced)
    agent = [(r, p) for r, p in zip(received, priced) if p.label == "agent"]
    ideal = ideal_workers(received, compressed)
    out: dict[str, Any] = {
        "cost_usd": total.cost_usd, "hit_ratio": total.hit_ratio, "worker_share": total.share("worker"),
        "prompt_tokens": total.prompt_tokens, "hit_tokens": total.hit_tokens, "output_tokens": total.output_tokens,
        "requests": {label: labels.count(label) for label in sorted(set(labels))},
        "cost_by_label": total.cost_by_label,
        "final_request_tokens": agent[-1][1].prompt_tokens if agent else None,
        "peak_request_tokens": max((p.prompt_tokens for _, p in agent), default=None),
        "floor_usd": total.cost_usd - total.cost_by_label.get("worker", 0.0) + sum(w.cost(prices) for w in ideal),
        "ideal_workers": [vars(w) for w in ideal],
        "tool_tokens": pm.tokens(agent[0][0].text[:agent[0][0].text.find("<|system|>")]) if agent else None,
        "turn_alone_peak_tokens": max((turn_alone_tokens(r.text) for r, _ in agent), default=None),
    }
    # a request that shares less with the agent's previous request than that request's whole
    # length: something before its end was rewritten (a landing, a tool-list change, ...)
    rewrites = 0
    for (_, before), (_, now) in zip(agent, agent[1:]):
        if now.hit_tokens < before.prompt_tokens // pm.BLOCK_TOKENS * pm.BLOCK_TOKENS:
            rewrites += 1
    out["prefix_rewrites"] = rewrites
    kinds: dict[str, dict[str, float]] = {}
    for r, p in zip(received, priced):
        if p.label == "worker":
            k = kinds.setdefault(worker_kind(r), {"requests": 0, "usd": 0.0})
            k["requests"] += 1
            k["usd"] += p.cost_usd
    out["worker_kinds"] = kinds
    out["agent_miss_tokens"] = sum(p.miss_tokens for _, p in agent)
    firsts = first_requests(received, labels)
    out["first_request_tokens"] = {k: pm.tokens(r.text) for k, r in firsts.items()}
    out["first_request_time"] = {k: r.time for k, r in firsts.items()}
    raw_after = {lag: [k for k in range(1, sc.turns + 1) if k + lag in firsts and still_raw(sc, k, firsts[k + lag].text)]
                 for lag in (1, 2)}
    out["raw_in_next_first_request"] = raw_after[1]
    out["raw_two_turns_later"] = raw_after[2]
    out["worker_seconds"] = [sc.ttfb_ms / 1e3 + (r.output_tokens / sc.tokens_per_s if sc.tokens_per_s else 0.0)
                             for r, label in zip(received, labels) if label == "worker"]
    out["wrong_replies"] = [f"{label} request answered by {r.source}" for r, label in zip(received, labels)
                            if (label == "agent" and not r.source.startswith("rule:agent"))
                            or (label in ("worker", "summary") and r.source != "responder")]
    return out


def job_starts(received: Sequence[Received], events: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """Per turn: ms from its turn/end to the first worker request that covers it (how late its job started)."""
    ends = {e["data"]["turn"]: e["time"] for e in events if e.get("type") == "turn/end"}
    out: dict[int, float] = {}
    for r in received:
        for turn in worker_turns(r.task) if r.task else []:
            if turn in ends and turn not in out:
                out[turn] = r.time * 1e3 - ends[turn]
    return out


def turn_ends(events: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    return {e["data"]["turn"]: e["time"] for e in events if e.get("type") == "turn/end"}


def two_turn_gaps(ends: Mapping[int, float], first_times: Mapping[int, float]) -> list[float]:
    """Per turn k: ms from its turn/end to turn k+2's first agent request (what a worker has)."""
    return [first_times[k + 2] * 1e3 - ends[k] for k in ends if k + 2 in first_times]


def landed_turns(events: Iterable[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Turns whose `compression` marker landed, by whether a worker ran for them (a rewrite)
    or not (the no-op marker: no assistant transcript)."""
    from turn_memory.host.markers import marker_of

    out: dict[str, list[int]] = {"worker": [], "no_worker": []}
    for e in events:
        got = marker_of(dict(e))
        if got is not None and got[0] == "compression":
            workers = (e["data"].get("source") or {}).get("workers", 0)
            out["worker" if workers else "no_worker"].append(got[1])
    return {k: sorted(set(v)) for k, v in out.items()}


#: how a landed compression sits on the surface (`turn_memory.host.landing_forms`)
LANDING_MODES = ("in-place", "tail", "flattened")


def landing_modes(events: Sequence[Mapping[str, Any]], dialect: Any) -> dict[str, list[int]]:
    """Turns whose compression landed, by the form it took (`in-place`, `tail`: both keep the
    user/assistant shape; `flattened`: one user message for the whole turn). Read from the log alone."""
    from turn_memory.host.landing_forms import landing_forms
    from turn_memory.host.surface import SessionLog

    forms = landing_forms(SessionLog(dialect, [dict(e) for e in events]))
    return {mode: sorted(t for t, form in forms.items() if form == mode) for mode in LANDING_MODES}


def log_size(events: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The session log's events and their bytes as JSON lines (what grows on disk, before compression)."""
    return {"events": len(events), "bytes": sum(len(json.dumps(e, separators=(",", ":"))) + 1 for e in events)}


def compactions(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every committed session compaction (either engine's): the turn it ran in, what it folded
    and how big its checkpoint is."""
    out, turn = [], None
    for e in events:
        if e.get("type") == "turn/start":
            turn = e["data"]["turn"]
        elif e.get("type") == "compaction/summary":
            data = e.get("data") or {}
            text = "".join(b.get("text", "") for b in data.get("summary") or [] if isinstance(b, dict))
            out.append({"turn": turn, "shadowed_tokens": data.get("shadowedTokenCount"),
                        "summary_tokens": pm.tokens(text)})
    return out


def failed_compactions(events: Iterable[Mapping[str, Any]]) -> int:
    return sum(1 for e in events if e.get("type") == "compaction/end" and (e.get("data") or {}).get("error"))


_DECISION = re.compile(r" turns? ([\d, ]+): (compressing|held); ")


def decisions(log_lines: Iterable[str]) -> dict[str, list[int]]:
    """From the engine log: turns dispatched when they ended ("eligible"), turns held first and
    compressed later with another, and turns still held at the end."""
    eligible, later, held = set(), set(), set()
    for line in log_lines:
        m = _DECISION.search(line)
        if m is None:
            continue
        turns = [int(t) for t in m.group(1).split(",")]
        if m.group(2) == "compressing":
            eligible.add(turns[-1])
            later.update(turns[:-1])
            held.difference_update(turns)
        else:
            held.update(turns)
    return {"eligible": sorted(eligible - later), "held_then_compressed": sorted(later), "held": sorted(held)}


def median(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None
