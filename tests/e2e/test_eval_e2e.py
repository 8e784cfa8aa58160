"""`turn-memory eval` end to end, as a user runs it from the installed wheel: the shipped
scenarios replayed through the real DSH hosts with stock compaction and with turn-memory, the
routing proxy, the probes, the scores, the table and the JSON, a paid-provider run through an
OpenAI-compatible endpoint (a scripted one on 127.0.0.1), and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from turn_memory.devtools.fake_model import FakeModel, FakeRequest, reply_usage
from turn_memory.devtools.price_model import DEEPSEEK
from turn_memory.devtools.runtime import ensure_runtime
from turn_memory.devtools.scripted_workers import worker_responder
from turn_memory.eval.scenario import load_suite
from turn_memory.prompts import render_prompt

pytestmark = pytest.mark.e2e


def run_eval(tm_cli: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tm_cli, "eval", *args], cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def engines(scenario: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return scenario["engines"]["stock"], scenario["engines"]["turn-memory"]


def test_a_scripted_eval_of_the_image_scenario_on_each_host(host_runtime, tm_cli, tmp_path):
    done = run_eval(tm_cli, tmp_path, "--model", "scripted", "--host", host_runtime.host, "--scenario",
                    "dashboard-screenshot", "--json", "--workdir", str(tmp_path / "work"))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert (result["host"], result["scripted"], result["model"]) == (host_runtime.version, True, "scripted")
    (scenario,) = result["scenarios"]
    stock, memory = engines(scenario)
    assert stock["problems"] == [] and memory["problems"] == []
    # the replay went through DSH: stock summarized once at /compact; turn-memory's default policy held every turn of
    # this short session (no rewrite would pay for itself in so few requests) and /compact folded them
    assert stock["memory_requests"] == {"summary": 1}
    assert memory["memory_requests"] == {"session-worker": 2}
    assert stock["compact"]["kind"] == memory["compact"]["kind"] == "success"
    assert memory["protocol"]["landed"] == memory["protocol"]["attempted"] == 0
    assert memory["protocol"]["refusals"] == {}  # the worker kept the screenshot's image marker
    # scripted answerer and judge: exact scores; every planted fact is in the log, found by search
    assert (stock["facts"]["on_surface"], memory["facts"]["on_surface"]) == (6, 4)
    # (the same on both hosts: the scenario, the scripted model and the tool-call ids are fixed)
    assert stock["probe_scores"]["overall"] == 1.98 and memory["probe_scores"]["overall"] == 5.0
    assert scenario["history_search"]["at_5"] == scenario["history_search"]["facts"] == 14
    assert scenario["history_search"]["at_1"] == 13
    assert memory["probes"][0]["lookups"] == [{"query": "peak 18:24 screenshot"}, {"query": "screenshot orange series"},
                                              {"turn": 1}]
    # --workdir keeps the homes and the proxy's request log
    assert (tmp_path / "work" / "dashboard-screenshot-turn-memory.requests.jsonl").is_file()


DECLARED = {s.name: s.raw_tokens for s in load_suite()}


@pytest.fixture(scope="module")
def v021():
    return ensure_runtime(host="v021")


def test_the_whole_scripted_suite(v021, tm_cli, tmp_path):
    started = time.monotonic()
    done = run_eval(tm_cli, tmp_path, "--model", "scripted", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert [s["name"] for s in result["scenarios"]] == ["checkout-timeouts", "config-refactor", "customer-migration",
                                                        "dashboard-screenshot", "latency-regression"]
    for scenario in result["scenarios"]:
        stock, memory = engines(scenario)
        assert stock["problems"] == memory["problems"] == [], scenario["name"]
        # the declared sizes the cost estimate uses are what DSH measures
        assert abs(memory["tokens"]["raw"] - DECLARED[scenario["name"]]) < 0.03 * DECLARED[scenario["name"]]
    overall = result["overall"]
    # the deterministic target: the search finds the turn of >= 95% of the planted facts in its first five results
    assert overall["history_search"] == {"facts": 115, "recall_at_1": 0.7652, "recall_at_5": 1.0, "first_page": 1.0,
                                         "at_1": 88, "at_5": 115}
    assert overall["stock"]["probe_scores"] == {"recall": 0.25, "artifact": 2.68, "continuation": 2.5, "decision": 1.11,
                                                "overall": 1.34}
    assert overall["turn-memory"]["probe_scores"] == {"recall": 5.0, "artifact": 5.0, "continuation": 5.0,
                                                      "decision": 4.44, "overall": 4.84}
    # the pressure scenario: stock had to summarize at the window's pressure on its own
    migration = next(s for s in result["scenarios"] if s["name"] == "customer-migration")
    assert engines(migration)[0]["memory_requests"] == {"summary": 1} and engines(migration)[0]["compact"] is None
    print(f"whole scripted suite: {time.monotonic() - started:.0f}s")


# -- a paid provider, played by a scripted OpenAI-compatible server ---------------------------
def provider_reply(req: FakeRequest) -> dict[str, Any] | str:
    """What a model behind an OpenAI-compatible endpoint answers to each kind of eval request."""
    worker = worker_responder(req)
    if worker is not None:
        return worker
    text = req.all_text()
    if "You are grading one answer" in text:
        return '{"score": 3, "reason": "partly right"}'
    if "Answer from what you know of this session" in text:
        return "From memory: the panel's unit was wrong."
    if req.system_text.strip() == render_prompt("thought-hints", {}).strip():
        return "- a hint"
    return "## Primary Request and Intent\n- fix the chart"


def test_a_paid_run_estimates_needs_yes_and_reports_what_the_provider_reported(v021, tm_cli, tmp_path):
    with FakeModel(responder=provider_reply) as provider:
        base_url = f"{provider.base_url}/v1"
        args = ["--base-url", base_url, "--model", "chat-model", "--judge-model", "judge-model",
                "--api-key-env", "EVAL_TEST_KEY", "--scenario", "dashboard-screenshot"]
        env = {"EVAL_TEST_KEY": "sk-eval-test"}
        refused = run_eval(tm_cli, tmp_path, *args, env=env)
        assert refused.returncode == 2 and provider.requests == []
        assert "nothing was run (fix: add --yes, or try --model scripted first)" in refused.stderr

        done = run_eval(tm_cli, tmp_path, *args, "--yes", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        received = provider.requests
    estimate = done.stderr.splitlines()[0]
    assert estimate.startswith(f"turn-memory eval: 1 scenario(s) x 2 engines on chat-model (judge judge-model) at "
                               f"{base_url}: about ")
    lines = done.stdout.splitlines()
    assert lines[0] == f"turn-memory eval · DSH {v021.version} · model chat-model (judge judge-model)"
    assert "probe score: overall 3.00 3.00" in [" ".join(line.split()) for line in lines]  # the judge gave 3 to all
    # every request went to the right model, and the usage and cost are what the provider reported,
    # priced at DeepSeek's list prices (this server reports no cache hits)
    assert len([r for r in received if r.body["model"] == "judge-model"]) == 16  # 8 probes x 2 engines
    assert {r.body["model"] for r in received} == {"chat-model", "judge-model"}
    usage = [reply_usage(r, r.reply) for r in received]
    prompt, output = sum(u["prompt_tokens"] for u in usage), sum(u["completion_tokens"] for u in usage)
    cost = (prompt * DEEPSEEK.miss + output * DEEPSEEK.output) / 1e6
    assert f"  total: {len(received)} provider requests, {prompt:,} prompt tokens (0 cached), {output:,} output, " \
           f"${cost:.4f} at DeepSeek list prices" in lines
    # nothing sent to a text-only provider carries an image
    assert not any(part.get("type") == "image_url" for r in received for m in r.messages
                   if isinstance(m.get("content"), list) for part in m["content"])


# -- Ctrl-C ---------------------------------------------------------------------------------
NUL = b"\0"


def processes_under(path: Path) -> list[str]:
    """Every live process whose command line or environment names `path` (DSH, its engine, …)."""
    found = []
    needle = str(path).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if needle in cmdline or needle in (proc / "environ").read_bytes():
                found.append(f"{proc.name}: {cmdline.replace(NUL, b' ')[:200]!r}")
        except OSError:
            continue
    return found


def test_ctrl_c_stops_cleanly_with_what_was_measured_and_leaves_no_process(v021, tm_cli, tmp_path):
    work = tmp_path / "work"
    proc = subprocess.Popen([tm_cli, "eval", "--model", "scripted", "--json", "--workdir", str(work),
                             "--scenario", "config-refactor", "--scenario", "dashboard-screenshot"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = work / "dashboard-screenshot-stock.requests.jsonl"
    deadline = time.monotonic() + 300
    while not (log.exists() and len(log.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    assert processes_under(work)  # DSH and its subprocesses are running now
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends the foreground command
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted during dashboard-screenshot (stock); the results above are complete runs; every DSH and " \
           "engine process was stopped" in err
    result = json.loads(out)
    assert result["interrupted"] == "during dashboard-screenshot (stock); the results above are complete runs"
    assert [s["name"] for s in result["scenarios"]] == ["config-refactor"]  # the complete one, both engines
    assert sorted(result["scenarios"][0]["engines"]) == ["stock", "turn-memory"]
    assert processes_under(work) == []
