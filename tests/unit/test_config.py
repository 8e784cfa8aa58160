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
    assert "\nturns: Per-turn compression (design D-007, D-008).\n  turns.enabled = true\n      compress every " \
           "completed turn of user sessions\n" in out
    # the rule holds for every key: Ms only in the shim's section, S elsewhere
    for key in config_keys():
        last = key.name.split(".")[-1]
        if last.endswith("Ms"):
            assert key.name.startswith("engine."), key.name
        if key.name.startswith("engine."):
            assert not last.endswith("S") or last.endswith("Ms"), key.name
