"""One config path: `EngineConfig` is every key, default and bound, and what users read and
what the engine accepts cannot drift apart (README table, shim defaults, handshake refusals)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import pytest

from turn_memory.config import ConfigError, EngineConfig, ShimConfig, check_config, config_keys, config_problems
from turn_memory.config_command import TABLE_END, TABLE_START, format_default, markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHIM_DEFAULTS = ROOT / "shim-js" / "lib" / "defaults.js"
ROW = re.compile(r"^\| `([^`]+)` \| (.*?) \| (.+) \|$")


def readme_table() -> list[tuple[str, str, str]]:
    text = README.read_text(encoding="utf-8")
    assert TABLE_START in text and TABLE_END in text, "README lost its config-table markers"
    block = text[text.index(TABLE_START) + len(TABLE_START):text.index(TABLE_END)]
    rows = []
    for line in block.strip().splitlines()[2:]:  # header and rule
        found = ROW.match(line)
        assert found, f"not a key row: {line!r}"
        rows.append(found.groups())
    return rows


def test_every_key_is_in_the_readme_table_with_its_default_and_nothing_else():
    rows = readme_table()
    documented = {key: default for key, default, _ in rows}
    assert len(documented) == len(rows), "a key is listed twice"
    model = {key.name: format_default(key.default) for key in config_keys()}
    assert sorted(set(model) - set(documented)) == [], "keys the engine accepts but the README omits"
    assert sorted(set(documented) - set(model)) == [], "keys the README lists but the engine refuses"
    assert documented == model
    # the ones the README used to omit are there now
    assert {"turns.maxWorkers", "compaction.maxWorkers", "compaction.workerTimeoutS"} <= set(documented)


def test_the_readme_table_is_the_generated_one():
    text = README.read_text(encoding="utf-8")
    block = text[text.index(TABLE_START) + len(TABLE_START):text.index(TABLE_END)]
    assert block.strip() == markdown_table().strip(), \
        "README's table is stale: run `.venv/bin/turn-memory config --write-readme README.md`"


def test_every_key_has_a_description_and_every_section_forbids_unknown_keys():
    keys = list(config_keys())
    assert len(keys) > 40 and all(len(k.description) > 10 for k in keys)
    with pytest.raises(ConfigError):
        check_config({"turns": {"enabled": True, "surprise": 1}})
    assert EngineConfig.model_config.get("extra") == "forbid"


@pytest.mark.parametrize("config,message,nearest", [
    ({"turns": {"enabeld": False}}, "unknown key turns.enabeld (did you mean turns.enabled?)", "turns.enabled"),
    ({"turn": {"enabled": False}}, "unknown key turn (did you mean turns?)", "turns"),
    ({"engine": {"logfile": "/tmp/x"}}, "unknown key engine.logfile (did you mean engine.logFile?)", "engine.logFile"),
    ({"compaction": {"thresholdRatio": 1.5}}, "compaction.thresholdRatio: Input should be less than 1 (got 1.5)", None),
    ({"thoughtHints": {"baseUrl": "http://x/v1"}}, "thoughtHints.baseUrl needs thoughtHints.model", None),
    ({"turns": True}, "turns must be a mapping of keys", None),
])
def test_problems_name_the_key_and_the_nearest_valid_one(config, message, nearest):
    (problem,) = config_problems(config)
    assert message in problem.message and problem.nearest == nearest


#: what the shim passes on unchecked (shim-js/test/config.test.js: the same values); NaN and
#: infinities arrive as null, as JSON carries them
BAD_ENGINE_VALUES = [
    ("command", [], "engine.command: List should have at least 1 item after validation, not 0 (got [])"),
    ("command", "turn-memory serve", "engine.command: Input should be a valid list (got 'turn-memory serve')"),
    ("command", ["turn-memory", 1], "engine.command.1: Input should be a valid string (got 1)"),
    ("command", {}, "engine.command: Input should be a valid list (got {})"),
    ("command", None, "engine.command: Input should be a valid list (got None)"),
    ("transport", "udp", "engine.transport: Input should be 'auto', 'ipc' or 'tcp' (got 'udp')"),
    ("transport", "", "engine.transport: Input should be 'auto', 'ipc' or 'tcp' (got '')"),
    ("transport", 1, "engine.transport: Input should be 'auto', 'ipc' or 'tcp' (got 1)"),
    ("transport", "IPC", "engine.transport: Input should be 'auto', 'ipc' or 'tcp' (got 'IPC')"),
    ("transport", None, "engine.transport: Input should be 'auto', 'ipc' or 'tcp' (got None)"),
    ("logFile", 5, "engine.logFile: Input should be a valid string (got 5)"),
    ("logFile", ["a"], "engine.logFile: Input should be a valid string (got ['a'])"),
    ("logFile", False, "engine.logFile: Input should be a valid string (got False)"),
    ("startTimeoutMs", -1, "engine.startTimeoutMs: Input should be greater than or equal to 0 (got -1)"),
    ("startTimeoutMs", None, "engine.startTimeoutMs: Input should be a valid integer (got None)"),
    ("startTimeoutMs", "100", "engine.startTimeoutMs: must be a whole number (got '100')"),
    ("hookTimeoutMs", -0.5, "engine.hookTimeoutMs: Input should be a valid integer, got a number with a fractional "
                            "part (got -0.5)"),
    ("hookTimeoutMs", 1500.5, "engine.hookTimeoutMs: Input should be a valid integer, got a number with a fractional "
                              "part (got 1500.5)"),
    ("hookTimeoutMs", "2000", "engine.hookTimeoutMs: must be a whole number (got '2000')"),
    ("hookTimeoutMs", True, "engine.hookTimeoutMs: must be a whole number (got True)"),
    ("manualTimeoutMs", -1, "engine.manualTimeoutMs: Input should be greater than or equal to 0 (got -1)"),
    ("manualTimeoutMs", None, "engine.manualTimeoutMs: Input should be a valid integer (got None)"),
    ("restartDelayMs", -20, "engine.restartDelayMs: Input should be greater than or equal to 0 (got -20)"),
    ("restartDelayMs", "500", "engine.restartDelayMs: must be a whole number (got '500')"),
    ("manualTimeoutMs", 2**31, "engine.manualTimeoutMs: at most 2147483647 ms (24.8 days), the longest a Node timer "
                               "waits (got 2147483648)"),
    ("startTimeoutMs", 10**12, "engine.startTimeoutMs: at most 2147483647 ms (24.8 days), the longest a Node timer "
                               "waits (got 1000000000000)"),
    ("recycleAfterTimeouts", -1, "engine.recycleAfterTimeouts: Input should be greater than or equal to 0 (got -1)"),
    ("recycleAfterTimeouts", "3", "engine.recycleAfterTimeouts: must be a whole number (got '3')"),
]


@pytest.mark.parametrize("key, value, message", BAD_ENGINE_VALUES)
def test_each_bad_engine_value_is_refused_with_its_key(key, value, message):
    (problem,) = config_problems({"engine": {key: value}, "turns": {"enabled": True}})
    assert (problem.key.split(".")[:2], problem.message) == (["engine", key], message)


def test_every_bad_engine_value_is_named_at_once_and_a_section_that_is_no_mapping_too():
    problems = config_problems({"engine": {"command": [], "transport": "udp", "logFile": 1, "hookTimeoutMs": -1,
                                           "restartDelayMs": "x"}})
    assert [p.key for p in problems] == ["engine.command", "engine.transport", "engine.logFile",
                                         "engine.hookTimeoutMs", "engine.restartDelayMs"]
    for engine in ([], "serve", 3):
        assert [p.message for p in config_problems({"engine": engine})] == [
            f"engine must be a mapping of keys, got {engine!r}"]
    for config in ([], "turn-memory", 3, True):
        assert [p.message for p in config_problems(config)] == [f"the config must be a mapping of keys, got {config!r}"]
    # whole milliseconds written as floats (YAML `2000.0`) are still whole
    assert config_problems({"engine": {"startTimeoutMs": 2000.0, "logFile": None}}) == []


PRE_STEP_WAIT = ("at most 700000 s (8.1 days): the shim holds a step for turns.landingWaitS + compaction.rewriteWaitS "
                 "+ compaction.workerTimeoutS on one Node timer, which waits at most 24.8 days")


@pytest.mark.parametrize("config, key, got", [
    ({"turns": {"landingWaitS": 700_001}}, "turns.landingWaitS", "700001"),
    ({"compaction": {"rewriteWaitS": 1e12}}, "compaction.rewriteWaitS", "1000000000000.0"),
    ({"compaction": {"workerTimeoutS": float("inf")}}, "compaction.workerTimeoutS", "inf"),
])
def test_a_wait_the_pre_step_timer_cannot_hold_is_refused_with_its_key(config, key, got):
    (problem,) = config_problems(config)
    assert (problem.key, problem.message) == (key, f"{key}: {PRE_STEP_WAIT} (got {got})")


def test_the_longest_waits_allowed_still_fit_the_pre_step_timer():
    from turn_memory.bridge.protocol import HelloParams
    from turn_memory.bridge.server import Peer
    from turn_memory.config import NODE_TIMER_MAX_MS
    from turn_memory.engine import Engine

    longest = {"turns": {"landingBarrier": True, "landingWaitS": 700_000},
               "compaction": {"rewriteWaitS": 700_000, "workerTimeoutS": 700_000}}
    assert config_problems(longest) == []
    params = HelloParams(protocol=1, dshVersion="0.1.0-rc.8", dialect="rc8", secret="s", pid=1,
                         checkpointSource={"kind": "plugin", "plugin": "compact", "compactionId": "probe"},
                         config=longest)
    hello = asyncio.run(_hello(Engine(), Peer(b"p"), params))
    assert hello.preStepTimeoutMs == 2_100_002_000 <= NODE_TIMER_MAX_MS


async def _hello(engine, peer, params):
    return engine.on_hello(peer, params)


def test_valid_configs_pass():
    assert config_problems({}) == [] and config_problems(None) == []
    assert config_problems({"engine": {**ShimConfig().model_dump(), "logFile": "/tmp/e.log"},
                            "turns": {"enabled": False}, "compaction": {"method": "summary"}}) == []


def test_the_shim_defaults_are_the_models(node):
    """shim-js/lib/defaults.js is the shim's copy of the `engine` section's defaults."""
    script = f"import({json.dumps(SHIM_DEFAULTS.as_uri())}).then((m) => console.log(JSON.stringify(m.ENGINE_DEFAULTS)))"
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    model = {k: v for k, v in ShimConfig().model_dump().items() if v is not None}
    assert json.loads(out) == model


def test_the_engine_refuses_a_bad_engine_value_for_the_shim_to_report():
    from turn_memory.bridge.protocol import HelloParams
    from turn_memory.bridge.server import Peer, RemoteError
    from turn_memory.engine import Engine

    hello = HelloParams(protocol=1, dshVersion="0.1.0-rc.8", dialect="rc8", secret="s", pid=1,
                        checkpointSource={"kind": "plugin", "plugin": "compact", "compactionId": "probe"},
                        config={"engine": {**ShimConfig().model_dump(exclude_none=True), "transport": "udp"}})

    async def shake():
        return Engine().on_hello(Peer(b"p"), hello)

    with pytest.raises(RemoteError) as refused:
        asyncio.run(shake())
    info = refused.value.info
    assert (info.code, info.key, info.nearest) == ("config", "engine.transport", None)
    assert info.message == "invalid turn-memory config: engine.transport: Input should be 'auto', 'ipc' or 'tcp' (got 'udp')"
    assert "turn-memory install --profile NAME --unset engine.transport" in info.fix


def test_the_engine_refuses_a_typo_with_a_stable_code_and_the_fix():
    from turn_memory.bridge.protocol import HelloParams
    from turn_memory.bridge.server import Peer, RemoteError
    from turn_memory.engine import Engine

    hello = HelloParams(protocol=1, dshVersion="0.1.0-rc.8", dialect="rc8", secret="s", pid=1,
                        checkpointSource={"kind": "plugin", "plugin": "compact", "compactionId": "probe"},
                        config={"engine": ShimConfig().model_dump(exclude_none=True), "turns": {"enabeld": False}})

    async def shake():
        return Engine().on_hello(Peer(b"p"), hello)

    with pytest.raises(RemoteError) as refused:
        asyncio.run(shake())
    info = refused.value.info
    assert info.code == "config" and info.key == "turns.enabeld" and info.nearest == "turns.enabled"
    assert "unknown key turns.enabeld (did you mean turns.enabled?)" in info.message
    assert "turn-memory install --profile NAME --set turns.enabled=false" in info.fix


def test_config_command_prints_the_table_and_the_defaults(capsys):
    from turn_memory.cli import main

    assert main(["config", "--markdown"]) == 0
    assert capsys.readouterr().out == markdown_table()
    assert main(["config", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    by_key = {k["key"]: k for k in listed["keys"]}
    assert listed["schema"] == "turn-memory.config/1" and len(by_key) == len(list(config_keys()))
    assert by_key["turns.enabled"] == {"key": "turns.enabled", "default": True,
                                       "meaning": "compress every completed turn of user sessions"}
    assert by_key["engine.command"]["default"] == ["turn-memory", "serve"]


def test_config_reads_in_a_terminal_with_the_unit_rule(capsys):
    from turn_memory.cli import main

    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120  # no 300-column table rows
    assert "Times: keys of the `engine` section end in `Ms` (milliseconds" in out.replace("\n", " ")
    assert "\nturns: Per-turn compression.\n  turns.enabled = true\n      compress every " \
           "completed turn of user sessions\n" in out
    # the rule holds for every key: Ms only in the shim's section, S elsewhere
    for key in config_keys():
        last = key.name.split(".")[-1]
        if last.endswith("Ms"):
            assert key.name.startswith("engine."), key.name
        if key.name.startswith("engine."):
            assert not last.endswith("S") or last.endswith("Ms"), key.name
