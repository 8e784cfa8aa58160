"""`turn-memory eval`'s scenarios: the shipped suite is what the issue asks for, every planted fact
really is in its turn when the recorded commands run, and a broken scenario file is refused
with the file and the entry named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from turn_memory.eval.dry_run import check
from turn_memory.eval.scenario import DIMENSIONS, ScenarioError, load_scenario, load_suite, parse_scenario

SUITE = load_suite()


def test_the_shipped_suite_has_five_scenarios_of_10_to_30_turns_three_of_them_over_40k_tokens():
    assert [s.name for s in SUITE] == ["checkout-timeouts", "config-refactor", "customer-migration",
                                       "dashboard-screenshot", "latency-regression"]
    assert [len(s.turns) for s in SUITE] == [20, 14, 18, 10, 19]
    assert [s.name for s in SUITE if s.raw_tokens >= 40_000] == ["checkout-timeouts", "customer-migration",
                                                                 "latency-regression"]
    # one session with an image, one that runs into the window's pressure instead of /compact
    assert [s.name for s in SUITE if any(t.image for t in s.turns)] == ["dashboard-screenshot"]
    assert [(s.name, s.window) for s in SUITE if not s.compact] == [("customer-migration", 32_000)]


@pytest.mark.parametrize("scenario", SUITE, ids=lambda s: s.name)
def test_every_scenario_probes_all_four_dimensions_and_every_probe_checks_facts(scenario):
    assert {p.dimension for p in scenario.probes} == set(DIMENSIONS)
    assert all(p.facts for p in scenario.probes)
    assert scenario.shape and scenario.title


@pytest.mark.parametrize("scenario", SUITE, ids=lambda s: s.name)
def test_the_recorded_commands_plant_every_fact_in_its_turn(scenario):
    """Run the scenario's commands in a throwaway workspace (what `eval --check` does)."""
    result = check(scenario)
    assert [f.id for f in result.missing] == []
    assert result.too_large == []
    # the declared size (the cost estimate's input, as DSH's meter counts it: with per-message
    # overheads and the image) is near what the commands produce, counted as text only
    assert 0 <= scenario.raw_tokens - result.raw_tokens < 0.2 * scenario.raw_tokens, result.raw_tokens


def _scenario(tmp_path: Path, **changes) -> dict:
    data = {"title": "t", "shape": "s", "turns": [
        {"user": "first", "steps": [{"bash": ["echo planted-value"]}, {"say": "done"}]},
        {"user": "second", "steps": [{"say": "ok"}]}],
        "facts": [{"id": "f1", "text": "planted-value", "turn": 1, "kind": "tool-output", "query": "planted"}],
        "probes": [{"id": "p1", "dimension": "recall", "question": "q?", "reference": "r", "facts": ["f1"]}]}
    data.update(changes)
    return data


def test_a_minimal_scenario_loads_with_its_defaults(tmp_path):
    s = parse_scenario(_scenario(tmp_path), tmp_path)
    assert (s.name, s.window, s.compact, s.workspace) == (tmp_path.name, 128_000, True, None)
    assert s.turns[0].steps[0].calls[0].arguments() == {"description": "echo planted-value", "command": "echo planted-value"}
    assert check(s).missing == []


@pytest.mark.parametrize("change,message", [
    ({"turns": [{"user": "a", "steps": [{"say": "x", "bash": ["ls"]}]}]},
     "turns[0] (turn 1).steps[0]: the last step is the answer: `say` only, no `bash`"),
    ({"turns": [{"user": "a", "steps": [{"say": "x"}, {"say": "y"}]}]},
     "turns[0] (turn 1).steps[0]: only the last step may end the turn; this one makes no bash call"),
    ({"turns": [{"user": "a", "steps": [{"say": "x"}]}, {"user": "a", "steps": [{"say": "y"}]}]},
     "user message 'a' appears twice"),
    ({"turns": [{"user": "a", "image": "missing.png", "steps": [{"say": "x"}]}]}, "turns[0] (turn 1): image missing.png not found"),
    ({"turns": [{"user": "a", "steps": [{"say": "x", "run": "ls"}]}]}, "unknown key(s) run; allowed: bash, say, think"),
    ({"facts": [{"id": "f1", "text": "x", "turn": 3, "kind": "tool-output", "query": "x"}]},
     "facts[0]: turn 3 is not a turn of this scenario (1..2)"),
    ({"facts": [{"id": "f1", "text": "x", "turn": 1, "kind": "guess", "query": "x"}]}, "facts[0]: kind 'guess' is not one of"),
    ({"probes": [{"id": "p", "dimension": "recall", "question": "q", "reference": "r", "facts": ["nope"]}]},
     "probes[0]: unknown fact id(s) nope"),
    ({"probes": [{"id": "p", "dimension": "memory", "question": "q", "reference": "r", "facts": ["f1"]}]},
     "probes[0]: dimension 'memory' is not one of recall, artifact, continuation, decision"),
    ({"window": 4000}, "`window` must be a number of tokens >= 8000"),
])
def test_a_broken_scenario_is_refused_naming_the_file_and_the_entry(tmp_path, change, message):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(_scenario(tmp_path, **change), tmp_path)
    assert str(err.value).startswith(str(tmp_path / "scenario.yml"))
    assert message in str(err.value)


def test_a_folder_without_scenarios_and_an_unknown_name_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="no scenario folders"):
        load_suite(tmp_path)
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "scenario.yml").write_text(yaml.safe_dump(_scenario(tmp_path)))
    assert [s.name for s in load_suite(tmp_path)] == ["one"]
    assert [s.name for s in load_suite(tmp_path / "one")] == ["one"]  # a single scenario folder
    with pytest.raises(ScenarioError, match="unknown scenario.s. two; .* has one"):
        load_suite(tmp_path, ["two"])
    (tmp_path / "one" / "scenario.yml").write_text("turns: [")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(tmp_path / "one")
