"""A typo in the plugin row's config, on the real DSH: the agent runs without turn-memory
(fail open), the engine is not restarted in a loop, DSH's output names the key once;
`doctor` reports it with its fix; `install --set` refuses the typo and changes nothing."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from helpers import turn_tasks

pytestmark = pytest.mark.e2e


def snapshot(home) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in home.profile_dir.iterdir() if p.is_file()}


def test_a_config_typo_is_named_once_fails_open_and_doctor_and_install_name_the_fix(home, fake, tm_cli, tmp_path):
    # the row as a hand edit would leave it: install a valid setting, then misspell its key
    engine_log = tmp_path / "engine.log"  # every engine start logs "engine listening on" here
    home.install_turn_memory("--set", "turns.enabled=false", "--set", f"engine.logFile={engine_log}", cli=tm_cli)
    patch = home.profile_dir / "cordis.patch.yml"
    text = patch.read_text()
    assert text.count("enabled: false") == 1, text
    patch.write_text(text.replace("enabled: false", "enabeld: false"))

    # what an earlier, healthy DSH run leaves: the engine's tool declarations, registered at start
    declared = home.root / "turn-memory" / "declared.json"
    declared.write_text(json.dumps({"publicTools": [{"name": "read_session_history", "description": "d",
                                                     "parameters": {"type": "object", "properties": {}}}],
                                    "contextSections": []}))
    for i in range(3):
        fake.push("turn", f"Answer {i}.")
    run = home.run([*turn_tasks(2), {"sleepMs": 3000}, "Third question, later.", "/compact"], timeout=90)
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 3  # DSH ran its turns without us
    output = run.stdout + run.stderr
    named = [line for line in output.splitlines() if "turns.enabeld" in line]
    assert len(named) == 1, output[-4000:]
    assert "did you mean turns.enabled?" in named[0] and "turn-memory install --profile" in named[0], named
    assert "not restarted" in named[0], named
    log = engine_log.read_text()
    assert 1 <= log.count("engine listening on") <= 2, log
    assert "refused the handshake" in log and "turns.enabeld" not in log  # named once: by the shim
    # tools only the engine could answer are withdrawn once it refused, here and on the next start
    last = fake.requests_of("turn")[-1]
    assert "read_session_history" not in last.tool_names and "bash" in last.tool_names, last.tool_names
    assert json.loads(declared.read_text())["publicTools"] == []
    (compact,) = run.commands()
    assert compact["result"]["kind"] == "error", compact  # /compact fails cleanly: no engine, nothing appended

    # doctor: the same problem, from a handshake with the profile's actual config, and its fix
    proc = subprocess.run([tm_cli, "doctor", "--profile", "tm", "--dsh-home", str(home.root), "--dsh",
                           str(home.runtime.dsh), "--json"], cwd=home.workspace, env=home.env(),
                          capture_output=True, text=True, timeout=300)
    found = {f["check"]: f for f in json.loads(proc.stdout)["findings"]}
    assert proc.returncode == 1, found
    config = found["profile tm: config"]
    assert config["status"] == "fail" and "unknown key turns.enabeld (did you mean turns.enabled?)" in config["detail"]
    where = ["--profile", "tm", "--dsh-home", str(home.root), "--dsh", str(home.runtime.dsh)]
    assert config["fix"] == shlex.join(["turn-memory", "install", *where, "--set", "turns.enabled=false",
                                        "--unset", "turns.enabeld"]), config

    # install refuses to write a typo, and changes nothing: it would keep the row's misspelt key
    before = snapshot(home)
    refused = home.install_turn_memory("--set", "turns.enabled=false", cli=tm_cli, check=False)
    assert refused.returncode == 1, refused.stdout
    assert "error: invalid turn-memory config in the installed row: unknown key turns.enabeld (did you mean " \
           "turns.enabled?); nothing was changed" in refused.stderr, refused.stderr
    assert snapshot(home) == before

    # the fix doctor printed works as printed
    fixed = subprocess.run([tm_cli, *shlex.split(config["fix"])[1:]], cwd=home.workspace, env=home.env(),
                           capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "    removed  turns.enabeld = false  (--unset)" in fixed.stdout
    proc = subprocess.run([tm_cli, "doctor", "--profile", "tm", "--dsh-home", str(home.root), "--dsh",
                           str(home.runtime.dsh), "--json"], cwd=home.workspace, env=home.env(),
                          capture_output=True, text=True, timeout=300)
    found = {f["check"]: f for f in json.loads(proc.stdout)["findings"]}
    assert proc.returncode == 0 and found["profile tm: config"]["status"] == "ok", found


def test_a_bad_engine_value_reaches_the_engine_which_names_it_once_and_dsh_runs_without_it(home, fake, tm_cli, tmp_path):
    """The shim validates nothing: it starts the engine anyway (with the default in place of a
    value it cannot use) and reports what the engine refused."""
    engine_log = tmp_path / "engine.log"
    home.install_turn_memory("--set", "engine.hookTimeoutMs=2500", "--set", f"engine.logFile={engine_log}", cli=tm_cli)
    patch = home.profile_dir / "cordis.patch.yml"
    text = patch.read_text()
    assert text.count("hookTimeoutMs: 2500") == 1, text
    patch.write_text(text.replace("hookTimeoutMs: 2500", "hookTimeoutMs: fast"))

    for i in range(2):
        fake.push("turn", f"Answer {i}.")
    run = home.run([*turn_tasks(1), {"sleepMs": 3000}, "Second question, later."], timeout=90)
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 2  # DSH ran its turns without us
    output = run.stdout + run.stderr
    named = [line for line in output.splitlines() if "engine.hookTimeoutMs" in line]
    assert len(named) == 1, output[-4000:]
    assert "turn-memory is off: the engine refused the handshake (config): invalid turn-memory config: " \
           "engine.hookTimeoutMs: must be a whole number (got 'fast')" in named[0], named
    assert "--unset engine.hookTimeoutMs" in named[0] and "not restarted" in named[0], named
    log = engine_log.read_text()
    assert 1 <= log.count("engine listening on") <= 2 and "refused the handshake" in log, log
