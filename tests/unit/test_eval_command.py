"""`turn-memory eval` without a DSH: what it refuses before anything runs, `--list`, and the
table and JSON it prints from measured results."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from turn_memory import cli
from turn_memory.eval import command
from turn_memory.eval.facts import FactCheck
from turn_memory.eval.measure import EngineResult, Snapshot
from turn_memory.eval.probes import ProbeResult
from turn_memory.eval.protocol_stats import ProtocolStats
from turn_memory.eval.provider import ChatRequest, Completion, Usage
from turn_memory.eval.proxy import CAPTURE_TEXT
from turn_memory.eval.report import ScenarioResult, render, result_json
from turn_memory.eval.scenario import Fact, Probe, load_suite


@pytest.fixture
def no_dsh(monkeypatch):
    """Fail the test if the command gets as far as installing or starting a DSH."""
    def refuse(**_: object) -> None:
        raise AssertionError("DSH was started")
    monkeypatch.setattr(command, "ensure_runtime", refuse)


@pytest.fixture
def reachable(monkeypatch):
    """Every provider takes a connection (the default, DeepSeek's, is out of reach here)."""
    monkeypatch.setattr(command, "unreachable", lambda base_url: None)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["eval", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_names_every_shipped_scenario_with_its_size(capsys, no_dsh):
    code, out, _ = run(capsys, "--list")
    assert code == 0
    assert out.splitlines()[0] == ("checkout-timeouts: Checkout outage: a connection leak found across logs, config and "
                                   "three source files, after two failed fixes — 20 turns, ~43,500 tokens raw, 25 facts, "
                                   "14 probes")
    assert [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")] == \
        [s.name for s in load_suite()]


def test_a_missing_key_is_a_usage_error_that_names_the_variable(capsys, monkeypatch, no_dsh):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    code, _, err = run(capsys, "--scenario", "config-refactor")
    assert code == 2
    assert err == ("turn-memory eval: error: no API key: $DEEPSEEK_API_KEY is not set (fix: export DEEPSEEK_API_KEY=<your "
                   "key>, name another variable with --api-key-env, or try --model scripted)\n")


SUITE_ESTIMATE = ("5 scenario(s) x 2 engines{where}: turn-memory's own work (turn and session workers, thought hints: "
                  "what it adds to a session): about 63 requests, $0.15; the evaluation itself (stock's summary, probe "
                  "answers, judge): about 454 requests, $0.35. In all about $0.50 at DeepSeek list prices, 517 requests, "
                  "4,658,688 prompt tokens (3,464,689 expected from the provider's cache), 173,159 output tokens, as "
                  "the compression policy will handle these turns (at most $1.93, 690 requests: a worker for every "
                  "turn, no cache hits; a retried request is billed again)")


def test_a_paid_run_prints_its_estimate_in_two_parts_and_needs_yes(capsys, monkeypatch, no_dsh, reachable):
    monkeypatch.setenv("MY_KEY", "sk-test")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code, out, err = run(capsys, "--api-key-env", "MY_KEY", "--model", "m1")
    assert code == 2 and out == ""
    estimate, refusal = err.splitlines()
    # the arithmetic: test_eval_measures; what turn-memory adds to a session apart from what the evaluation costs
    assert estimate == "turn-memory eval: " + SUITE_ESTIMATE.format(where=" on m1 at https://api.deepseek.com")
    assert refusal == ("turn-memory eval: error: this run would spend about $0.50 (at most $1.93) at DeepSeek list "
                       "prices and no one confirmed it; nothing was run (fix: add --yes, or try --model scripted first)")


def test_estimate_prints_the_same_figures_without_a_key_or_a_run(capsys, monkeypatch, no_dsh):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    code, out, err = run(capsys, "--estimate")
    assert (code, out, err) == (0, "turn-memory eval: " + SUITE_ESTIMATE.format(where="") + "\n", "")


def test_the_price_is_quoted_once_in_the_docs_and_equals_the_estimate():
    """One estimate (eval/cost.py): docs/eval.md quotes its figures for the shipped suite, the README none."""
    from pathlib import Path

    from turn_memory.eval.cost import EVALUATION, TURN_MEMORY, estimate

    bill = estimate(load_suite())
    (tm, tm_high), (ev, ev_high) = bill.part(TURN_MEMORY), bill.part(EVALUATION)
    quoted = (f"The full suite: about ${bill.cost():.2f} ({bill.expected.requests} requests): turn-memory's own work "
              f"${tm.cost():.2f} ({tm.requests} requests), the evaluation ${ev.cost():.2f} ({ev.requests}); at most "
              f"${bill.upper_bound():.2f} ({bill.high.requests} requests: turn-memory's work "
              f"${tm_high.upper_bound():.2f}, the evaluation ${ev_high.upper_bound():.2f}).")
    root = Path(__file__).resolve().parents[2]
    assert quoted == ("The full suite: about $0.50 (517 requests): turn-memory's own work $0.15 (63 requests), the "
                      "evaluation $0.35 (454); at most $1.93 (690 requests: turn-memory's work $0.54, the evaluation "
                      "$1.39).")
    assert quoted in " ".join((root / "docs" / "eval.md").read_text().split())
    readme = (root / "README.md").read_text()
    eval_section = readme[readme.index("## Measure the memory against your provider"):readme.index("## More")]
    assert "$" not in eval_section and "--estimate" in eval_section


def test_a_provider_no_connection_reaches_stops_before_the_cost_question(capsys, monkeypatch, no_dsh):
    """One line and the fix, nothing run, nothing asked; a local endpoint needs no key."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail(f"asked: {prompt}"))
    code, out, err = run(capsys, "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "local")
    assert (code, out) == (1, "")
    assert err == (f"turn-memory eval: error: cannot reach the provider at http://127.0.0.1:{port}/v1: cannot connect "
                   f"to 127.0.0.1:{port}: Connection refused; nothing was run (fix: check --base-url, that the server "
                   "runs and this machine can reach it; or try --model scripted)\n")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_local_endpoint_needs_no_key(capsys, monkeypatch, no_dsh, reachable, host):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code, _, err = run(capsys, "--base-url", f"http://{host}:8899/v1", "--model", "relay", "--scenario",
                       "dashboard-screenshot")
    # past the key: the estimate, then the refusal of an unconfirmed run
    assert code == 2 and err.startswith(f"turn-memory eval: 1 scenario(s) x 2 engines on relay at http://{host}:8899/v1: ")
    assert "no API key" not in err and "no one confirmed it" in err


def test_declining_at_the_prompt_runs_nothing(capsys, monkeypatch, no_dsh, reachable):
    monkeypatch.setenv("MY_KEY", "sk-test")
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    code, _, err = run(capsys, "--api-key-env", "MY_KEY", "--scenario", "dashboard-screenshot")
    assert code == 0 and err.splitlines()[-1] == "turn-memory eval: nothing was run"


@pytest.mark.parametrize("argv,message", [
    (["--model", "scripted", "--judge-model", "big"], "--judge-model needs a real --model (fix: leave --judge-model out"),
    (["--model", "scripted", "--scenario", "nope"], "unknown scenario(s) nope;"),
])
def test_bad_arguments_are_refused_before_anything_runs(capsys, no_dsh, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.startswith("turn-memory eval: error: ") and message in err


def test_an_empty_scenarios_folder_is_refused(capsys, no_dsh, tmp_path):
    code, _, err = run(capsys, "--model", "scripted", "--scenarios", str(tmp_path))
    assert (code, err) == (2, f"turn-memory eval: error: {tmp_path}: no scenario folders (each holds a scenario.yml) "
                              "(fix: correct the scenario file (format: docs/eval.md))\n")


def _result() -> list[ScenarioResult]:
    scenario = load_suite(only=["dashboard-screenshot"])[0]
    facts = [Fact("a", "x", 1, "decision", "x"), Fact("b", "y", 2, "artifact", "y")]
    p1, p2 = Probe("p1", "recall", "q", "r", ("a",)), Probe("p2", "decision", "q", "r", ("b",))

    def engine(name: str, on_surface: tuple[bool, bool], scores: tuple[float, float], surface: int) -> EngineResult:
        checks = [FactCheck(f, True, s, rank) for f, s, rank in zip(facts, on_surface, (1, 4))]
        probes = [ProbeResult(p1, "ans", score=scores[0], usage=[Usage(1000, 10, 500)], judge_usage=Usage(200, 20)),
                  ProbeResult(p2, "ans", score=scores[1], usage=[Usage(1000, 10)])]
        held = "held by the policy: below turns.minTurnTokens (600) together"
        stats = ProtocolStats(10, 4, 3, 8, [(3, "no-op: below turns.minTurnTokens (600)"), (8, held), (9, held),
                                            (10, held)], Counter({"cannot finish yet": 2}), held=[8, 9, 10],
                              folded=[1, 2, 3, 8]) if name == "turn-memory" else None
        result = EngineResult(name, 12.0, [], Snapshot({}, [], [], 5000, surface), checks,
                              {"summary" if name == "stock" else "turn-worker": [Usage(4000, 100, 1000)]}, None, stats,
                              probes)
        if name == "turn-memory":  # asked again with read_session_history: both answers found it (one lookup each)
            result.history_probes = [ProbeResult(p, "found", [{"query": "x"}], 5.0, usage=[Usage(1000, 10), Usage(1500, 40)],
                                                 with_history=True) for p in (p1, p2)]
        return result

    result = ScenarioResult(scenario)
    result.engines = {"stock": engine("stock", (True, False), (1.0, 2.0), 600),
                      "turn-memory": engine("turn-memory", (False, True), (2.0, 4.0), 900)}
    return [result]


PAID = {"host": "0.2.1-rc.2", "model": "m1", "scripted": False, "retried": {"probe": 1, "turn-worker": 2},
        "estimate": {"cost_usd": 0.0031, "requests": 9, "at_most": {"cost_usd": 0.012, "requests": 14},
                     "parts": {"turn_memory": {"cost_usd": 0.0011}, "evaluation": {"cost_usd": 0.002}}}}


def test_the_table_puts_both_engines_side_by_side_and_scores_memory_apart_from_history_search():
    lines = render(result_json(_result(), PAID)).splitlines()
    assert lines[0] == "turn-memory eval · DSH 0.2.1-rc.2 · model m1"
    header = "                                   stock  turn-memory"
    table = lines[lines.index(header):][:18]
    assert table == [
        header,
        "  from memory: recall               1.00         2.00",
        "  from memory: artifact trail          —            —",
        "  from memory: continuation            —            —",
        "  from memory: decision             2.00         4.00",
        "  from memory: overall              1.50         3.00",
        # what the search finds, apart: it reads the raw log, not what the memory kept
        "  with history search: overall         —         5.00",
        "  facts on final surface         1/2 50%      1/2 50%",
        "  facts via history search (@5)        —     2/2 100%",
        "  final surface tokens               600          900",
        "  compression                        88%          82%",
        # each engine's compaction (stock: its summary; turn-memory: its worker) apart from the probes and judge;
        # priced hits 0.028, misses 0.28, output 0.42 USD per M: 4,000 prompt (1,000 cached) + 100 out = $0.00091
        "  memory work: requests                1            1",
        "  memory work: USD                0.0009       0.0009",
        # stock: 2 answers and 1 judge ($0.000507); turn-memory: the same, and 2 answers with history of 2 requests
        # each (1,000 + 10 out, 1,500 + 40 out: $0.000721 an answer)
        "  evaluation: requests                 3            7",
        "  evaluation: USD                 0.0005       0.0019",
        ("  worker protocol: 3 of 4 attempted turns landed (10 turns), 2.0 requests per attempted turn; refusals: "
         "cannot finish yet 2; not compressed: turn 3 (no-op: below turns.minTurnTokens (600)); turns 8-10 (held by the "
         "policy: below turns.minTurnTokens (600) together); folded into a session checkpoint: turns 1-3, 8"),
        "",
        "overall — 1 scenario(s)",
    ]
    assert "  history search over 2 planted facts: recall@1 50% (1), recall@5 100% (2), first page 100%" in lines
    # stock's summary counts as the evaluation's: what turn-memory adds is its worker alone
    assert lines[-4:] == [
        ("  cost at DeepSeek list prices: $0.0009 (1 request(s)) for turn-memory's own work (turn and session workers, "
         "thought hints: what it adds to a session); $0.0034 (11 request(s)) for the evaluation itself (stock's "
         "summary, probe answers, judge)"),
        "  total: 12 provider requests, 17,400 prompt tokens (3,000 cached), 380 output, $0.0043",
        ("  retried: 3 request(s) (probe 1, turn-worker 2): a provider bills a retried request again if it had begun it; "
         "not in the cost above"),
        ("  estimated before the run: $0.0031 (9 requests; turn-memory's work $0.0011, the evaluation $0.0020), at most "
         "$0.0120 (14)")]
    # nothing reads as "turn-memory costs N x stock": the only cost rows say what they count
    assert not [line for line in lines if "cost" in line.split(":")[0] and "stock" in line and "×" in line]


def test_a_scripted_report_says_it_checks_the_machinery_and_shows_no_price():
    out = render(result_json(_result(), {"host": "0.2.1-rc.2", "model": "scripted", "scripted": True,
                                         "estimate": None, "retried": {}}))
    lines = out.splitlines()
    assert lines[1] == ("(scripted model: this run checks the machinery only (replay, routing, workers, landing, probes, "
                        "judging). Its numbers are exact and repeatable, and no figure here is a memory score or a "
                        "price: a scripted answer quotes every planted fact it can see, so a score says which facts "
                        "are within an ideal reader's reach, not what a model keeps; nothing was spent)")
    assert "$" not in out and "USD" not in out and "estimated" not in out
    assert "  memory work: requests                1            1" in lines
    assert lines[-1] == ("  requests: 1 for turn-memory's own work (turn and session workers, thought hints: what it "
                         "adds to a session); 11 for the evaluation itself (stock's summary, probe answers, judge); all "
                         "answered on this machine by the scripted model: nothing was spent, and no price is shown")


def test_the_json_has_a_scenarios_list_with_both_engines_and_an_overall_object():
    out = result_json(_result(), PAID)
    json.dumps(out)  # serializable as it is
    (scenario,) = out["scenarios"]
    assert sorted(scenario["engines"]) == ["stock", "turn-memory"]
    assert scenario["history_search"] == {"facts": 2, "recall_at_1": 0.5, "recall_at_5": 1.0, "first_page": 1.0,
                                          "at_1": 1, "at_5": 2, "ranks": {"a": 1, "b": 4}}
    tm, stock = scenario["engines"]["turn-memory"], scenario["engines"]["stock"]
    assert tm["probe_scores"] == {"recall": 2.0, "artifact": None, "continuation": None, "decision": 4.0, "overall": 3.0}
    assert tm["probe_scores_with_history"] == {"recall": 5.0, "artifact": None, "continuation": None, "decision": 5.0,
                                               "overall": 5.0}
    assert stock["probe_scores_with_history"] is None and stock["probes_with_history"] == []
    assert [p["lookups"] for p in tm["probes_with_history"]] == [[{"query": "x"}]] * 2
    assert tm["usage"]["by_purpose"] == {"judge": 1, "probe": 6, "turn-worker": 1}
    assert (tm["memory_work"]["by_purpose"], tm["evaluation"]["by_purpose"]) == ({"turn-worker": 1},
                                                                                  {"judge": 1, "probe": 6})
    assert stock["memory_work"]["by_purpose"] == {"summary": 1}
    assert tm["protocol"]["refusals"] == {"cannot finish yet": 2}
    overall = out["overall"]
    assert overall["history_search"]["recall_at_5"] == 1.0
    assert overall["turn-memory"]["probe_scores"]["overall"] == 3.0
    assert overall["turn-memory"]["probe_scores_with_history"]["overall"] == 5.0
    # stock's summary is the evaluation's cost: turn-memory's part is its own worker only
    assert {k: v["by_purpose"] for k, v in overall["parts"].items()} == {
        "turn_memory": {"turn-worker": 1}, "evaluation": {"judge": 2, "probe": 8, "summary": 1}}


def test_check_runs_a_users_scenario_and_names_the_fact_that_is_not_planted(capsys, no_dsh, tmp_path):
    folder = tmp_path / "mine"
    (folder / "workspace").mkdir(parents=True)
    (folder / "workspace" / "app.log").write_text("WARN disk 91% full\n")
    (folder / "scenario.yml").write_text(json.dumps({
        "title": "mine", "shape": "a test", "raw_tokens": 100, "turns": [
            {"user": "Check the log.", "steps": [{"bash": ["grep WARN app.log"]}, {"say": "The disk is 91% full."}]}],
        "facts": [{"id": "disk", "text": "WARN disk 91% full", "turn": 1, "kind": "tool-output", "query": "disk"},
                  {"id": "typo", "text": "WARN disk 19% full", "turn": 1, "kind": "tool-output", "query": "disk"}],
        "probes": [{"id": "p", "dimension": "recall", "question": "q", "reference": "r", "facts": ["disk", "typo"]}]}))
    code, out, _ = run(capsys, "--check", "--scenarios", str(folder))
    assert code == 1
    assert out == ("mine: 1 turns, ~18 tokens of text (declared raw_tokens 100), 1/2 facts planted\n"
                   "    problem: fact typo is not in turn 1's output or messages\n")


def test_a_config_the_installer_refuses_stops_the_run_with_the_installers_words(capsys, monkeypatch, tmp_path):
    from turn_memory.eval import suite
    from turn_memory.eval.session_run import RunFailed

    monkeypatch.setattr(command, "ensure_runtime", lambda **_: type("Runtime", (), {"version": "0.2.1-rc.2"})())

    def refuse(root, runtime, engine, settings):
        raise RunFailed("turn-memory install failed (2): turns.minTurnToken: unknown key (did you mean turns.minTurnTokens?)")
    monkeypatch.setattr(suite, "prepare_template", refuse)
    code, out, err = run(capsys, "--model", "scripted", "--scenario", "config-refactor", "--quiet", "--set",
                         "turns.minTurnToken=0", "--workdir", str(tmp_path / "work"))
    assert code == 2
    assert err == ("turn-memory eval: error: turn-memory install failed (2): turns.minTurnToken: unknown key (did you "
                   "mean turns.minTurnTokens?) (fix: check the --set values (turn-memory config lists every key))\n")
    assert out.splitlines()[0] == "turn-memory eval · DSH 0.2.1-rc.2 · model scripted"  # nothing measured, said so


class _RecordingProvider:
    """Answers every probe "an answer" and scores every answer 4, noting each request in `seen`."""

    label, scripted = "recorder", False

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen
        self.retried: Counter[str] = Counter()

    def complete(self, request: ChatRequest) -> Completion:
        probe = request.probe.probe
        self.seen.append(f"{request.purpose} {probe.id}")
        return Completion(text='{"score": 4, "reason": "ok"}' if request.purpose == "judge" else "an answer")


@pytest.mark.parametrize("order", ["turn-memory,stock", "stock,turn-memory"])
def test_both_engines_write_their_memory_before_any_question_and_every_answer_comes_before_any_judging(
        order, monkeypatch, tmp_path):
    """A model played by a person or relayed must not see a question before it writes the memory, nor a
    reference answer before it answers."""
    from turn_memory.eval import suite

    scenario = load_suite(only=["dashboard-screenshot"])[0]
    seen: list[str] = []

    def replay(self, scenario, engine, template, runtime):
        seen.append(f"replay {engine}")
        snapshot = Snapshot({}, [{"role": "user", "content": CAPTURE_TEXT}], [], 5000, 900)
        return EngineResult(engine, 1.0, [], snapshot, [], {}, None, None)

    monkeypatch.setattr(suite, "prepare_template", lambda root, runtime, engine, settings: root)
    monkeypatch.setattr(suite.SuiteRun, "_replay", replay)
    progress: list[str] = []
    run = suite.SuiteRun(_RecordingProvider(seen), tmp_path, [], 60, keep_logs=False, say=progress.append,
                         order=suite.ENGINE_ORDERS[order])
    run.run([scenario], runtime=None)
    first, second = order.split(",")
    probes = [f"probe {p.id}" for p in scenario.probes]
    assert seen == [f"replay {first}", f"replay {second}", *probes, *probes,
                    *[f"judge {p.id}" for p in scenario.probes] * 2]
    (result,) = run.results
    assert list(result.engines) == ["stock", "turn-memory"]  # the report's columns, whatever the order
    assert [p.score for e in result.engines.values() for p in e.probes] == [4.0] * 16
    assert progress == [f"[1/1] dashboard-screenshot: {first} replayed in 0s",
                        f"[1/1] dashboard-screenshot: {second} replayed in 0s",
                        "[1/1] dashboard-screenshot: stock mean probe score 4.00 from memory",
                        "[1/1] dashboard-screenshot: turn-memory mean probe score 4.00 from memory"]


def test_turn_memorys_waits_are_raised_to_the_replays_limit_except_what_the_user_set():
    """A slow provider's worker, hint or /compact is waited for, not skipped (the landing barrier's 30 s
    would let the next turn start with the last one raw)."""
    from turn_memory.config import config_problems
    from turn_memory.eval.session_run import eval_overrides

    assert eval_overrides(1800) == {
        "turns": {"landingBarrier": True, "landingWaitS": 1800, "workerTimeoutS": 1800, "jobTimeoutS": 1800},
        "thoughtHints": {"timeoutS": 1800},
        "compaction": {"rewriteWaitS": 1800, "workerTimeoutS": 1800, "jobTimeoutS": 3600},  # never lowered
        "engine": {"manualTimeoutMs": 1_800_000}}
    # a limit past the timers' own: the pre-step's waits stop at 700,000 s each, the shim's at 2^31 - 1 ms
    days = eval_overrides(10**7, frozenset({"turns.landingWaitS", "turns.jobTimeoutS"}))
    assert days == {"turns": {"landingBarrier": True, "workerTimeoutS": 10**7},
                    "thoughtHints": {"timeoutS": 10**7},
                    "compaction": {"rewriteWaitS": 700_000, "workerTimeoutS": 700_000, "jobTimeoutS": 10**7},
                    "engine": {"manualTimeoutMs": 2**31 - 1}}
    assert config_problems(days) == []


def test_a_scripted_run_pins_what_would_make_it_depend_on_the_clock():
    """How many workers share a turn is read off measured speeds, and side-by-side jobs finish in any order:
    a scripted run gives each turn one worker and runs one job at a time (unless the user --set them)."""
    from turn_memory.eval.session_run import eval_overrides

    assert eval_overrides(1800, scripted=True)["turns"] == {
        "landingBarrier": True, "maxParts": 1, "concurrentJobs": 1, "landingWaitS": 1800, "workerTimeoutS": 1800,
        "jobTimeoutS": 1800}
    # a key the user --set stays as the user set it (the install carries it)
    assert "concurrentJobs" not in eval_overrides(1800, frozenset({"turns.concurrentJobs"}), scripted=True)["turns"]
    assert "maxParts" not in eval_overrides(1800)["turns"]  # a real provider's run keeps the product's behaviour


def test_the_first_request_a_down_provider_fails_stops_the_replay(tmp_path):
    """No second request is sent to it, and DSH (here a stand-in that would run 30 s) is stopped at once."""
    import threading
    import time

    from turn_memory.devtools.fake_model import FakeRequest
    from turn_memory.eval.provider import ProviderDown
    from turn_memory.eval.proxy import EvalProxy
    from turn_memory.eval.session_run import run_dsh

    class Down:
        label, scripted, retried = "down", False, Counter()
        calls = 0

        def complete(self, request: ChatRequest) -> Completion:
            self.calls += 1
            raise ProviderDown("http://127.0.0.1:9/v1 m: Connection error. (after 3 attempts)", "check --base-url")

    scenario = load_suite(only=["dashboard-screenshot"])[0]
    proxy = EvalProxy(scenario, Down())
    worker = FakeRequest(0, "turn", "/v1/chat/completions", {}, {"messages": [{"role": "user", "content": "x"}], "tools": [
        {"type": "function", "function": {"name": "replace_turn_nodes", "parameters": {}}}]}, 0.0)
    assert proxy._route(worker)["status"] == 502
    assert proxy.stopped.is_set() and str(proxy.down) == "http://127.0.0.1:9/v1 m: Connection error. (after 3 attempts)"
    assert proxy._route(worker)["status"] == 502 and proxy.provider.calls == 1  # DSH's retry is not sent on

    class Home:
        workspace = tmp_path

        @staticmethod
        def env() -> dict[str, str]:
            return {"PATH": "/usr/bin:/bin"}

    started = time.monotonic()
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert run_dsh(Home(), ["sleep", "30"], 60, tmp_path, stop) is None
    assert time.monotonic() - started < 5
