"""The session benchmark's table: medians over runs, ratios to stock, targets and verdicts. Pure."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Iterable, Mapping, Sequence

from session_analysis import LANDING_MODES, WORKER_KINDS, median
from session_scenarios import Scenario

VARIANTS = ("turn-memory", "stock")


def scenario_of(data: Mapping[str, Any]) -> Scenario:
    known = {f.name for f in fields(Scenario)}
    tuples = {"targets": lambda v: tuple(tuple(t) for t in v), "calls_range": tuple, "result_kb": tuple}
    return Scenario(**{k: tuples[k](v) if k in tuples else v for k, v in data.items() if k in known})


def turn_keys(by_turn: Mapping[Any, Any]) -> dict[int, Any]:
    """Per-turn figures keyed by turn (a saved run's JSON keys them by the turn's string)."""
    return {int(k): v for k, v in by_turn.items()}


def summarise(runs: Mapping[str, Sequence[Mapping[str, Any]]], sc: Scenario) -> dict[str, Any]:
    def turn_mean(r: Mapping[str, Any]) -> float | None:
        ms = [m for m in r["turn_ms"] if m is not None]
        return sum(ms) / len(ms) if ms else None

    def get(key: str, default: Any = None) -> Callable[[Mapping[str, Any]], Any]:
        return lambda r: r.get(key, default)

    s: dict[str, Any] = {}
    for v, rs in runs.items():
        n_turns = max((len(r["turn_ms"]) for r in rs), default=0)
        decided = [r.get("decisions") or {} for r in rs]
        s[v] = {
            **{key: median(get(key)(r) for r in rs) for key in (
                "cost_usd", "hit_ratio", "worker_share", "final_request_tokens", "peak_request_tokens", "floor_usd",
                "wall_s", "prefix_rewrites", "agent_miss_tokens", "host_warnings", "tool_tokens",
                "turn_alone_peak_tokens")},
            "turn_ms": median(turn_mean(r) for r in rs),
            "turn_ms_by_turn": [median(r["turn_ms"][k] if k < len(r["turn_ms"]) else None for r in rs)
                                for k in range(n_turns)],
            "requests": {k: median(r["requests"].get(k, 0) for r in rs)
                         for k in sorted({k for r in rs for k in r["requests"]})},
            "landed_worker": median(len(r["landed"]["worker"]) for r in rs),
            "landed_no_worker": median(len(r["landed"]["no_worker"]) for r in rs),
            **{f"landed_{mode}": median(len((r.get("landing_modes") or {}).get(mode, [])) for r in rs)
               for mode in LANDING_MODES},
            "job_start_turn1_ms": median(turn_keys(r["job_start_ms"]).get(1) for r in rs),
            "job_start_later_ms": median(v for r in rs for k, v in turn_keys(r["job_start_ms"]).items() if k > 1),
            "raw_next": median(len(r["raw_in_next_first_request"]) for r in rs),
            "raw_two_later": median(len(r["raw_two_turns_later"]) for r in rs),
            "eligible": median(len(d.get("eligible", [])) for d in decided) if decided else None,
            "eligible_raw_two_later": median(len(set(r["raw_two_turns_later"]) & set((r.get("decisions") or {})
                                                                                     .get("eligible", [])))
                                             for r in rs),
            "held_then_compressed": median(len(d.get("held_then_compressed", [])) for d in decided),
            "held_at_end": median(len(d.get("held", [])) for d in decided),
            "compactions": median(len(r.get("compactions", [])) for r in rs),
            "worker_kinds": {kind: {key: median((r.get("worker_kinds") or {}).get(kind, {}).get(key, 0) for r in rs)
                                    for key in ("requests", "usd")} for kind in WORKER_KINDS},
            "log_events": median((r.get("log") or {}).get("events") for r in rs),
            "log_bytes": median((r.get("log") or {}).get("bytes") for r in rs),
            "compaction_points": (rs[0].get("compactions") or []) if rs else [],
            "first_request_tokens": turn_keys(rs[0].get("first_request_tokens") or {}) if rs else {},
            "worker_s": median(w for r in rs for w in r.get("worker_seconds", [])),
            "two_turn_gap_ms": median(g for r in rs for g in r.get("two_turn_gaps_ms", [])),
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


def fmt_tokens(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def rows_for(sc: Scenario, tm: Mapping[str, Any], st: Mapping[str, Any]) -> list[list[str]]:
    targets = dict(sc.targets)

    def verdict(key: str, r: float | None) -> tuple[str, str]:
        target = targets.get(key)
        if target is None:
            return "", ""
        return f"≤ {target:.2f}×", "—" if r is None else ("ok" if r <= target + 1e-9 else "MISSED")

    def row(metric: str, key: str, a: float | None, b: float | None, fmt: Callable[[float | None], str]) -> list[str]:
        r = ratio(a, b)
        return [metric, fmt(a), fmt(b), fmt_ratio(r), *verdict(key, r)]

    def info(metric: str, a: str, b: str = "—") -> list[str]:
        return [metric, a, b, "", "", ""]

    worker_requests = tm["requests"].get("worker", 0)
    compressed = tm["landed_worker"] or 0
    floor_ratio = ratio(tm["cost_usd"], tm["floor_usd"])
    shaped = (tm["landed_in-place"] or 0) + (tm["landed_tail"] or 0)
    landed = shaped + (tm["landed_flattened"] or 0)
    rows = [
        row("total billed cost", "cost", tm["cost_usd"], st["cost_usd"], fmt_usd),
        ["  floor: an ideal worker per compressed turn", fmt_usd(tm["floor_usd"]), "", f"ours {fmt_ratio(floor_ratio)}",
         *verdict("floor", floor_ratio)],
        info("  cache hit ratio", f"{tm['hit_ratio']:.1%}", f"{st['hit_ratio']:.1%}"),
        info("  workers' share of the bill", f"{tm['worker_share']:.1%}", f"{st['worker_share']:.1%}"),
        info("  requests: agent / worker / other",
             *(f"{r.get('agent', 0):.0f} / {r.get('worker', 0):.0f} / "
               f"{sum(v for k, v in r.items() if k not in ('agent', 'worker')):.0f}" for r in (tm["requests"], st["requests"]))),
        info("  worker requests per compressed turn", "—" if not compressed else f"{worker_requests / compressed:.2f}"),
        # a worker's request starts with its own persona and tools: a fork reads the session uncached
        info("  worker requests and bill by kind", " · ".join(
            f"{kind} {k['requests']:.0f} {fmt_usd(k['usd'])}" for kind, k in tm["worker_kinds"].items()
            if k["requests"])),
        info("  agent requests that rewrote the cached prefix", *(f"{x['prefix_rewrites']:.0f}" for x in (tm, st))),
        info("  agent requests' missed tokens", *(fmt_tokens(x["agent_miss_tokens"]) for x in (tm, st))),
        info("  tool declarations in every request (tokens)", *(fmt_tokens(x["tool_tokens"]) for x in (tm, st))),
        row("final request size (tokens)", "final", tm["final_request_tokens"], st["final_request_tokens"], fmt_tokens),
        row("peak request size (tokens)", "peak", tm["peak_request_tokens"], st["peak_request_tokens"], fmt_tokens),
        # the bound for any memory that folds between turns: a turn's own growth stays until it ends
        row("  with no history at all (tools, system prompt, the open turn)", "", tm["turn_alone_peak_tokens"],
            st["peak_request_tokens"], fmt_tokens),
        info("session compactions (ours: checkpoints; stock: its lossy summary)",
             f"{tm['compactions']:.0f}", f"{st['compactions']:.0f}"),
        row("per-turn user latency (mean)", "latency", tm["turn_ms"], st["turn_ms"], fmt_s),
        row("whole-run wall time", "wall", None if tm["wall_s"] is None else tm["wall_s"] * 1e3,
            None if st["wall_s"] is None else st["wall_s"] * 1e3, fmt_s),
        info("warnings and errors the host logged", f"{tm['host_warnings']:.0f}", f"{st['host_warnings']:.0f}"),
        row("session log: events", "log", tm["log_events"], st["log_events"], fmt_tokens),
        row("  and bytes (JSON lines, before DSH compresses them)", "", tm["log_bytes"], st["log_bytes"], fmt_tokens),
        info("turns compressed with a worker / no-op, no worker / still held at the end",
             f"{compressed:.0f}/{sc.turns} / {tm['landed_no_worker']:.0f} / {tm['held_at_end'] or 0:.0f}"),
        info("  landed in place / at the tail (both keep the shape) / flattened into one user message",
             " / ".join(f"{tm[f'landed_{mode}'] or 0:.0f}" for mode in LANDING_MODES)),
        info("  compressed when they ended / held first, compressed with a later turn",
             f"{tm['eligible'] or 0:.0f} / {tm['held_then_compressed'] or 0:.0f}"),
        info("turn/end -> its worker's 1st request: turn 1 / later",
             f"{fmt_ms(tm['job_start_turn1_ms'])} / {fmt_ms(tm['job_start_later_ms'])}"),
        info("worker request (model time, median) / turn k end -> turn k+2's 1st request",
             f"{fmt_s(None if tm['worker_s'] is None else tm['worker_s'] * 1e3)} / {fmt_s(tm['two_turn_gap_ms'])}"),
        info("turns still raw in the next turn's 1st request", f"{tm['raw_next']:.0f}/{sc.turns}",
             f"{st['raw_next']:.0f}/{sc.turns}"),
        ["compressed turns that kept their user/assistant shape", f"{shaped:.0f}/{landed:.0f}", "", "",
         "all", "—" if not landed else "ok" if shaped == landed else "MISSED"],
        ["turns still raw two turns after they ended", f"{tm['raw_two_later']:.0f}/{sc.turns}", "", "",
         "≤ 10%", "ok" if tm["raw_two_later"] <= 0.1 * sc.turns else "MISSED"],
        info("  of them compressed when they ended (not held by the policy)", f"{tm['eligible_raw_two_later']:.0f}"),
    ]
    return rows


def compaction_lines(label: str, tm: Mapping[str, Any], st: Mapping[str, Any]) -> list[str]:
    """What each engine did where stock compacted: its summary, and both engines' requests around it."""
    out = []
    for who, mine, other in (("stock", st, tm), ("turn-memory", tm, st)):
        for c in mine["compaction_points"]:
            turn = c["turn"]
            size = lambda s, k: fmt_tokens(s["first_request_tokens"].get(k))  # noqa: E731
            out.append(f"{label}: {who} compacted in turn {turn}: ~{c['shadowed_tokens']:,} tokens folded into a "
                       f"~{c['summary_tokens']:,}-token summary; 1st request of turn {turn} / {turn + 1}: "
                       f"{size(mine, turn)} / {size(mine, turn + 1)} tokens ({'turn-memory' if who == 'stock' else 'stock'}: "
                       f"{size(other, turn)} / {size(other, turn + 1)})")
    return out


def table(head: list[str], rows: Iterable[list[str] | str]) -> str:
    rows = list(rows)
    cells = [r for r in rows if not isinstance(r, str)]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]

    def line(c: list[str]) -> str:
        return "  ".join(x.ljust(widths[i]) if i in (0, 5) else x.rjust(widths[i]) for i, x in enumerate(c)).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [r if isinstance(r, str) else line(r) for r in rows]
    return "\n".join(out)


def sensitivity_rows(host: Mapping[str, Any]) -> list[list[str]]:
    """The coding scenario with the scripted worker keeping more or less: how the figures move."""
    out = []
    results = host["results"]
    for res in results.values():
        sc = scenario_of(res["scenario"])
        if sc.shape != "coding" or sc.context_window:
            continue
        stock = results.get(sc.stock_name, {}).get("runs", {}).get("stock")
        if not stock:
            continue
        s = summarise({"turn-memory": res["runs"]["turn-memory"], "stock": stock}, sc)
        tm, st = s["turn-memory"], s["stock"]
        out.append([f"{host['host']} keeps {sc.rewrite_ratio:.0%}", fmt_ratio(ratio(tm["cost_usd"], st["cost_usd"])),
                    fmt_ratio(ratio(tm["cost_usd"], tm["floor_usd"])),
                    fmt_ratio(ratio(tm["final_request_tokens"], st["final_request_tokens"])),
                    fmt_ratio(ratio(tm["turn_ms"], st["turn_ms"])),
                    f"{tm['eligible_raw_two_later']:.0f}/{tm['eligible'] or 0:.0f}",
                    f"{tm['requests'].get('worker', 0) / tm['landed_worker']:.2f}" if tm["landed_worker"] else "—"])
    return sorted(out)


def report(hosts: Sequence[Mapping[str, Any]]) -> str:
    rows: list[list[str] | str] = []
    extra: list[str] = []
    sensitivity: list[list[str]] = []
    for h in hosts:
        for name, res in h["results"].items():
            sc = scenario_of(res["scenario"])
            runs = dict(res["runs"])
            if "stock" not in runs:
                runs["stock"] = h["results"].get(sc.stock_name, {}).get("runs", {}).get("stock", [])
            if not runs["stock"] or not runs.get("turn-memory"):
                continue
            s = summarise(runs, sc)
            reused = f"; stock: {sc.stock_name}'s runs" if sc.stock_of else ""
            rows.append(f"{h['host']} (DSH {h['version']}) · {name}: {sc.describe()}; median of "
                        f"{s['turn-memory']['runs']} run(s){reused}")
            rows += rows_for(sc, s["turn-memory"], s["stock"])
            extra += compaction_lines(f"{h['host']} {name}", s["turn-memory"], s["stock"])
            extra.append(f"{h['host']} {name} per-turn latency (median ms): turn-memory "
                         f"{[None if v is None else round(v) for v in s['turn-memory']['turn_ms_by_turn']]}; stock "
                         f"{[None if v is None else round(v) for v in s['stock']['turn_ms_by_turn']]}")
        sensitivity += sensitivity_rows(h)
    out = table(["metric", "turn-memory", "stock", "ratio", "target", "verdict"], rows)
    if sensitivity:
        out += "\n\nsensitivity: the coding session with the scripted worker keeping 10% / 25% / 40% of each turn\n"
        out += table(["run", "cost", "vs floor", "final request", "latency", "raw 2 later", "worker req/turn"],
                     sensitivity)
    return out + "\n\n" + "\n".join(extra)
