"""Smoke test of the session benchmark's pure parts (bench/session_scenarios.py, session_analysis.py,
session_report.py): the scripted sessions, the per-run analysis with its floor, and the report.
The DSH runs themselves are the benchmark, run by hand."""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import session_analysis as A  # noqa: E402
import session_report as R  # noqa: E402
import session_scenarios as S  # noqa: E402
from turn_memory.devtools import price_model as pm  # noqa: E402

SC = replace(S.SCENARIOS["12x1"], turns=2, calls=2, result_tokens=500)


def test_scenarios_by_name_and_ad_hoc_and_every_target_is_printed():
    named, adhoc = S.parse_scenarios("coding, 7x3:250")
    assert named is S.SCENARIOS["coding"] and ("cost", 0.8) in named.targets and ("log", 1.5) in named.targets
    assert S.SCENARIOS["coding-30s"].think_ms == 30_000 and S.SCENARIOS["coding"].think_ms == 3000
    assert (adhoc.turns, adhoc.calls, adhoc.result_tokens, adhoc.ttfb_ms, adhoc.tokens_per_s) == (7, 3, 250, 600.0, 60.0)
    with pytest.raises(ValueError):
        S.parse_scenarios("nope")
    assert {m for sc in S.SCENARIOS.values() for m, _ in sc.targets} == set(S.TARGET_METRICS)
    # the sensitivity runs are the coding session with another keep ratio, priced against its stock runs
    assert [(S.SCENARIOS[n].rewrite_ratio, S.SCENARIOS[n].stock_name) for n in ("coding-keep10", "coding", "coding-keep40")] \
        == [(0.1, "coding"), (0.25, "coding"), (0.4, "coding")]
    assert S.SCENARIOS["long"].context_window == 128_000 and S.SCENARIOS["long"].turns == 30


def test_the_coding_plan_is_deterministic_and_spans_what_the_readme_says():
    coding = S.SCENARIOS["coding"]
    turns = S.plan(coding)
    assert turns == S.plan(replace(coding, name="again", rewrite_ratio=0.4))  # the keep ratio changes no turn
    calls = [t.calls for t in turns]
    results = [s.result_tokens for t in turns for s in t.steps]
    assert len(turns) == 20 and min(calls) >= 5 and max(calls) <= 15
    assert min(results) >= math.floor(0.2 * 1024 / 4) and max(results) <= 16 * 1024 / 4
    assert all(t.steps[0].reasoning_tokens for t in turns)  # the turn's first step thinks
    # log-uniform over 0.2-16 KB: about as many outputs under the geometric mean (1.8 KB) as over it
    assert 0.35 < sum(r < math.sqrt(0.2 * 16) * 1024 / 4 for r in results) / len(results) < 0.65
    chat = S.plan(S.SCENARIOS["chat"])
    assert all(not t.steps and 150 <= t.answer_tokens <= 500 for t in chat)


def test_the_scripted_session_has_think_time_and_tool_output_of_the_asked_size():
    sc = replace(SC, think_ms=1500)
    assert S.tasks(sc) == [S.task(1, sc), {"sleepMs": 1500}, S.task(2, sc), {"sleepMs": 1500}, S.task(3, sc)]
    steps = S.agent_replies(1, sc)
    assert len(steps) == sc.calls + 1 and isinstance(steps[-1], str)
    command = steps[0]["tool_calls"][0]["arguments"]["command"]
    lines = int(command.split()[-1])
    assert abs(lines * S.SEQ_LINE_CHARS / pm.CHARS_PER_TOKEN - sc.result_tokens) < 5
    assert S.result_tag(1, 1) == command.split("'")[1].replace("%06g", "000001")
    coding = S.SCENARIOS["coding"]
    first = S.agent_replies(1, coding)
    assert pm.tokens(first[0]["reasoning"]) == S.plan(coding)[0].steps[0].reasoning_tokens
    chat = S.agent_replies(1, S.SCENARIOS["chat"])
    assert len(chat) == 1 and chat[0]["text"].startswith(S.answer_tag(1)) and chat[0]["reasoning"]


def task_prompt(turn: int, nodes: int) -> list[dict]:
    catalog = "\n".join(f"- n{i} · {'user' if i == 1 else 'assistant'} · human · unchanged · capacity 1 · x"
                        for i in range(1, nodes + 1))
    return [{"role": "system", "content": "editor"},
            {"role": "user", "content": f"You are now the memory editor for turn {turn} of this session.\n\n"
                                        f"Current nodes of turn {turn}:\n\n{catalog}"}]


def test_the_scripted_worker_folds_a_turn_to_its_keep_ratio_and_finishes_the_rest():
    tools = ["list_turn_nodes", "replace_turn_nodes", "finish_turn_compression"]
    reply = S.worker_reply(task_prompt(2, 5), tools, SC)
    replace_call, finish = reply["tool_calls"]
    assert (replace_call["arguments"]["from"], replace_call["arguments"]["to"], finish["name"]) == \
        ("n1", "n5", "finish_turn_compression")
    rewrite = replace_call["arguments"]["nodes"][1]["content"]
    assert pm.tokens(rewrite) == S.rewrite_tokens(SC, 2) == 100 and rewrite.startswith("COMPRESSED-2")  # 10% of 2 x 500
    accepted = task_prompt(2, 5) + [{"role": "tool", "content": "Accepted: n1..n5 -> r1, r2."}]
    assert S.worker_reply(accepted, tools, SC)["tool_calls"][0]["name"] == "finish_turn_compression"
    closing = S.worker_reply(task_prompt(3, 3), tools, SC)  # the closing turn: nothing to shorten
    assert [c["name"] for c in closing["tool_calls"]] == ["finish_turn_compression"]
    assert S.worker_reply(task_prompt(2, 5), ["bash"], SC) is None  # not a worker: the agent's rules answer
    two = S.worker_reply(task_prompt(2, 5), tools, replace(SC, worker_requests=2))
    assert [c["name"] for c in two["tool_calls"]] == ["replace_turn_nodes"]
    coding = S.SCENARIOS["coding"]
    assert S.rewrite_tokens(coding, 3) == int(0.25 * sum(s.result_tokens for s in S.plan(coding)[2].steps))


def test_the_scripted_worker_folds_every_turn_of_a_batch_and_a_segment_worker_its_placeholder():
    tools = ["replace_turn_nodes", "finish_turn_compression"]
    sc = replace(SC, turns=3)
    catalog = "\n\n".join(f"Turn {t}: 3 current nodes.\n" + "\n".join(
        f"- t{t}.n{i} · {'user' if i == 1 else 'assistant'} · human · unchanged · capacity 1 · x" for i in (1, 2, 3))
        for t in (2, 3, 4))
    messages = [{"role": "user", "content": f"You are now the memory editor for turns 2, 3 and 4 of this session.\n\n"
                                            f"{catalog}"}]
    assert S.worker_turns(messages[0]["content"]) == [2, 3, 4]
    calls = S.worker_reply(messages, tools, sc)["tool_calls"]
    # turn 4 is the closing turn: nothing to shorten; turns 2 and 3 are folded on their own
    assert [(c["name"], c["arguments"].get("from"), c["arguments"].get("to")) for c in calls] == [
        ("replace_turn_nodes", "t2.n1", "t2.n3"), ("replace_turn_nodes", "t3.n1", "t3.n3"),
        ("finish_turn_compression", None, None)]
    segment = [{"role": "user", "content": "The history has 2 segments, processed in order.\n"
                                           "You are assigned segment 2; the working checkpoint is at revision 3."}]
    replace_call, finish = S.worker_reply(segment, ["replace_session_memory", "finish_session_segment"], SC)["tool_calls"]
    assert replace_call["arguments"]["expected_revision"] == 3 and replace_call["arguments"]["from"] == "P2"
    assert pm.tokens(replace_call["arguments"]["nodes"][1]["content"]) == SC.summary_tokens // 2
    assert finish["name"] == "finish_session_segment"


def test_stocks_summary_ends_with_the_users_current_request():
    """A summary that folds the open turn's request still lets the agent's script find its turn."""
    sc = S.SCENARIOS["long"]
    messages = [{"role": "user", "content": S.task(4, sc)}, {"role": "assistant", "content": "Step 1 of part 4"},
                {"role": "user", "content": S.task(5, sc)}, {"role": "user", "content": S.STOCK_INSTRUCTION + " ..."}]
    reply = S.stock_summary(messages, sc)
    assert reply["text"].endswith(f"- {S.task(5, sc)}") and "Task 4:" not in reply["text"]
    assert pm.tokens(reply["text"]) in (sc.summary_tokens, sc.summary_tokens + 1)
    assert S.stock_summary(messages[:-1], sc) is None  # an agent request: the agent's rules answer it


def received(text: str, last_user: str, *, worker: str = "", kind: str = "turn", t: float = 0.0,
             calls: list | None = None, output: int = 10) -> A.Received:
    return A.Received(kind, ["replace_turn_nodes"] if worker else ["bash"], text, output, last_user,
                      "responder" if worker else "rule:agent1", t, worker, calls or [])


def test_the_analysis_prices_labels_finds_raw_turns_and_the_floor():
    prefix = "P" * 4096
    raw1 = f"<|user|>Task 1: a{S.result_tag(1, 1)}\n" + "x" * 2000
    task = "You are now the memory editor for turn 1 of this session."
    rewrite = {"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n5", "nodes": [
        {"role": "user", "content": "Task 1."}, {"role": "assistant", "content": "y" * 400}]}}
    reqs = [
        received(prefix + "Task 1" + raw1[:10], "Task 1: a"),
        received(prefix + raw1, "Task 1: a"),
        received("W" * 2048 + raw1 + "<|user|>" + task, task, worker=task, calls=[rewrite]),
        received(prefix + "Task 1 compressed. Task 2", "Task 2: b"),
        received(prefix + "Task 1 compressed. Task 2 ...", "Task 2: b"),
        received(prefix + "Task 1 compressed. Task 2 ... Task 3", "Task 3: c"),
        received("title please", "t", kind="title"),
        replace(received(prefix + "x" * 9000 + S.STOCK_INSTRUCTION, S.STOCK_INSTRUCTION), source="responder"),
    ]
    out = A.analyse_requests(reqs, SC, compressed=[1])
    assert out["requests"] == {"agent": 5, "worker": 1, "title": 1, "summary": 1}
    assert 0 < out["worker_share"] < 1 and 0 < out["hit_ratio"] < 1
    assert out["final_request_tokens"] == pm.tokens(reqs[5].text)
    assert out["peak_request_tokens"] == pm.tokens(reqs[1].text)
    assert out["prefix_rewrites"] == 1  # turn 2's first request dropped turn 1's raw tail
    assert out["raw_in_next_first_request"] == [] and out["raw_two_turns_later"] == []
    assert out["wrong_replies"] == []
    assert out["worker_kinds"] == {"turn fork": {"requests": 1, "usd": out["cost_by_label"]["worker"]}}
    assert [A.worker_kind(received(f"{t} You start fresh", t, worker=t)) for t in (task, "You are assigned segment 1; the working checkpoint is at revision 0.")] \
        == ["turn spawn", "segment spawn"]
    # the ideal worker: the 2048 worker-prefix tokens... cached, the turn and the task uncached, the rewrite written
    (ideal,) = out["ideal_workers"]
    assert ideal == {"turn": 1, "history_tokens": 512, "turn_tokens": pm.tokens(raw1) + pm.tokens("<|user|>" + task),
                     "output_tokens": A.call_tokens(rewrite)}
    worker_cost = out["cost_by_label"]["worker"]
    ideal_cost = A.IdealWorker(**ideal).cost()
    assert out["floor_usd"] == pytest.approx(out["cost_usd"] - worker_cost + ideal_cost)
    stale = A.analyse_requests(reqs[:3] + [received(prefix + raw1 + "Task 3", "Task 3: c")], SC)
    assert stale["raw_two_turns_later"] == [1]
    bad = A.analyse_requests([replace(received("x", "Task 1: a"), source="default")], SC)
    assert bad["wrong_replies"] == ["agent request answered by default"]


def test_the_floor_of_a_spawned_turn_split_in_parts_counts_every_part_once_and_one_framing():
    """A split turn's parts each carry their own nodes: the ideal worker reads all of them, with
    one task's framing, and the worker's own prefix at the cached price. A part's second request
    (the same worker reading again) is not counted again."""
    prefix = "W" * 4096  # the worker's system prompt and tools: 1024 tokens
    framing = "You are now the memory editor for turn 2 of this session.\nYours\nis part {} of 2.\n" + "f" * 800

    def part(i: int, body: str) -> A.Received:
        task = framing.format(i) + f"\n### n{i} · tool · unchanged\n" + body
        rewrite = {"name": "replace_turn_nodes", "arguments": {"from": f"n{i}", "to": f"n{i}", "nodes": [
            {"role": "tool", "content": "z" * 200}]}}
        return received(prefix + "<|user|>" + task, task, worker=task, calls=[rewrite])

    one, two = part(1, "a" * 8000), part(2, "b" * 4000)
    again = replace(two, calls=[])
    out = A.analyse_requests([one, two, again], SC, compressed=[2])
    (ideal,) = out["ideal_workers"]
    framing_tokens = pm.tokens("<|user|>" + framing.format(2))
    assert ideal["history_tokens"] == 1024
    assert ideal["turn_tokens"] == pm.tokens(one.text[4096:]) + pm.tokens(two.text[4096:]) - framing_tokens
    assert ideal["output_tokens"] == 2 * A.call_tokens({"name": "replace_turn_nodes", "arguments": {
        "from": "n1", "to": "n1", "nodes": [{"role": "tool", "content": "z" * 200}]}})


def test_the_peak_with_no_history_keeps_the_tools_the_system_prompt_and_the_open_turn():
    head, old, open_turn = "T" * 4000 + "<|system|>" + "s" * 990, "<|user|>Task 1: a" + "x" * 8000, "<|user|>Task 2: b" + "y" * 1983
    reqs = [received(head + open_turn[:20], "Task 1: a"), received(head + old + open_turn, "Task 2: b")]
    assert A.turn_alone_tokens(reqs[1].text) == 1250 + 500
    assert A.analyse_requests(reqs, SC)["turn_alone_peak_tokens"] == 1750


def test_the_engine_log_tells_turns_compressed_when_they_ended_from_held_ones():
    lines = ["INFO turn_memory.turns: session s turn 1: held; turn 1 (900 tokens) held: ...",
             "INFO turn_memory.turns: session s turns 1, 2: compressing; turns 1, 2 (1900 tokens): saves ...",
             "INFO turn_memory.turns: session s turn 3: compressing; turn 3 (1000 tokens): saves ...",
             "INFO turn_memory.turns: session s turn 4: held; turn 4 (30 tokens) held: below ..."]
    assert A.decisions(lines) == {"eligible": [2, 3], "held_then_compressed": [1], "held": [4]}
    events = [{"type": "turn/start", "data": {"turn": 3}},
              {"type": "compaction/summary", "data": {"shadowedTokenCount": 90000, "summary": [{"type": "text",
                                                                                                 "text": "s" * 800}]}}]
    assert A.compactions(events) == [{"turn": 3, "shadowed_tokens": 90000, "summary_tokens": 200}]
    assert A.two_turn_gaps({1: 1000.0, 2: 5000.0}, {3: 9.0, 4: 20.0}) == [8000.0, 15000.0]


def test_the_landing_modes_are_read_from_the_session_log():
    """Each landed compression counted by the shape it took: node by node, a head with its
    assistant nodes appended (alone or in a block), or one user message for the whole turn."""
    from test_turn_landing import block_log, fold, land, member
    from turn_memory.host.dialects import RC8, V02
    from turn_memory.turns.landing import plan_block_landing, plan_landing
    from turn_builders import Shape

    log, turns = block_log(V02, [Shape(), Shape(), Shape()])
    flat = member(log, 2, turns[2], open_step=None)
    fold(flat, "a", "b")
    land(log, plan_landing(log, flat.editor, flat.positions, flat.ctx))  # turns 3 and 4 follow it: one message
    block = [member(log, 3, turns[3]), member(log, 4, turns[4])]
    for m in block:
        fold(m, "c", "d")
    land(log, plan_block_landing(log, block))
    assert A.landing_modes(log.events, V02) == {"in-place": [], "tail": [3, 4], "flattened": [2]}
    rc8, rc8_turns = block_log(RC8, [Shape()])
    one = member(rc8, 2, rc8_turns[2])
    fold(one, "a", "b")
    land(rc8, plan_landing(rc8, one.editor, one.positions, one.ctx))
    assert A.landing_modes(rc8.events, RC8) == {"in-place": [2], "tail": [], "flattened": []}


def fake_run(variant: str, cost: float, turn_ms: list[int], wall: float, **more) -> dict:
    tm = variant == "turn-memory"
    return {"variant": variant, "cost_usd": cost, "hit_ratio": 0.9, "worker_share": 0.3 if tm else 0,
            "final_request_tokens": 9000 if tm else 20000, "peak_request_tokens": 12000 if tm else 30000,
            "floor_usd": cost * (0.9 if tm else 1.0), "turn_ms": turn_ms, "wall_s": wall, "tool_tokens": 3000,
            "prefix_rewrites": 3, "agent_miss_tokens": 1000, "requests": {"agent": 5, "worker": 2},
            "landed": {"worker": [1, 2], "no_worker": []}, "job_start_ms": {1: 50.0, 2: 40.0},
            "landing_modes": {"in-place": [], "tail": [2], "flattened": [1]} if tm else {},
            "log": {"events": 300 if tm else 240, "bytes": 90_000 if tm else 80_000},
            "raw_in_next_first_request": [], "raw_two_turns_later": [], "host_warnings": 0, "problems": [],
            "decisions": {"eligible": [1, 2], "held_then_compressed": [], "held": []},
            "compactions": [] if tm else [{"turn": 2, "shadowed_tokens": 25000, "summary_tokens": 2000}],
            "first_request_tokens": {2: 8000, 3: 9000} if tm else {2: 26000, 3: 5000},
            "worker_seconds": [12.0], "two_turn_gaps_ms": [20000.0],
            "worker_kinds": {"turn fork": {"requests": 2, "usd": 0.0021}} if tm else {}, **more}


def test_the_report_prints_every_metric_ratio_and_verdict():
    sc = S.SCENARIOS["12x1"]
    runs = {"turn-memory": [fake_run("turn-memory", 0.024, [2100, 2000], 30.0)],
            "stock": [fake_run("stock", 0.016, [2000, 2000], 29.0)]}
    summary = R.summarise(runs, sc)
    assert summary["turn-memory"]["turn_ms"] == 2050 and summary["stock"]["cost_usd"] == 0.016
    host = {"host": "rc8", "version": "0.1.0-rc.8", "results": {sc.name: {"scenario": asdict(sc), "runs": runs}}}
    text = R.report([host])
    for metric in ("total billed cost", "floor: an ideal worker per compressed turn", "cache hit ratio",
                   "workers' share of the bill", "worker requests per compressed turn", "final request size",
                   "peak request size", "session compactions", "per-turn user latency", "whole-run wall time",
                   "still raw two turns after they ended", "warnings and errors the host logged", "tool declarations",
                   "session log: events", "kept their user/assistant shape"):
        assert metric in text
    cost = next(line for line in text.splitlines() if line.startswith("total billed cost"))
    assert "1.50×" in cost and "≤ 1.30×" in cost and "MISSED" in cost  # 0.024 / 0.016
    assert "ours 1.11×" in text  # 0.024 against its floor 0.0216
    assert "0.45×" in text and "0.40×" in text    # final 9000 / 20000, peak 12000 / 30000
    assert "stock compacted in turn 2: ~25,000 tokens folded into a ~2,000-token summary" in text
    # checkpoints are folded in the background when they pay (issue 29): no target against stock's count
    assert "turn-memory runs no session compaction where stock runs one" not in text
    modes = next(line for line in text.splitlines() if "landed in place / at the tail" in line)
    assert modes.split()[-6:] == ["0", "/", "1", "/", "1", "—"]  # stock lands nothing
    shaped = next(line for line in text.splitlines() if "kept their user/assistant shape" in line)
    assert shaped.split()[-3:] == ["1/2", "all", "MISSED"]  # one of the two landed flattened
    kinds = next(line for line in text.splitlines() if "worker requests and bill by kind" in line)
    assert "turn fork 2 $0.00210" in kinds and "spawn" not in kinds
    events = next(line for line in text.splitlines() if line.startswith("session log: events"))
    assert "300" in events and "240" in events and "1.25×" in events


def test_a_sensitivity_run_is_priced_against_the_stock_runs_of_its_scenario():
    coding, keep10 = S.SCENARIOS["coding"], S.SCENARIOS["coding-keep10"]
    results = {
        "coding": {"scenario": asdict(coding), "runs": {"turn-memory": [fake_run("turn-memory", 0.08, [9000], 200.0)],
                                                        "stock": [fake_run("stock", 0.1, [9000], 200.0)]}},
        "coding-keep10": {"scenario": asdict(keep10), "runs": {"turn-memory": [fake_run("turn-memory", 0.06, [9000],
                                                                                        200.0)]}},
    }
    text = R.report([{"host": "rc8", "version": "0.1.0-rc.8", "results": results}])
    assert "coding-keep10" in text and "stock: coding's runs" in text
    assert "rc8 keeps 10%" in text and "rc8 keeps 25%" in text
    keep10_row = next(line for line in text.splitlines() if line.startswith("rc8 keeps 10%"))
    assert "0.60×" in keep10_row  # 0.06 against coding's stock 0.10


def test_the_report_of_saved_runs_equals_the_report_of_the_runs(tmp_path):
    """`--from`: a run saved as JSON (its per-turn figures keyed by strings) prints the same table."""
    import json

    sc = S.SCENARIOS["12x1"]
    runs = {"turn-memory": [fake_run("turn-memory", 0.024, [2100, 2000], 30.0)],
            "stock": [fake_run("stock", 0.016, [2000, 2000], 29.0)]}
    host = {"host": "rc8", "version": "0.1.0-rc.8", "results": {sc.name: {"scenario": asdict(sc), "runs": runs}}}
    assert R.report([json.loads(json.dumps(host))]) == R.report([host])
