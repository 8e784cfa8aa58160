"""The session benchmark's scenarios and the scripted session they drive. Pure and deterministic.

A scenario is a whole DSH session: its turns (each a plan of tool calls with their output
sizes, reasoning and the final answer), the model's latency, the user's think time, the
context window, and what the scripted workers write. The plan is drawn from a seeded random
generator, so both engines and both hosts run exactly the same session. Where each shape
comes from is in bench/README.md ("The sessions").
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from turn_memory.devtools import price_model as pm

#: the realistic model of issue 14: first byte after 600 ms, then 60 output tokens/s
REALISTIC = (600.0, 60.0)
INSTANT = (0.0, None)
SEQ_LINE_CHARS = 12  # "r12.3-000001\n"
KB = 1024


@dataclass(frozen=True)
class Scenario:
    name: str
    #: tool (or chat) turns; one short closing turn follows them (so the last one can land)
    turns: int
    #: tool calls per turn (`uniform`); `coding` draws them from `calls_range`
    calls: int
    #: tokens of each tool result (`uniform`)
    result_tokens: int
    ttfb_ms: float
    tokens_per_s: float | None
    think_ms: int = 0
    runs: int = 1
    #: the scripted worker's rewrite: this share of the turn's content, at least `min_rewrite` tokens
    rewrite_ratio: float = 0.1
    min_rewrite: int = 40
    #: model requests the scripted worker takes: 1 = replace and finish in one reply, 2 = then finish
    worker_requests: int = 1
    #: (metric, ratio bound) targets of issue 21; metric in TARGET_METRICS
    targets: tuple[tuple[str, float], ...] = ()
    #: `uniform` (every turn the same calls and results), `coding` (drawn per turn), `chat` (no tools)
    shape: str = "uniform"
    calls_range: tuple[int, int] = (5, 15)
    #: tool output sizes, drawn log-uniformly between these (KB)
    result_kb: tuple[float, float] = (0.2, 16.0)
    seed: int = 21
    #: route the model through a generic route with this window (tokens); None: DSH's default route (1M)
    context_window: int | None = None
    #: tokens of a session-compaction summary (stock's, and ours spread over its segments)
    summary_tokens: int = 2000
    #: a sensitivity run: only turn-memory runs; its ratios are against this scenario's stock runs
    stock_of: str | None = None

    @property
    def model(self) -> str:
        if not self.ttfb_ms and not self.tokens_per_s:
            return "instant"
        return f"{self.ttfb_ms:.0f} ms + {self.tokens_per_s:.0f} tok/s" if self.tokens_per_s else f"{self.ttfb_ms:.0f} ms"

    def describe(self) -> str:
        think = f", think {self.think_ms} ms" if self.think_ms else ", no think time"
        if self.shape == "coding":
            turns = (f"{self.turns} coding turns × {self.calls_range[0]}–{self.calls_range[1]} calls, outputs "
                     f"{self.result_kb[0]:g}–{self.result_kb[1]:g} KB")
        elif self.shape == "chat" or not self.calls:
            turns = f"{self.turns} chat turns (no tool calls)"
        else:
            turns = f"{self.turns} tool turns × {self.calls} call(s) × ~{self.result_tokens} tok results"
        window = f", {self.context_window // 1000}K window" if self.context_window else ""
        return (f"{turns} + 1 closing turn; model {self.model}{think}{window}; the scripted worker keeps "
                f"{self.rewrite_ratio:.0%}")

    @property
    def stock_name(self) -> str:
        return self.stock_of or self.name


TARGET_METRICS = {
    "latency": "per-turn user latency",
    "cost": "total billed cost",
    "wall": "whole-run wall time",
    "final": "final request size",
    "peak": "peak request size",
    "floor": "cost against the floor",
    "log": "session log events",
}

CODING = Scenario("coding", 20, 0, 0, *REALISTIC, think_ms=3000, rewrite_ratio=0.25, shape="coding",
                  targets=(("cost", 0.8), ("final", 0.35), ("latency", 1.02), ("floor", 1.15), ("log", 1.5)))
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    CODING,
    # the same session with a person who reads each answer for 30 s before the next message
    replace(CODING, name="coding-30s", think_ms=30_000),
    replace(CODING, name="coding-keep10", rewrite_ratio=0.10, stock_of="coding", targets=()),
    replace(CODING, name="coding-keep40", rewrite_ratio=0.40, stock_of="coding", targets=()),
    replace(CODING, name="long", turns=30, context_window=128_000,
            targets=(("cost", 0.8), ("peak", 0.5), ("latency", 1.02), ("floor", 1.10))),
    Scenario("chat", 12, 0, 0, *REALISTIC, think_ms=3000, shape="chat", targets=(("cost", 1.02), ("floor", 1.15))),
    Scenario("12x1", 12, 1, 1000, *REALISTIC, targets=(("cost", 1.3), ("floor", 1.15))),
    # issue 14's scenarios, kept for reference (not in the default run)
    Scenario("3x1", 3, 1, 1000, *REALISTIC, runs=3, targets=(("latency", 1.05),)),
    Scenario("12x5", 12, 5, 1000, *REALISTIC),
    Scenario("30x1", 30, 1, 1000, *REALISTIC),
    Scenario("12x0", 12, 0, 0, *REALISTIC),
    Scenario("3x1-instant", 3, 1, 1000, *INSTANT, runs=5, targets=(("wall", 1.15),)),
)}
DEFAULT_SCENARIOS = ("coding", "coding-30s", "coding-keep10", "coding-keep40", "long", "chat", "12x1")


def parse_scenarios(spec: str) -> list[Scenario]:
    """`coding,12x1` (known names) or ad-hoc `TURNSxCALLS[:RESULT_TOKENS]` (realistic model)."""
    out = []
    for name in [s.strip() for s in spec.split(",") if s.strip()]:
        if name in SCENARIOS:
            out.append(SCENARIOS[name])
            continue
        m = re.fullmatch(r"(\d+)x(\d+)(?::(\d+))?", name)
        if not m:
            raise ValueError(f"unknown scenario {name!r}: one of {', '.join(SCENARIOS)} or TURNSxCALLS[:RESULT_TOKENS]")
        out.append(Scenario(name, int(m.group(1)), int(m.group(2)), int(m.group(3) or 1000), *REALISTIC))
    return out


# =========================================================================================
# the plan: what happens in each turn
# =========================================================================================

@dataclass(frozen=True)
class Step:
    #: tokens of the tool result this step's call returns (0: the turn's final answer, no call)
    result_tokens: int
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class TurnPlan:
    turn: int
    steps: tuple[Step, ...]
    answer_tokens: int
    #: reasoning before the final answer
    answer_reasoning: int = 0

    @property
    def calls(self) -> int:
        return len(self.steps)

    @property
    def content_tokens(self) -> int:
        """What the scripted worker rewrites a share of: the tool output, or a chat turn's answer."""
        tool = sum(s.result_tokens for s in self.steps)
        return tool if tool else self.answer_tokens + self.answer_reasoning


@lru_cache(maxsize=64)
def plan(sc: Scenario) -> tuple[TurnPlan, ...]:
    """Every turn of the scenario (the closing turn excluded), from its seed."""
    rng = random.Random(f"{sc.seed}:{sc.shape}:{sc.turns}:{sc.calls}:{sc.result_tokens}")
    out = []
    lo, hi = math.log(sc.result_kb[0] * KB), math.log(sc.result_kb[1] * KB)
    for k in range(1, sc.turns + 1):
        if sc.shape == "coding":
            steps = tuple(Step(max(16, round(math.exp(rng.uniform(lo, hi)) / pm.CHARS_PER_TOKEN)),
                               rng.randint(60, 250) if j == 0 else (rng.randint(40, 150) if rng.random() < 0.3 else 0))
                          for j in range(rng.randint(*sc.calls_range)))
            out.append(TurnPlan(k, steps, rng.randint(60, 200)))
        elif sc.shape == "chat":
            out.append(TurnPlan(k, (), rng.randint(150, 500), rng.randint(60, 300)))
        else:
            out.append(TurnPlan(k, tuple(Step(sc.result_tokens) for _ in range(sc.calls)), 0))
    return tuple(out)


def turn_plan(sc: Scenario, k: int) -> TurnPlan | None:
    turns = plan(sc)
    return turns[k - 1] if 1 <= k <= len(turns) else None


def rewrite_tokens(sc: Scenario, k: int) -> int:
    """Tokens the scripted worker writes for turn k."""
    p = turn_plan(sc, k)
    return max(sc.min_rewrite, int(sc.rewrite_ratio * p.content_tokens)) if p is not None else sc.min_rewrite


# =========================================================================================
# the scripted session (what the model answers)
# =========================================================================================

WORKER_TOOLS = frozenset({"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression",
                          "list_session_segments", "read_session_source", "read_session_memory",
                          "search_session_memory", "replace_session_memory", "finish_session_segment"})


def task(k: int, sc: Scenario) -> str:
    if k > sc.turns:
        return f"Task {k}: thanks, that is all."
    if sc.shape == "chat":
        return f"Task {k}: explain how the parser handles case {k} of empty input, and why."
    return f"Task {k}: make the parser handle empty input, part {k}; check the listing."


def result_tag(k: int, j: int) -> str:
    """The first line of turn k's j-th tool result: proof the raw turn is still in a request."""
    return f"r{k}.{j}-000001"


def answer_tag(k: int) -> str:
    """A chat turn's answer opens with this: proof the raw answer is still in a request."""
    return f"A{k}-RAW"


def seq_command(k: int, j: int, tokens: int) -> str:
    lines = max(1, -(-tokens * pm.CHARS_PER_TOKEN // SEQ_LINE_CHARS))
    return f"seq -f 'r{k}.{j}-%06g' 1 {lines}"


def filler(tag: str, tokens: int, words: str) -> str:
    """`tokens` tokens of text starting with `tag` (each line unique, so nothing caches by accident)."""
    size = tokens * pm.CHARS_PER_TOKEN
    out, n = [tag], 0
    while sum(map(len, out)) < size:
        n += 1
        out.append(f" {words} ({n})")
    return "".join(out)[:size]


def agent_replies(k: int, sc: Scenario) -> list[Any]:
    p = turn_plan(sc, k)
    if p is None:
        return ["You're welcome."]
    steps: list[Any] = []
    for j, step in enumerate(p.steps, start=1):
        reply: dict[str, Any] = {
            "text": f"Step {j} of part {k}: listing the parser cases to check the empty-input path.",
            "tool_calls": [{"name": "bash", "arguments": {"command": seq_command(k, j, step.result_tokens),
                                                          "description": f"list cases {k}.{j}"}}]}
        if step.reasoning_tokens:
            reply["reasoning"] = filler(f"T{k}.{j}:", step.reasoning_tokens, "the empty input path reaches parse()")
        steps.append(reply)
    if sc.shape == "chat":
        final: Any = {"text": filler(answer_tag(k), p.answer_tokens, f"case {k}: parse() returns [] because"),
                      "reasoning": filler(f"T{k}:", p.answer_reasoning, "how the lexer ends the empty stream")}
    elif p.answer_tokens:
        final = filler(f"Part {k} done: parse() now returns [] on empty input; the {p.calls} listing(s) showed "
                       f"every case r{k}.* passing.", p.answer_tokens, "nothing else changed")
    else:
        final = (f"Part {k} done: parse() now returns [] on empty input; the {p.calls} listing(s) showed every "
                 f"case r{k}.* passing, nothing else changed, and the lexer is untouched.")
    steps.append(final)
    return steps


def tasks(sc: Scenario) -> list[Any]:
    out: list[Any] = []
    for k in range(1, sc.turns + 2):
        if k > 1 and sc.think_ms:
            out.append({"sleepMs": sc.think_ms})
        out.append(task(k, sc))
    return out


_TURN = re.compile(r"memory editor for turns? (\d+)")
#: a catalog line; one worker compressing several turns sees ids prefixed by their turn (`t4.n1`)
_NODE = re.compile(r"^- ((?:t(\d+)\.)?[nr]\d+) · (user|assistant|tool) · [^·]+ · ([^·]+) · capacity \d+ · (.*)$", re.M)
#: a worker on a part of a split turn (prompts/turn-compression.md, `part`)
_PART = re.compile(r"Yours\s+is part \d+ of \d+")
#: the step a tool result's preview names (its output's first line: `result_tag`)
_STEP = re.compile(r"r\d+\.(\d+)-0")
SEGMENT_TASK = re.compile(r"You are assigned segment (\d+); the working checkpoint is at revision (\d+)")
_SEGMENTS = re.compile(r"The history has (\d+) segments")
#: an earlier checkpoint among a segment's sources (`### S1.1 · user · checkpoint`) and its text
_CHECKPOINT_SOURCE = re.compile(r"^### S(\d+)\.\d+ · user · checkpoint\n(.*?)(?=\n\n### S\d|\Z)",
                                re.M | re.S)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])


def worker_task(messages: Sequence[Mapping[str, Any]]) -> str:
    """The task prompt of a turn worker's conversation ("" when there is none)."""
    return next((_text(m.get("content")) for m in reversed(messages)
                 if m.get("role") == "user" and _TURN.search(_text(m.get("content")))), "")


def worker_turns(prompt: str) -> list[int]:
    """The turns a turn worker's task prompt hands it."""
    found = _TURN.search(prompt)
    batch = sorted({int(t) for t in re.findall(r"^- t(\d+)\.n1 ", prompt, re.M)})
    return batch or ([int(found.group(1))] if found else [])


def worker_reply(messages: Sequence[Mapping[str, Any]], tool_names: Iterable[str], sc: Scenario) -> dict[str, Any] | None:
    """The scripted workers: a turn worker folds each tool or chat turn of its task into the
    request and one assistant node of `rewrite_tokens` tokens, then finishes (a closing turn
    finishes unchanged); a session segment worker replaces its placeholder with a summary."""
    names = set(tool_names)
    if "replace_session_memory" in names:
        return segment_reply(messages, sc)
    if "replace_turn_nodes" not in names:
        return None
    last = messages[-1] if messages else {}
    finish = {"name": "finish_turn_compression", "arguments": {}}
    if last.get("role") == "tool" and _text(last.get("content")).startswith("Accepted"):
        return {"tool_calls": [finish]}
    prompt = worker_task(messages)
    found = _TURN.search(prompt)
    by_turn: dict[int, list[tuple[str, str, str, str]]] = {}
    for m in _NODE.finditer(prompt):
        turn = int(m.group(2)) if m.group(2) else int(found.group(1)) if found else 0
        by_turn.setdefault(turn, []).append((m.group(1), m.group(3), m.group(4).strip(), m.group(5)))
    replaces = []
    for k, nodes in by_turn.items():
        p = turn_plan(sc, k)
        if p is None:
            continue  # the closing turn is already as short as it usefully gets
        ids = [node_id for node_id, _, _, _ in nodes]
        if any(state == "fixed" for _, _, state, _ in nodes):
            replaces += in_place_rewrite(sc, k, p, nodes)
            continue
        # the whole turn, or a part of it (`turns.maxParts`): the share of the content it holds
        steps = [int(found_step.group(1)) for _, role, _, preview in nodes
                 if role == "tool" and (found_step := _STEP.search(preview))]
        whole = not _PART.search(prompt)
        size = rewrite_tokens(sc, k) if whole else max(8, int(sc.rewrite_ratio * sum(
            p.steps[j - 1].result_tokens for j in steps if 1 <= j <= p.calls)))
        text = filler(f"COMPRESSED-{k}: ran the case listings for part {k}; every r{k} case passes; parse() returns "
                      "[] on empty input.", size, "kept what the listing showed")
        outputs = [{"role": "user", "content": f"Task {k}: make the parser handle empty input, part {k}."}] \
            if nodes[0][1] == "user" else []
        replaces.append({"name": "replace_turn_nodes", "arguments": {"from": ids[0], "to": ids[-1], "nodes": [
            *outputs, {"role": "assistant", "content": text}]}})
    if not replaces:
        return {"tool_calls": [finish]}
    return {"tool_calls": replaces + [finish] if sc.worker_requests == 1 else replaces}


def in_place_rewrite(sc: Scenario, k: int, p: TurnPlan, nodes: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
    """Assistant nodes fixed (0.2's default): the opening user nodes become the request, and each
    tool result keeps `rewrite_ratio` of its tokens (the same share of the turn as the folding
    worker keeps, spread over the results it came from; a part of a split turn has its own)."""
    head = next((i for i, (_, role, _, _) in enumerate(nodes) if role != "user"), len(nodes))
    calls = [{"name": "replace_turn_nodes", "arguments": {"from": nodes[0][0], "to": nodes[head - 1][0], "nodes": [
        {"role": "user", "content": f"Task {k}: make the parser handle empty input, part {k}."}]}}] if head else []
    for node_id, role, _, preview in nodes:
        found_step = _STEP.search(preview) if role == "tool" else None
        if found_step is None or not 1 <= (j := int(found_step.group(1))) <= p.calls:
            continue
        text = filler(f"COMPRESSED-{k}.{j}: listing {k}.{j}: every r{k}.{j} case passes.",
                      max(8, int(sc.rewrite_ratio * p.steps[j - 1].result_tokens)), "kept what the listing showed")
        calls.append({"name": "replace_turn_nodes", "arguments": {"from": node_id, "to": node_id, "nodes": [
            {"role": "tool", "content": text}]}})
    return calls


def segment_reply(messages: Sequence[Mapping[str, Any]], sc: Scenario) -> dict[str, Any]:
    last = messages[-1] if messages else {}
    finish = {"name": "finish_session_segment", "arguments": {}}
    if last.get("role") == "tool" and not _text(last.get("content")).lower().startswith(("error", "refused")):
        return {"tool_calls": [finish]}
    prompt = next((_text(m.get("content")) for m in reversed(messages)
                   if m.get("role") == "user" and SEGMENT_TASK.search(_text(m.get("content")))), "")
    found, count = SEGMENT_TASK.search(prompt), _SEGMENTS.search(prompt)
    if found is None:
        return {"tool_calls": [finish]}
    segment, revision = int(found.group(1)), int(found.group(2))
    tokens = max(100, sc.summary_tokens // max(1, int(count.group(1)) if count else 1))
    # a fold of a short span (a background checkpoint) keeps the turn workers' share of it at most,
    # an earlier checkpoint among its sources whole (as the prompt asks: it is already an index)
    size = re.search(rf"^- S{segment} · .*? · ~([\d,]+) tokens", prompt, re.M)
    if size is not None:
        carried = sum(pm.tokens(m.group(2)) for m in _CHECKPOINT_SOURCE.finditer(prompt) if int(m.group(1)) == segment)
        span = int(size.group(1).replace(",", ""))
        tokens = max(100, min(tokens, carried + int(sc.rewrite_ratio * max(0, span - carried))))
    return {"tool_calls": [{"name": "replace_session_memory", "arguments": {
        "expected_revision": revision, "from": f"P{segment}", "nodes": [
            {"role": "user", "content": f"CHECKPOINT-{segment}: the parser work so far."},
            {"role": "assistant", "content": filler(f"CHECKPOINT-{segment}:", tokens, "what was decided and found")}]}},
        finish]}


#: how stock compaction-basic's summary instruction begins (both hosts)
STOCK_INSTRUCTION = "You are now acting as a compaction engine"


def stock_summary(messages: Sequence[Mapping[str, Any]], sc: Scenario) -> dict[str, Any] | None:
    """Stock compaction-basic's summary request is answered with `summary_tokens` of summary
    that ends with the user's current request, as a real one does ("Current Work"): a summary
    that folds the open turn's request still lets the agent's script find its turn."""
    last = _text(messages[-1].get("content")) if messages else ""
    if STOCK_INSTRUCTION not in last:
        return None
    current = [m.group(0) for msg in messages for m in re.finditer(r"Task \d+:[^\n]*", _text(msg.get("content")))
               if msg.get("role") == "user"]
    tail = f"\n## Current Work\n- {current[-1]}" if current else ""
    size = max(1, sc.summary_tokens - pm.tokens(tail))
    return {"text": filler("STOCK-SUMMARY:", size, "what the session did so far") + tail}


def script(fake: Any, sc: Scenario) -> None:
    for k in range(1, sc.turns + 2):
        fake.add_rule({"last_user_contains": f"Task {k}:", "tools_exclude": ["replace_turn_nodes", "replace_session_memory"]},
                      replies=agent_replies(k, sc), name=f"agent{k}")
    # stock compaction-basic's summary request ends with its instruction (the compact header is
    # DeepSeek's route's only: a generic route sends it as an ordinary request)
    fake.responder = lambda req: stock_summary(req.messages, sc) or worker_reply(req.messages, req.tool_names, sc)
