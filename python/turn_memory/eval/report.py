"""The eval's result: one JSON object (`--json`) and the table printed from it. Pure.

Probe scores are 0-5 means: per dimension over that dimension's probes, overall over all
probes. The scores that compare the engines are **from memory**: each probe answered with no
tool, from what the memory kept. Turn-memory's answers **with history search** (its
read_session_history offered) are reported apart: the search reads the raw log, so a probe it
answers says nothing about what the memory kept. Fact shares count planted facts; the
history-search recall is over the same facts, searched with each fact's query over the raw
turns (the same for both engines: it reads the log, which turn-memory never changes; only
turn-memory offers the tool to the model).

Cost comes in two parts (`cost.PARTS`): what turn-memory adds to a session (its workers and
hints) and what the evaluation itself costs (stock's summary, probe answers, judge). Per
engine, "memory work" is what that engine's compaction sent (turn-memory: workers, hints;
stock: its summary). The agent's own requests are replayed from the recording and never
sent, so nothing here is what a session costs. A scripted run prices nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Iterable

from turn_memory.devtools.price_model import Bill
from turn_memory.eval.cost import EVALUATION, PARTS, TURN_MEMORY as TM_PART, measured, measured_parts
from turn_memory.eval.facts import FactCheck, recall
from turn_memory.eval.measure import EngineResult
from turn_memory.eval.probes import ProbeResult
from turn_memory.eval.protocol_stats import summarize_raw, turn_ranges
from turn_memory.eval.provider import Usage
from turn_memory.eval.scenario import DIMENSION_LABELS, DIMENSIONS, Scenario
from turn_memory.eval.session_run import ENGINES, TURN_MEMORY

SCRIPTED_NOTE = ("scripted model: this run checks the machinery only (replay, routing, workers, landing, probes, "
                 "judging). Its numbers are exact and repeatable, and no figure here is a memory score or a price: "
                 "a scripted answer quotes every planted fact it can see, so a score says which facts are within an "
                 "ideal reader's reach, not what a model keeps; nothing was spent")
SCORES_NOTE = ("from memory: each probe answered with no tool, from what the memory kept (the engines' comparison); "
               "with history search: turn-memory's answers with read_session_history, which reads the raw log: "
               "what the search finds, not what the memory kept")
LEGEND = ("memory work: what each engine's compaction sent to the provider (stock: its summary; turn-memory: turn "
          "and session workers, thought hints). evaluation: the probe answers and the judge. The agent's own "
          "requests are replayed from the recording and never sent, so no figure here is what a session costs "
          "(that is README's \"What it costs\")")

@dataclass
class ScenarioResult:
    scenario: Scenario
    engines: dict[str, EngineResult] = field(default_factory=dict)

    def search_checks(self) -> list[FactCheck]:
        for engine in (TURN_MEMORY, *ENGINES):
            if engine in self.engines and self.engines[engine].facts:
                return self.engines[engine].facts
        return []


def _mean(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(mean(got), 2) if got else None


def scores_of(probes: list[ProbeResult]) -> dict[str, float | None]:
    scores = {d: _mean(p.score for p in probes if p.probe.dimension == d) for d in DIMENSIONS}
    scores["overall"] = _mean(p.score for p in probes)
    return scores


def probe_scores(results: Iterable[EngineResult]) -> dict[str, float | None]:
    """From memory: the answers given with no tool."""
    return scores_of([p for r in results for p in r.probes])


def history_scores(results: Iterable[EngineResult]) -> dict[str, float | None] | None:
    """With history search (turn-memory's read_session_history); None where it was not offered."""
    probes = [p for r in results for p in r.history_probes]
    return scores_of(probes) if probes else None


def _memory_usage(r: EngineResult) -> list[tuple[str, Usage]]:
    return [(purpose, u) for purpose, us in r.memory_usage.items() for u in us]


def _evaluation_usage(r: EngineResult) -> list[tuple[str, Usage]]:
    probes = [*r.probes, *r.history_probes]
    return [("probe", u) for p in probes for u in p.usage] + \
        [("judge", p.judge_usage) for p in probes if p.judge_usage is not None]


def _usage(results: Iterable[EngineResult]) -> list[tuple[str, Usage]]:
    return [pair for r in results for pair in (*_memory_usage(r), *_evaluation_usage(r))]


def _bill(results: Iterable[EngineResult]) -> Bill:
    return measured(_usage(results))


def _probe_json(probes: list[ProbeResult]) -> list[dict[str, Any]]:
    return [{"id": p.probe.id, "dimension": p.probe.dimension, "score": p.score, "reason": p.reason,
             "answer": p.answer, "lookups": p.lookups, "error": p.error} for p in probes]


def _share(n: int, total: int) -> float | None:
    return round(n / total, 4) if total else None


def engine_json(r: EngineResult) -> dict[str, Any]:
    snap = r.snapshot
    on_surface = sum(c.on_surface for c in r.facts)
    out: dict[str, Any] = {
        "engine": r.engine, "seconds": round(r.seconds, 1), "problems": r.problems, "notes": r.notes,
        "probe_scores": probe_scores([r]), "probe_scores_with_history": history_scores([r]),
        "facts": {"total": len(r.facts), "on_surface": on_surface, "on_surface_share": _share(on_surface, len(r.facts)),
                  "missing": [c.fact.id for c in r.facts if not c.on_surface]},
        "tokens": {"raw": snap.raw_tokens if snap else None, "final_surface": snap.surface_tokens if snap else None,
                   "compression": round(snap.compression, 4) if snap else None},
        "compact": r.compact,
        "memory_requests": {k: len(v) for k, v in sorted(r.memory_usage.items())},
        "usage": _bill([r]).to_json(),
        "memory_work": measured(_memory_usage(r)).to_json(), "evaluation": measured(_evaluation_usage(r)).to_json(),
        "probes": _probe_json(r.probes), "probes_with_history": _probe_json(r.history_probes),
    }
    if r.protocol is not None:
        out["protocol"] = r.protocol.to_json()
    return out


def recall_json(checks: list[FactCheck], ranks: bool = True) -> dict[str, Any]:
    rec = recall(checks)
    out = {"facts": rec.facts, "recall_at_1": _share(rec.at1, rec.facts), "recall_at_5": _share(rec.at5, rec.facts),
           "first_page": _share(rec.first_page, rec.facts), "at_1": rec.at1, "at_5": rec.at5}
    return {**out, "ranks": {c.fact.id: c.rank for c in checks}} if ranks else out


def scenario_json(s: ScenarioResult) -> dict[str, Any]:
    sc = s.scenario
    return {"name": sc.name, "title": sc.title, "turns": len(sc.turns), "window": sc.window, "compact": sc.compact,
            "facts": len(sc.facts), "probes": len(sc.probes),
            "engines": {e: engine_json(r) for e, r in s.engines.items()},
            "history_search": recall_json(s.search_checks())}


def overall_json(results: list[ScenarioResult]) -> dict[str, Any]:
    by_engine = {e: [s.engines[e] for s in results if e in s.engines] for e in ENGINES}
    checks = [c for s in results for c in s.search_checks()]
    out: dict[str, Any] = {"scenarios": len(results), "history_search": recall_json(checks, ranks=False)}
    for e, rs in by_engine.items():
        facts = [c for r in rs for c in r.facts]
        raw = sum(r.snapshot.raw_tokens for r in rs if r.snapshot)
        final = sum(r.snapshot.surface_tokens for r in rs if r.snapshot)
        out[e] = {"probe_scores": probe_scores(rs), "probe_scores_with_history": history_scores(rs),
                  "facts_on_surface": sum(c.on_surface for c in facts), "facts": len(facts),
                  "facts_on_surface_share": _share(sum(c.on_surface for c in facts), len(facts)),
                  "tokens": {"raw": raw, "final_surface": final, "compression": round(1 - final / raw, 4) if raw else None},
                  "usage": _bill(rs).to_json(), "memory_work": measured(u for r in rs for u in _memory_usage(r)).to_json(),
                  "evaluation": measured(u for r in rs for u in _evaluation_usage(r)).to_json(),
                  "problems": sum(len(r.problems) for r in rs)}
    all_runs = [r for rs in by_engine.values() for r in rs]
    out["usage"] = _bill(all_runs).to_json()
    out["parts"] = {name: bill.to_json() for name, bill in measured_parts(_usage(all_runs)).items()}
    return out


def result_json(results: list[ScenarioResult], meta: dict[str, Any]) -> dict[str, Any]:
    return {**meta, "scenarios": [scenario_json(s) for s in results], "overall": overall_json(results)}


# -- the table --------------------------------------------------------------------------------
def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


def _rows(engines: dict[str, dict[str, Any]], history: dict[str, Any], overall: bool,
          scripted: bool) -> list[tuple[str, list[str]]]:
    rows: list[tuple[str, list[str]]] = []
    get = {e: engines.get(e) for e in ENGINES}
    for d in (*DIMENSIONS, "overall"):
        rows.append((f"from memory: {DIMENSION_LABELS.get(d, d)}", [_num(g["probe_scores"][d]) if g else "—"
                                                                    for g in get.values()]))
    searched = [(g or {}).get("probe_scores_with_history") for g in get.values()]
    if any(searched):
        rows.append(("with history search: overall", [_num(h["overall"]) if h else "—" for h in searched]))
    if overall:
        rows.append(("facts on final surface", [f"{g['facts_on_surface']}/{g['facts']} {_pct(g['facts_on_surface_share'])}" if g else "—"
                                                for g in get.values()]))
    else:
        rows.append(("facts on final surface", [f"{g['facts']['on_surface']}/{g['facts']['total']} {_pct(g['facts']['on_surface_share'])}"
                                                if g else "—" for g in get.values()]))
    search = f"{history['at_5']}/{history['facts']} {_pct(history['recall_at_5'])}" if history["facts"] else "—"
    rows.append(("facts via history search (@5)", ["—", search]))
    rows.append(("final surface tokens", [f"{g['tokens']['final_surface']:,}" if g and g["tokens"]["final_surface"] is not None else "—"
                                          for g in get.values()]))
    rows.append(("compression", [_pct(g["tokens"]["compression"]) if g else "—" for g in get.values()]))
    for key, label in (("memory_work", "memory work"), ("evaluation", "evaluation")):
        rows.append((f"{label}: requests", [str(g[key]["requests"]) if g else "—" for g in get.values()]))
        if not scripted:
            rows.append((f"{label}: USD", [f"{g[key]['cost_usd']:.4f}" if g else "—" for g in get.values()]))
    return rows


def _table(rows: list[tuple[str, list[str]]]) -> list[str]:
    width = max(len(r[0]) for r in rows)
    cols = [max(len(e), *(len(r[1][i]) for r in rows)) for i, e in enumerate(ENGINES)]
    lines = ["  " + " " * width + "  " + "  ".join(e.rjust(cols[i]) for i, e in enumerate(ENGINES))]
    lines += ["  " + label.ljust(width) + "  " + "  ".join(v.rjust(cols[i]) for i, v in enumerate(vals)) for label, vals in rows]
    return lines


def _protocol_line(p: dict[str, Any]) -> str:
    refusals = ", ".join(f"{k} {v}" for k, v in p["refusals"].items()) or "none"
    raw = summarize_raw((r["turn"], r["why"]) for r in p["raw"]) or "none"
    folded = f"; folded into a session checkpoint: {turn_ranges(p['folded'])}" if p.get("folded") else ""
    return (f"  worker protocol: {p['landed']} of {p['attempted']} attempted turns landed "
            f"({p['turns']} turns), {p['requests_per_attempted_turn']:.1f} requests per attempted turn; "
            f"refusals: {refusals}; not compressed: {raw}{folded}")


def _cost_lines(result: dict[str, Any]) -> list[str]:
    """The run's cost in its two parts, then what was estimated before it."""
    parts = result["overall"]["parts"]
    u = result["overall"]["usage"]
    if result.get("scripted"):
        return [f"  requests: {parts[TM_PART]['requests']} for {PARTS[TM_PART]}; {parts[EVALUATION]['requests']} for "
                f"{PARTS[EVALUATION]}; all answered on this machine by the scripted model: nothing was spent, "
                "and no price is shown"]
    lines = [f"  cost at DeepSeek list prices: ${parts[TM_PART]['cost_usd']:.4f} ({parts[TM_PART]['requests']} "
             f"request(s)) for {PARTS[TM_PART]}; ${parts[EVALUATION]['cost_usd']:.4f} "
             f"({parts[EVALUATION]['requests']} request(s)) for {PARTS[EVALUATION]}",
             f"  total: {u['requests']} provider requests, {u['prompt_tokens']:,} prompt tokens "
             f"({u['cached_tokens']:,} cached), {u['output_tokens']:,} output, ${u['cost_usd']:.4f}"]
    retried = result.get("retried") or {}
    if retried:
        lines.append(f"  retried: {sum(retried.values())} request(s) ("
                     + ", ".join(f"{k} {v}" for k, v in retried.items())
                     + "): a provider bills a retried request again if it had begun it; not in the cost above")
    e = result.get("estimate")
    if e:
        high = e.get("at_most")
        split = e.get("parts")
        lines.append(f"  estimated before the run: ${e['cost_usd']:.4f} ({e['requests']} requests"
                     + (f"; turn-memory's work ${split[TM_PART]['cost_usd']:.4f}, the evaluation "
                        f"${split[EVALUATION]['cost_usd']:.4f}" if split else "") + ")"
                     + (f", at most ${high['cost_usd']:.4f} ({high['requests']})" if high else ""))
    return lines


def render(result: dict[str, Any]) -> str:
    scripted = bool(result.get("scripted"))
    lines = [f"turn-memory eval · DSH {result['host']} · model {result['model']}"]
    if scripted:
        lines.append(f"({SCRIPTED_NOTE})")
    for s in result["scenarios"]:
        lines += ["", f"{s['name']} — {s['title']}",
                  f"  {s['turns']} turns, {s['facts']} planted facts, {s['probes']} probes, window {s['window']:,} tokens"
                  + (", /compact after the last turn" if s["compact"] else ", no /compact (the window's pressure)")]
        raw = next((e["tokens"]["raw"] for e in s["engines"].values() if e["tokens"]["raw"]), None)
        if raw:
            lines[-1] += f"; raw history {raw:,} tokens"
        lines += _table(_rows(s["engines"], s["history_search"], overall=False, scripted=scripted))
        tm = s["engines"].get(TURN_MEMORY)
        if tm and "protocol" in tm:
            lines.append(_protocol_line(tm["protocol"]))
        for e, r in s["engines"].items():
            lines += [f"  problem ({e}): {p}" for p in r["problems"]]
            lines += [f"  note ({e}): {n}" for n in r["notes"]]
    o = result["overall"]
    h = o["history_search"]
    lines += ["", f"overall — {o['scenarios']} scenario(s)"]
    lines += _table(_rows({e: o[e] for e in ENGINES if e in o and o[e]["facts"] + o[e]["tokens"]["raw"]}, h,
                          overall=True, scripted=scripted))
    lines.append(f"  {SCORES_NOTE}")
    if h["facts"]:
        lines.append(f"  history search over {h['facts']} planted facts: recall@1 {_pct(h['recall_at_1'])} ({h['at_1']}), "
                     f"recall@5 {_pct(h['recall_at_5'])} ({h['at_5']}), first page {_pct(h['first_page'])}")
    lines.append(f"  {LEGEND}")
    lines += _cost_lines(result)
    if result.get("interrupted"):
        lines.append(f"  interrupted: {result['interrupted']}")
    if result.get("stopped"):
        lines.append(f"  stopped: {result['stopped']}")
    return "\n".join(lines)
