#!/usr/bin/env python3
"""Session benchmark: cost and latency of whole DSH sessions, turn-memory vs stock compaction-basic.

`python bench/session_cost.py [--host rc8|v021|all] [--scenarios 12x5,30x1] [--runs N] [--json]`

For each scenario (turns, tool calls per turn, tool-output size, model latency, user think
time) it runs the same scripted session on the real DSH, once in a home with turn-memory
installed by the real installer and once in a stock home, alternating, and prices every
request the scripted model received with the DeepSeek-style prefix-cache price model
(`turn_memory.devtools.price_model`). It prints per scenario: total billed cost, cache hit
ratio, the workers' share of the bill, the final request's size, per-turn user-visible
latency, whole-run wall time, the ratios to stock and the targets of issue 14.

The exit status is non-zero when something failed to run (a DSH run that did not exit 0, a
turn that did not complete, a scripted reply spent on the wrong request, an engine error),
never for a missed target: the verdict column says that. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
try:
    import turn_memory  # noqa: F401
except ImportError:  # running with a Python that has not pip-installed the project
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import machine_info  # noqa: E402
from turn_memory.devtools import price_model as pm  # noqa: E402

# =========================================================================================
# scenarios
# =========================================================================================

#: the realistic model of issue 14: first byte after 600 ms, then 60 output tokens/s
REALISTIC = (600.0, 60.0)
INSTANT = (0.0, None)


@dataclass(frozen=True)
class Scenario:
    name: str
    #: tool turns; one short closing turn follows them (so the last tool turn can land)
    turns: int
    calls: int
    #: tokens of each tool result (a `seq` listing of that size)
    result_tokens: int
    ttfb_ms: float
    tokens_per_s: float | None
    think_ms: int = 0
    runs: int = 1
    #: the scripted worker's rewrite: this share of the turn's tool output, at least `min_rewrite` tokens
    rewrite_ratio: float = 0.1
    min_rewrite: int = 40
    #: model requests the scripted worker takes: 1 = replace and finish in one reply, 2 = then finish
    worker_requests: int = 1
    #: (metric, ratio bound) targets of issue 14; metric in TARGET_METRICS
    targets: tuple[tuple[str, float], ...] = ()

    @property
    def model(self) -> str:
        if not self.ttfb_ms and not self.tokens_per_s:
            return "instant"
        return f"{self.ttfb_ms:.0f} ms + {self.tokens_per_s:.0f} tok/s" if self.tokens_per_s else f"{self.ttfb_ms:.0f} ms"

    def describe(self) -> str:
        think = f", think {self.think_ms} ms" if self.think_ms else ", no think time"
        turns = (f"{self.turns} tool turns × {self.calls} call(s) × ~{self.result_tokens} tok results" if self.calls
                 else f"{self.turns} chat turns (no tool calls)")
        return f"{turns} + 1 closing turn; model {self.model}{think}"

    def rewrite_tokens(self) -> int:
        return max(self.min_rewrite, int(self.rewrite_ratio * self.calls * self.result_tokens))


TARGET_METRICS = {
    "latency": "per-turn user latency",
    "cost": "total billed cost",
    "wall": "whole-run wall time",
    "final": "final request size",
}

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("3x1", 3, 1, 1000, *REALISTIC, runs=3, targets=(("latency", 1.05),)),
    Scenario("12x1", 12, 1, 1000, *REALISTIC, runs=1,
             targets=(("latency", 1.05), ("cost", 1.0), ("final", 0.45))),
    Scenario("12x5", 12, 5, 1000, *REALISTIC, runs=1, targets=(("cost", 0.7),)),
    Scenario("30x1", 30, 1, 1000, *REALISTIC, runs=1, targets=(("cost", 0.7),)),
    Scenario("12x0", 12, 0, 0, *REALISTIC, runs=1),  # chat turns: nothing a worker could shorten
    Scenario("3x1-instant", 3, 1, 1000, *INSTANT, runs=5, targets=(("wall", 1.15),)),
)}
DEFAULT_SCENARIOS = tuple(SCENARIOS)


def parse_scenarios(spec: str) -> list[Scenario]:
    """`12x5,30x1` (known names) or ad-hoc `TURNSxCALLS[:RESULT_TOKENS]` (realistic model)."""
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
# the scripted session (pure: what the model answers)
# =========================================================================================

WORKER_TOOLS = frozenset({"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression",
                          "list_session_segments", "read_session_source", "read_session_memory",
                          "search_session_memory", "replace_session_memory", "finish_session_segment"})
SEQ_LINE_CHARS = 12  # "r12.3-000001\n"


def task(k: int, sc: Scenario) -> str:
    if k <= sc.turns:
        return f"Task {k}: make the parser handle empty input, part {k}; check the listing."
    return f"Task {k}: thanks, that is all."


def result_tag(k: int, j: int) -> str:
    """The first line of turn k's j-th tool result: proof the raw turn is still in a request."""
    return f"r{k}.{j}-000001"


def seq_command(k: int, j: int, tokens: int) -> str:
    lines = max(1, -(-tokens * pm.CHARS_PER_TOKEN // SEQ_LINE_CHARS))
    return f"seq -f 'r{k}.{j}-%06g' 1 {lines}"


def agent_replies(k: int, sc: Scenario) -> list[Any]:
    steps: list[Any] = [
        {"text": f"Step {j} of part {k}: listing the parser cases to check the empty-input path.",
         "tool_calls": [{"name": "bash", "arguments": {"command": seq_command(k, j, sc.result_tokens),
                                                       "description": f"list cases {k}.{j}"}}]}
        for j in range(1, sc.calls + 1)]
    steps.append(f"Part {k} done: parse() now returns [] on empty input; the {sc.calls} listing(s) showed every "
                 f"case r{k}.* passing, nothing else changed, and the lexer is untouched.")
    return steps


def tasks(sc: Scenario) -> list[Any]:
    out: list[Any] = []
    for k in range(1, sc.turns + 2):
        if k > 1 and sc.think_ms:
            out.append({"sleepMs": sc.think_ms})
        out.append(task(k, sc))
    return out


_TURN = re.compile(r"memory editor for turns? (\d+)")
#: a catalog line; one worker compressing a backlog sees ids prefixed by their turn (`t4.n1`)
_NODE = re.compile(r"^- ((?:t(\d+)\.)?[nr]\d+) · (user|assistant|tool) · ", re.M)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])


def worker_reply(messages: Sequence[Mapping[str, Any]], tool_names: Iterable[str], sc: Scenario) -> dict[str, Any] | None:
    """The scripted worker: folds each tool turn of its task into the request and one assistant
    node of `sc.rewrite_tokens()` tokens, then finishes; finishes a closing or chat turn unchanged."""
    names = set(tool_names)
    if "replace_turn_nodes" not in names:
        return None
    last = messages[-1] if messages else {}
    finish = {"name": "finish_turn_compression", "arguments": {}}
    if last.get("role") == "tool" and _text(last.get("content")).startswith("Accepted"):
        return {"tool_calls": [finish]}
    prompt = next((_text(m.get("content")) for m in reversed(messages)
                   if m.get("role") == "user" and _TURN.search(_text(m.get("content")))), "")
    found = _TURN.search(prompt)
    by_turn: dict[int, list[str]] = {}
    for m in _NODE.finditer(prompt):
        turn = int(m.group(2)) if m.group(2) else int(found.group(1)) if found else 0
        by_turn.setdefault(turn, []).append(m.group(1))
    replaces = []
    for k, ids in by_turn.items():
        if k < 1 or k > sc.turns or not sc.calls:
            continue  # a closing or chat turn is already as short as it usefully gets
        filler = (f"COMPRESSED-{k}: ran {sc.calls} case listing(s) for part {k}; every r{k} case passes; parse() "
                  f"returns [] on empty input. ")
        size = sc.rewrite_tokens() * pm.CHARS_PER_TOKEN
        replaces.append({"name": "replace_turn_nodes", "arguments": {"from": ids[0], "to": ids[-1], "nodes": [
            {"role": "user", "content": f"Task {k}: make the parser handle empty input, part {k}."},
            {"role": "assistant", "content": (filler * (size // len(filler) + 1))[:size]}]}})
    if not replaces:
        return {"tool_calls": [finish]}
    return {"tool_calls": replaces + [finish] if sc.worker_requests == 1 else replaces}


def script(fake: Any, sc: Scenario) -> None:
    for k in range(1, sc.turns + 2):
        replies = agent_replies(k, sc) if k <= sc.turns else ["You're welcome."]
        fake.add_rule({"last_user_contains": f"Task {k}:", "tools_exclude": ["replace_turn_nodes", "replace_session_memory"]},
                      replies=replies, name=f"agent{k}")
    fake.responder = lambda req: worker_reply(req.messages, req.tool_names, sc)


# =========================================================================================
# one run's numbers (pure: from what the model received and the session log)
# =========================================================================================

def label_of(kind: str, tool_names: Iterable[str]) -> str:
    if WORKER_TOOLS & set(tool_names):
        return "worker"
    return "agent" if kind == "turn" else kind


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

    @classmethod
    def of(cls, req: Any) -> "Received":
        return cls(req.kind, req.tool_names, pm.canonical_text(req.tools, req.messages), pm.output_tokens(req.reply),
                   req.last_user_text, req.source, req.time)


def analyse_requests(received: Sequence[Received], sc: Scenario, prices: pm.Prices = pm.DEEPSEEK) -> dict[str, Any]:
    labels = [label_of(r.kind, r.tool_names) for r in received]
    priced = pm.price([pm.Request(r.text, r.output_tokens, label) for r, label in zip(received, labels)], prices)
    total = pm.bill(priced)
    agent = [(r, p) for r, p in zip(received, priced) if p.label == "agent"]
    out: dict[str, Any] = {
        "cost_usd": total.cost_usd, "hit_ratio": total.hit_ratio, "worker_share": total.share("worker"),
        "prompt_tokens": total.prompt_tokens, "hit_tokens": total.hit_tokens, "output_tokens": total.output_tokens,
        "requests": {label: labels.count(label) for label in sorted(set(labels))},
        "cost_by_label": total.by_label,
        "final_request_tokens": agent[-1][1].prompt_tokens if agent else None,
    }
    # a request that shares less with the agent's previous request than that request's whole
    # length: something before its end was rewritten (a landing, a tool-list change, ...)
    rewrites = 0
    for (_, before), (_, now) in zip(agent, agent[1:]):
        if now.hit_tokens < before.prompt_tokens // pm.BLOCK_TOKENS * pm.BLOCK_TOKENS:
            rewrites += 1
    out["prefix_rewrites"] = rewrites
    out["agent_miss_tokens"] = sum(p.miss_tokens for _, p in agent)
    # the previous turns' raw tool output in each turn's first agent request
    first = {}
    for r, _ in agent:
        m = re.match(r"Task (\d+):", r.last_user)
        if m and int(m.group(1)) not in first:
            first[int(m.group(1))] = r.text
    raw_after = {lag: [k for k in range(1, sc.turns + 1) if sc.calls and k + lag in first
                       and result_tag(k, 1) in first[k + lag]] for lag in (1, 2)}
    out["raw_in_next_first_request"] = raw_after[1]
    out["raw_two_turns_later"] = raw_after[2]
    out["wrong_replies"] = [f"{label} request answered by {r.source}" for r, label in zip(received, labels)
                            if (label == "agent" and not r.source.startswith("rule:agent"))
                            or (label == "worker" and r.source != "responder")]
    return out


def job_starts(received: Sequence[Received], events: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """Per turn: ms from its turn/end to its worker's first request (how late the job started)."""
    ends = {e["data"]["turn"]: e["time"] for e in events if e.get("type") == "turn/end"}
    out: dict[int, float] = {}
    for r in received:
        if not (WORKER_TOOLS & set(r.tool_names)) or not _TURN.search(r.last_user):
            continue
        turns = {int(t) for t in re.findall(r"^- t(\d+)\.n1 ", r.last_user, re.M)} or {int(_TURN.search(r.last_user).group(1))}
        for turn in turns:
            if turn in ends and turn not in out:
                out[turn] = r.time * 1e3 - ends[turn]
    return out


def landed_turns(events: Iterable[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Turns whose `compression` marker landed, by whether a worker ran for them (a rewrite)
    or not (the no-op marker: the eligibility policy skipped the turn, or it had no transcript)."""
    from turn_memory.host.markers import marker_of

    out: dict[str, list[int]] = {"worker": [], "no_worker": []}
    for e in events:
        got = marker_of(dict(e))
        if got is not None and got[0] == "compression":
            workers = (e["data"].get("source") or {}).get("workers", 0)
            out["worker" if workers else "no_worker"].append(got[1])
    return {k: sorted(set(v)) for k, v in out.items()}


def engine_problems(log_file: Path) -> list[str]:
    if not log_file.exists():
        return []
    lines = log_file.read_text(errors="replace").splitlines()
    return [line for line in lines if " ERROR " in line or " CRITICAL " in line or "Traceback" in line][:3]


# =========================================================================================
# running it on the real DSH
# =========================================================================================

VARIANTS = ("turn-memory", "stock")


def run_once(template: Path, variant: str, sc: Scenario, runtime: Any, work: Path, tag: str,
             tm_overrides: Mapping[str, Any], keep: bool = False) -> dict[str, Any]:
    from turn_memory.devtools.dsh_home import DshHome
    from turn_memory.devtools.fake_model import FakeModel
    from turn_memory.install.layout import deep_merge

    root = work / tag
    shutil.copytree(template, root, symlinks=True)  # every run is a DSH process's first start after install
    home = DshHome(root, runtime, None)
    log_file = work / f"{tag}.engine.log"
    overrides = deep_merge({"engine": {"logFile": str(log_file)}}, dict(tm_overrides)) if variant == "turn-memory" else None
    timeout = 120 + (sc.turns + 1) * (sc.calls + 2) * 15
    try:
        with FakeModel(ttfb_ms=sc.ttfb_ms, tokens_per_s=sc.tokens_per_s,
                       log_path=work / f"{tag}.requests.jsonl" if keep else None) as fake:
            home.model_url = fake.base_url
            script(fake, sc)
            run = home.run(tasks(sc), engine_overrides=overrides, timeout=timeout)
            received = [Received.of(r) for r in fake.requests]
        problems: list[str] = []
        if run.returncode != 0:
            problems.append(f"dsh exited {run.returncode}: {run.stderr[-600:]}")
        turns = run.tasks()
        if [t.get("reason", {}).get("kind") for t in turns] != ["completed"] * (sc.turns + 1):
            problems.append(f"turns did not all complete: {[t.get('reason') for t in turns]}")
        try:
            _, events = home.session_log(run.session_id)
        except (StopIteration, FileNotFoundError, KeyError) as exc:
            events = []
            problems.append(f"no session log: {exc!r}")
        out = analyse_requests(received, sc)
        problems += out.pop("wrong_replies")
        if overrides:
            problems += [f"engine: {line}" for line in engine_problems(log_file)]
        out.update({"variant": variant, "wall_s": run.seconds, "turn_ms": [t.get("ms") for t in turns],
                    "landed": landed_turns(events), "job_start_ms": job_starts(received, events),
                    "host_warnings": len(run.logs()),
                    "problems": problems})
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_host(host: str, scenarios: Sequence[Scenario], runs: int | None, tm_overrides: Mapping[str, Any],
               keep: bool, say: Callable[[str], None]) -> dict[str, Any]:
    from turn_memory.devtools.dsh_home import DshHome
    from turn_memory.devtools.runtime import ensure_runtime

    runtime = ensure_runtime(host=host)
    work = Path(tempfile.mkdtemp(prefix=f"tm-bench-session-{host}-"))
    try:
        started = time.monotonic()
        templates = {"turn-memory": work / "template-tm", "stock": work / "template-stock"}
        DshHome(templates["stock"], runtime, None).create()
        DshHome(templates["turn-memory"], runtime, None).create().install_turn_memory()
        say(f"{host}: DSH {runtime.version}, homes set up in {time.monotonic() - started:.1f} s")
        results: dict[str, Any] = {}
        for sc in scenarios:
            n = runs or sc.runs
            per: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
            for i in range(n):
                for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):  # interleaved, alternating order
                    t0 = time.monotonic()
                    r = run_once(templates[variant], variant, sc, runtime, work, f"{sc.name}-{variant}-{i}", tm_overrides,
                                 keep)
                    per[variant].append(r)
                    say(f"{host} {sc.name} run {i + 1}/{n} {variant}: ${r['cost_usd']:.5f}, "
                        f"{time.monotonic() - t0:.1f} s{' PROBLEMS' if r['problems'] else ''}")
            results[sc.name] = {"scenario": asdict(sc), "runs": per}
        return {"host": host, "version": runtime.version, "results": results}
    finally:
        if keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


# =========================================================================================
# summary and report (pure)
# =========================================================================================

def med(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def summarise(runs: Mapping[str, Sequence[Mapping[str, Any]]], sc: Scenario) -> dict[str, Any]:
    s: dict[str, Any] = {}
    for v, rs in runs.items():
        def turn_mean(r: Mapping[str, Any]) -> float | None:
            ms = [m for m in r["turn_ms"] if m is not None]
            return sum(ms) / len(ms) if ms else None

        n_turns = max((len(r["turn_ms"]) for r in rs), default=0)
        s[v] = {
            "cost_usd": med(r["cost_usd"] for r in rs),
            "hit_ratio": med(r["hit_ratio"] for r in rs),
            "worker_share": med(r["worker_share"] for r in rs),
            "final_request_tokens": med(r["final_request_tokens"] for r in rs),
            "turn_ms": med(turn_mean(r) for r in rs),
            "turn_ms_by_turn": [med(r["turn_ms"][k] if k < len(r["turn_ms"]) else None for r in rs) for k in range(n_turns)],
            "wall_s": med(r["wall_s"] for r in rs),
            "prefix_rewrites": med(r["prefix_rewrites"] for r in rs),
            "agent_miss_tokens": med(r["agent_miss_tokens"] for r in rs),
            "requests": {k: med(r["requests"].get(k, 0) for r in rs) for k in sorted({k for r in rs for k in r["requests"]})},
            "landed_worker": med(len(r["landed"]["worker"]) for r in rs),
            "landed_no_worker": med(len(r["landed"]["no_worker"]) for r in rs),
            "job_start_turn1_ms": med(r["job_start_ms"].get(1) for r in rs),
            "job_start_later_ms": med(v for r in rs for k, v in r["job_start_ms"].items() if k > 1),
            "raw_next": med(len(r["raw_in_next_first_request"]) for r in rs),
            "raw_two_later": med(len(r["raw_two_turns_later"]) for r in rs),
            "host_warnings": med(r.get("host_warnings", 0) for r in rs),
            "runs": len(rs),
        }
    return s


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt_usd(v: float | None) -> str:
    return "—" if v is None else f"${v:.5f}"


def fmt_s(ms: float | None) -> str:
    return "—" if ms is None else f"{ms / 1e3:.2f} s"


def fmt_ms(ms: float | None) -> str:
    return "—" if ms is None else f"{ms:.0f} ms"


def fmt_ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def rows_for(sc: Scenario, s: Mapping[str, Any]) -> list[list[str]]:
    tm, st = s["turn-memory"], s["stock"]
    targets = dict(sc.targets)

    def row(metric: str, key: str, a: float | None, b: float | None, fmt: Callable[[float | None], str]) -> list[str]:
        r = ratio(a, b)
        target = targets.get(key)
        verdict = "" if target is None else ("—" if r is None else ("ok" if r <= target else "MISSED"))
        return [metric, fmt(a), fmt(b), fmt_ratio(r), f"≤ {target:.2f}×" if target is not None else "", verdict]

    tool_turns = sc.turns
    rows = [
        row("total billed cost", "cost", tm["cost_usd"], st["cost_usd"], fmt_usd),
        ["  cache hit ratio", f"{tm['hit_ratio']:.1%}", f"{st['hit_ratio']:.1%}", "", "", ""],
        ["  workers' share of the bill", f"{tm['worker_share']:.1%}", f"{st['worker_share']:.1%}", "", "", ""],
        ["  requests: agent / worker / other",
         *(f"{r.get('agent', 0):.0f} / {r.get('worker', 0):.0f} / "
           f"{sum(v for k, v in r.items() if k not in ('agent', 'worker')):.0f}" for r in (tm["requests"], st["requests"])),
         "", "", ""],
        ["  agent requests that rewrote the cached prefix", *(f"{x['prefix_rewrites']:.0f}" for x in (tm, st)), "", "", ""],
        ["  agent requests' missed tokens", *(f"{x['agent_miss_tokens']:,.0f}" for x in (tm, st)), "", "", ""],
        row("final request size (tokens)", "final", tm["final_request_tokens"], st["final_request_tokens"],
            lambda v: "—" if v is None else f"{v:,.0f}"),
        row("per-turn user latency (mean)", "latency", tm["turn_ms"], st["turn_ms"], fmt_s),
        row("whole-run wall time", "wall", None if tm["wall_s"] is None else tm["wall_s"] * 1e3,
            None if st["wall_s"] is None else st["wall_s"] * 1e3, fmt_s),
        ["warnings and errors the host logged", f"{tm['host_warnings']:.0f}", f"{st['host_warnings']:.0f}", "", "", ""],
        ["turn/end -> its worker's 1st request: turn 1 / later",
         f"{fmt_ms(tm['job_start_turn1_ms'])} / {fmt_ms(tm['job_start_later_ms'])}", "—", "", "", ""],
        ["tool turns landed with a worker / no-op, no worker",
         f"{tm['landed_worker']:.0f}/{tool_turns} / {tm['landed_no_worker']:.0f}", "—", "", "", ""],
    ]
    if sc.calls:
        rows += [
            ["tool turns still raw in the next turn's 1st request", f"{tm['raw_next']:.0f}/{tool_turns}",
             f"{st['raw_next']:.0f}/{tool_turns}", "", "", ""],
            ["tool turns still raw two turns later", f"{tm['raw_two_later']:.0f}/{max(0, tool_turns - 1)}",
             f"{st['raw_two_later']:.0f}/{max(0, tool_turns - 1)}", "", "0 (turn-memory)",
             "ok" if tm["raw_two_later"] == 0 else "MISSED"],
        ]
    return rows


def table(head: list[str], rows: list[list[str] | str]) -> str:
    cells = [r for r in rows if not isinstance(r, str)]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]

    def line(c: list[str]) -> str:
        return "  ".join(x.ljust(widths[i]) if i in (0, 5) else x.rjust(widths[i]) for i, x in enumerate(c)).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [r if isinstance(r, str) else line(r) for r in rows]
    return "\n".join(out)


def report(hosts: Sequence[Mapping[str, Any]]) -> str:
    rows: list[list[str] | str] = []
    extra: list[str] = []
    for h in hosts:
        for name, res in h["results"].items():
            sc = Scenario(**{**res["scenario"], "targets": tuple(tuple(t) for t in res["scenario"]["targets"])})
            s = summarise(res["runs"], sc)
            rows.append(f"{h['host']} (DSH {h['version']}) · {name}: {sc.describe()}; median of {s['stock']['runs']} run(s)")
            rows += rows_for(sc, s)
            extra.append(f"{h['host']} {name} per-turn latency (median ms): turn-memory "
                         f"{[None if v is None else round(v) for v in s['turn-memory']['turn_ms_by_turn']]}; stock "
                         f"{[None if v is None else round(v) for v in s['stock']['turn_ms_by_turn']]}")
    return table(["metric", "turn-memory", "stock", "ratio", "target", "verdict"], rows) + "\n\n" + "\n".join(extra)


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    from turn_memory.install.installer import parse_sets as parse

    return parse(pairs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", choices=["rc8", "v021", "all"], default="all", help="DSH host(s) (default: all)")
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                    help=f"comma-separated: {', '.join(SCENARIOS)}, or TURNSxCALLS[:RESULT_TOKENS] (default: all)")
    ap.add_argument("--runs", type=int, default=None, help="runs per variant and scenario (default: the scenario's)")
    ap.add_argument("--model", choices=["scenario", "instant", "realistic"], default="scenario",
                    help="model latency for every scenario (default: each scenario's own)")
    ap.add_argument("--think-ms", type=int, default=None, help="user think time between turns (default: the scenario's, 0)")
    ap.add_argument("--result-tokens", type=int, default=None, help="tokens of each tool result (default: the scenario's)")
    ap.add_argument("--rewrite-ratio", type=float, default=None, help="scripted worker's rewrite / tool output (default 0.1)")
    ap.add_argument("--worker-requests", type=int, choices=[1, 2], default=None,
                    help="scripted worker requests: 1 = replace and finish in one reply (default), 2 = then finish")
    ap.add_argument("--tm-set", action="append", default=[], metavar="KEY=VALUE",
                    help="turn-memory config for its runs, e.g. turns.minTurnTokens=0 (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the homes and engine logs (path on stderr)")
    ap.add_argument("--json", action="store_true", help="print every number as JSON instead of the table")
    ap.add_argument("--save", type=Path, default=None, help="also write every number as JSON to this file")
    args = ap.parse_args(argv)
    scenarios = parse_scenarios(args.scenarios)
    changes: dict[str, Any] = {}
    if args.model == "instant":
        changes.update(ttfb_ms=INSTANT[0], tokens_per_s=INSTANT[1])
    elif args.model == "realistic":
        changes.update(ttfb_ms=REALISTIC[0], tokens_per_s=REALISTIC[1])
    for key, value in (("think_ms", args.think_ms), ("result_tokens", args.result_tokens),
                       ("rewrite_ratio", args.rewrite_ratio), ("worker_requests", args.worker_requests)):
        if value is not None:
            changes[key] = value
    scenarios = [replace(sc, **changes) for sc in scenarios]
    tm_overrides = parse_sets(args.tm_set)
    started = time.monotonic()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    say = (lambda line: print(line, file=sys.stderr, flush=True))
    hosts, failures = [], []
    for host in (["rc8", "v021"] if args.host == "all" else [args.host]):
        try:
            h = bench_host(host, scenarios, args.runs, tm_overrides, args.keep, say)
        except Exception as exc:  # one host could not run at all: report it, go on with the other
            failures.append(f"{host}: could not run: {exc!r}")
            continue
        hosts.append(h)
        for name, res in h["results"].items():
            for v, rs in res["runs"].items():
                for i, r in enumerate(rs):
                    failures += [f"{host} {name} {v} run {i + 1}: {p}" for p in r["problems"]]
    everything = {"machine": machine_info(), "load_before": load, "tm_overrides": tm_overrides,
                  "hosts": hosts, "failures": failures, "total_s": time.monotonic() - started}
    if args.save:
        args.save.write_text(json.dumps(everything, indent=2, default=str))
    if args.json:
        print(json.dumps(everything, indent=2, default=str))
        return 1 if failures else 0
    print(f"machine: {machine_info()}" + (f"; load average {load:.2f} at start" if load is not None else ""))
    print("price model: DeepSeek-style prefix cache, 64-token units, hit $0.028 / miss $0.28 / output $0.42 per M "
          f"tokens, 4 chars per token; turn-memory config overrides: {tm_overrides or 'none'}")
    print("")
    if hosts:
        print(report(hosts))
    print(f"total {time.monotonic() - started:.0f} s")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
