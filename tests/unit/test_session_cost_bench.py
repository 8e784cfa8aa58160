"""Smoke test of `bench/session_cost.py`'s pure parts: the scripted session, the per-run
analysis and the report (the DSH runs themselves are the benchmark, run by hand)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import session_cost as S  # noqa: E402
from turn_memory.devtools import price_model as pm  # noqa: E402

SC = replace(S.SCENARIOS["12x1"], turns=2, calls=2, result_tokens=500)


def test_scenarios_by_name_and_ad_hoc():
    named, adhoc = S.parse_scenarios("12x5, 7x3:250")
    assert named is S.SCENARIOS["12x5"] and ("cost", 0.7) in named.targets
    assert (adhoc.turns, adhoc.calls, adhoc.result_tokens, adhoc.ttfb_ms, adhoc.tokens_per_s) == (7, 3, 250, 600.0, 60.0)
    with pytest.raises(ValueError):
        S.parse_scenarios("nope")
    # every target the issue names is printed by some default scenario
    targets = {m for sc in S.SCENARIOS.values() for m, _ in sc.targets}
    assert targets == set(S.TARGET_METRICS)


def test_the_scripted_session_has_think_time_and_tool_output_of_the_asked_size():
    sc = replace(SC, think_ms=1500)
    assert S.tasks(sc) == [S.task(1, sc), {"sleepMs": 1500}, S.task(2, sc), {"sleepMs": 1500}, S.task(3, sc)]
    steps = S.agent_replies(1, sc)
    assert len(steps) == sc.calls + 1 and isinstance(steps[-1], str)
    command = steps[0]["tool_calls"][0]["arguments"]["command"]
    lines = int(command.split()[-1])
    assert abs(lines * S.SEQ_LINE_CHARS / pm.CHARS_PER_TOKEN - sc.result_tokens) < 5
    assert S.result_tag(1, 1) == command.split("'")[1].replace("%06g", "000001")


def task_prompt(turn: int, nodes: int) -> list[dict]:
    catalog = "\n".join(f"- n{i} · {'user' if i == 1 else 'assistant'} · human · unchanged · capacity 1 · x"
                        for i in range(1, nodes + 1))
    return [{"role": "system", "content": "editor"},
            {"role": "user", "content": f"You are now the memory editor for turn {turn} of this session.\n\n"
                                        f"Current nodes of turn {turn}:\n\n{catalog}"}]


def test_the_scripted_worker_folds_a_tool_turn_and_finishes_the_rest():
    tools = ["list_turn_nodes", "replace_turn_nodes", "finish_turn_compression"]
    reply = S.worker_reply(task_prompt(2, 5), tools, SC)
    replace_call, finish = reply["tool_calls"]
    assert (replace_call["arguments"]["from"], replace_call["arguments"]["to"], finish["name"]) == \
        ("n1", "n5", "finish_turn_compression")
    rewrite = replace_call["arguments"]["nodes"][1]["content"]
    assert pm.tokens(rewrite) == SC.rewrite_tokens() and rewrite.startswith("COMPRESSED-2")
    accepted = task_prompt(2, 5) + [{"role": "tool", "content": "Accepted: n1..n5 -> r1, r2."}]
    assert S.worker_reply(accepted, tools, SC)["tool_calls"][0]["name"] == "finish_turn_compression"
    closing = S.worker_reply(task_prompt(3, 3), tools, SC)  # the closing turn: nothing to shorten
    assert [c["name"] for c in closing["tool_calls"]] == ["finish_turn_compression"]
    assert S.worker_reply(task_prompt(2, 5), ["bash"], SC) is None  # not a worker: the agent's rules answer
    two = S.worker_reply(task_prompt(2, 5), tools, replace(SC, worker_requests=2))
    assert [c["name"] for c in two["tool_calls"]] == ["replace_turn_nodes"]


def test_the_scripted_worker_folds_every_tool_turn_of_a_batch():
    tools = ["replace_turn_nodes", "finish_turn_compression"]
    sc = replace(SC, turns=3)
    catalog = "\n\n".join(f"Turn {t}: 3 current nodes.\n" + "\n".join(
        f"- t{t}.n{i} · {'user' if i == 1 else 'assistant'} · human · unchanged · capacity 1 · x" for i in (1, 2, 3))
        for t in (2, 3, 4))
    messages = [{"role": "user", "content": f"You are now the memory editor for turns 2, 3 and 4 of this session.\n\n"
                                            f"{catalog}"}]
    calls = S.worker_reply(messages, tools, sc)["tool_calls"]
    # turn 4 is the closing turn: nothing to shorten; turns 2 and 3 are folded on their own
    assert [(c["name"], c["arguments"].get("from"), c["arguments"].get("to")) for c in calls] == [
        ("replace_turn_nodes", "t2.n1", "t2.n3"), ("replace_turn_nodes", "t3.n1", "t3.n3"),
        ("finish_turn_compression", None, None)]


def received(text: str, last_user: str, *, worker: bool = False, kind: str = "turn", t: float = 0.0) -> S.Received:
    return S.Received(kind, ["replace_turn_nodes"] if worker else ["bash"], text, 10, last_user,
                      "responder" if worker else "rule:agent1", t)


def test_the_analysis_prices_labels_and_finds_raw_turns():
    prefix = "P" * 4096
    raw1 = f"{S.result_tag(1, 1)}\n" + "x" * 2000
    reqs = [
        received(prefix + "Task 1" + raw1[:10], "Task 1: a"),
        received(prefix + "Task 1" + raw1, "Task 1: a"),
        received("W" * 2048 + raw1, "You are now the memory editor for turn 1 of", worker=True),
        received(prefix + "Task 1 compressed. Task 2", "Task 2: b"),
        received(prefix + "Task 1 compressed. Task 2 ...", "Task 2: b"),
        received(prefix + "Task 1 compressed. Task 2 ... Task 3", "Task 3: c"),
        received("title please", "t", kind="title"),
    ]
    out = S.analyse_requests(reqs, SC)
    assert out["requests"] == {"agent": 5, "worker": 1, "title": 1}
    assert 0 < out["worker_share"] < 1 and 0 < out["hit_ratio"] < 1
    assert out["final_request_tokens"] == pm.tokens(reqs[5].text)
    assert out["prefix_rewrites"] == 1  # turn 2's first request dropped turn 1's raw tail
    assert out["raw_in_next_first_request"] == [] and out["raw_two_turns_later"] == []
    assert out["wrong_replies"] == []
    stale = S.analyse_requests(reqs[:3] + [received(prefix + raw1 + "Task 3", "Task 3: c")], SC)
    assert stale["raw_two_turns_later"] == [1]
    bad = S.analyse_requests([replace(received("x", "Task 1: a"), source="default")], SC)
    assert bad["wrong_replies"] == ["agent request answered by default"]


def fake_run(variant: str, cost: float, turn_ms: list[int], wall: float) -> dict:
    return {"variant": variant, "cost_usd": cost, "hit_ratio": 0.9, "worker_share": 0.3 if variant == "turn-memory" else 0,
            "final_request_tokens": 9000 if variant == "turn-memory" else 20000, "turn_ms": turn_ms, "wall_s": wall,
            "prefix_rewrites": 3, "agent_miss_tokens": 1000, "requests": {"agent": 5, "worker": 2},
            "landed": {"worker": [1, 2], "no_worker": [3]}, "job_start_ms": {1: 50.0, 2: 40.0},
            "raw_in_next_first_request": [], "raw_two_turns_later": [], "host_warnings": 0, "problems": []}


def test_the_report_prints_every_metric_ratio_and_verdict():
    sc = S.SCENARIOS["12x1"]
    runs = {"turn-memory": [fake_run("turn-memory", 0.02, [2100, 2000], 30.0)],
            "stock": [fake_run("stock", 0.016, [2000, 2000], 29.0)]}
    summary = S.summarise(runs, sc)
    assert summary["turn-memory"]["turn_ms"] == 2050 and summary["stock"]["cost_usd"] == 0.016
    host = {"host": "rc8", "version": "0.1.0-rc.8",
            "results": {sc.name: {"scenario": S.asdict(sc), "runs": runs}}}
    text = S.report([host])
    for metric in ("total billed cost", "cache hit ratio", "workers' share of the bill", "final request size",
                   "per-turn user latency", "whole-run wall time", "still raw two turns later",
                   "warnings and errors the host logged"):
        assert metric in text
    assert "1.25×" in text and "MISSED" in text  # cost 0.02 / 0.016 against ≤ 1.00×
    assert "1.02×" in text and " ok" in text      # latency 2050 / 2000 against ≤ 1.05×
    assert "0.45×" in text                         # final request 9000 / 20000
