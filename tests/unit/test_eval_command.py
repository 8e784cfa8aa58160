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


def test_a_paid_run_prints_its_estimate_and_needs_yes(capsys, monkeypatch, no_dsh):
    monkeypatch.setenv("MY_KEY", "sk-test")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code, out, err = run(capsys, "--api-key-env", "MY_KEY", "--model", "m1")
    assert code == 2 and out == ""
    estimate, refusal = err.splitlines()
    # the figures docs/eval.md quotes for the shipped suite (the arithmetic: test_eval_measures)
    assert estimate == ("turn-memory eval: 5 scenario(s) x 2 engines on m1 at https://api.deepseek.com: about 389 "
                        "requests, 3,709,781 prompt tokens (2,659,074 expected from the provider's cache), 139,879 "
                        "output tokens; about $0.43 at DeepSeek list prices, as the compression policy will handle "
                        "these turns (at most $1.67, 562 requests: a worker for every turn, no cache hits; a retried "
                        "request is billed again)")
    assert refusal.startswith("turn-memory eval: error: this run would spend about $")
    assert refusal.endswith("and no one confirmed it; nothing was run (fix: add --yes, or try --model scripted first)")


def test_declining_at_the_prompt_runs_nothing(capsys, monkeypatch, no_dsh):
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

    def engine(name: str, on_surface: tuple[bool, bool], scores: tuple[float, float], surface: int) -> EngineResult:
        checks = [FactCheck(f, True, s, rank) for f, s, rank in zip(facts, on_surface, (1, 4))]
        probes = [ProbeResult(Probe("p1", "recall", "q", "r", ("a",)), "ans", score=scores[0], usage=[Usage(1000, 10, 500)],
                              judge_usage=Usage(200, 20)),
                  ProbeResult(Probe("p2", "decision", "q", "r", ("b",)), "ans", score=scores[1], usage=[Usage(1000, 10)])]
        held = "held by the policy: below turns.minTurnTokens (600) together"
        stats = ProtocolStats(10, 4, 3, 8, [(3, "no-op: below turns.minTurnTokens (600)"), (8, held), (9, held),
                                            (10, held)], Counter({"cannot finish yet": 2}), held=[8, 9, 10],
                              folded=[1, 2, 3, 8]) if name == "turn-memory" else None
        return EngineResult(name, 12.0, [], Snapshot({}, [], [], 5000, surface), checks,
                            {"summary" if name == "stock" else "turn-worker": [Usage(4000, 100, 1000)]}, None, stats, probes)

    result = ScenarioResult(scenario)
    result.engines = {"stock": engine("stock", (True, False), (1.0, 2.0), 600),
                      "turn-memory": engine("turn-memory", (False, True), (5.0, 4.0), 900)}
    return [result]


def test_the_table_puts_both_engines_side_by_side():
    out = render(result_json(_result(), {"host": "0.2.1-rc.2", "model": "scripted", "scripted": True,
                                         "retried": {"probe": 1, "turn-worker": 2}, "estimate": {
                                             "cost_usd": 0.0031, "requests": 9, "at_most": {"cost_usd": 0.012,
                                                                                             "requests": 14}}}))
    lines = out.splitlines()
    assert lines[0] == "turn-memory eval · DSH 0.2.1-rc.2 · model scripted"
    assert lines[1].startswith("(scripted model: ") and lines[1].endswith("they measure the plumbing, not a model)")
    table = lines[lines.index("                                   stock  turn-memory"):][:13]
    assert table == [
        "                                   stock  turn-memory",
        "  probe score: recall               1.00         5.00",
        "  probe score: artifact trail          —            —",
        "  probe score: continuation            —            —",
        "  probe score: decision             2.00         4.00",
        "  probe score: overall              1.50         4.50",
        "  facts on final surface         1/2 50%      1/2 50%",
        "  facts via history search (@5)        —     2/2 100%",
        "  final surface tokens               600          900",
        "  compression                        88%          82%",
        "  memory + probe requests              4            4",
        "  cost (USD, DeepSeek prices)     0.0014       0.0014",
        ("  worker protocol: 3 of 4 attempted turns landed (10 turns), 2.0 requests per attempted turn; refusals: "
         "cannot finish yet 2; not compressed: turn 3 (no-op: below turns.minTurnTokens (600)); turns 8-10 (held by the "
         "policy: below turns.minTurnTokens (600) together); folded into a session checkpoint: turns 1-3, 8"),
    ]
    assert "  history search over 2 planted facts: recall@1 50% (1), recall@5 100% (2), first page 100%" in lines
    # usage of each engine: 2 probe answers, 1 judge, 1 memory request; priced hits 0.028, misses 0.28, output 0.42 per M
    assert lines[-3:] == [
        ("  total: 8 provider requests, 12,400 prompt tokens (3,000 cached), 280 output, $0.0028 at DeepSeek list prices "
         "(scripted: heuristic tokens, nothing was spent)"),
        ("  retried: 3 request(s) (probe 1, turn-worker 2): a provider bills a retried request again if it had begun it; "
         "not in the cost above"),
        "  estimated before the run: $0.0031 (9 requests), at most $0.0120 (14)"]


def test_the_json_has_a_scenarios_list_with_both_engines_and_an_overall_object():
    out = result_json(_result(), {"host": "0.2.1-rc.2", "model": "scripted", "scripted": True})
    json.dumps(out)  # serializable as it is
    (scenario,) = out["scenarios"]
    assert sorted(scenario["engines"]) == ["stock", "turn-memory"]
    assert scenario["history_search"] == {"facts": 2, "recall_at_1": 0.5, "recall_at_5": 1.0, "first_page": 1.0,
                                          "at_1": 1, "at_5": 2, "ranks": {"a": 1, "b": 4}}
    tm = scenario["engines"]["turn-memory"]
    assert tm["probe_scores"] == {"recall": 5.0, "artifact": None, "continuation": None, "decision": 4.0, "overall": 4.5}
    assert tm["usage"]["by_purpose"] == {"judge": 1, "probe": 2, "turn-worker": 1}
    assert tm["protocol"]["refusals"] == {"cannot finish yet": 2}
    assert out["overall"]["history_search"]["recall_at_5"] == 1.0
    assert out["overall"]["turn-memory"]["probe_scores"]["overall"] == 4.5


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
                        "[1/1] dashboard-screenshot: stock mean probe score 4.00",
                        "[1/1] dashboard-screenshot: turn-memory mean probe score 4.00"]


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
