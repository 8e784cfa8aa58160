"""The README's main job: `turn-memory demo` on the embedded scripted model, on each real DSH
host; its summary is `inspect`'s report of the same home, turn by turn."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def without_turn_memory(path: str) -> str:
    return os.pathsep.join(p for p in path.split(os.pathsep) if not (Path(p) / "turn-memory").exists())


def test_the_demo_shows_the_feature_and_agrees_with_inspect(tmp_path, host_runtime, tm_cli, installed_wheel_venv):
    home = tmp_path / "home"
    env = {**os.environ, "PATH": without_turn_memory(os.environ["PATH"])}  # a fresh machine: not on PATH
    out = subprocess.run([tm_cli, "demo", "--host", host_runtime.host, "--dsh-home", str(home), "--json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    text, summary = out.stdout.rsplit("\n", 2)[0], json.loads(out.stdout.strip().splitlines()[-1])
    assert f"a real DSH {host_runtime.version} session" in text
    assert "[1/3] installed turn-memory" in text and "verdict: installed" not in text  # its report: --verbose

    # one report: the demo's is inspect's, turn by turn, and its screen prints those figures
    proc = subprocess.run([tm_cli, "inspect", "--dsh-home", str(home), "--json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    inspected = json.loads(proc.stdout)
    assert summary["inspect"]["turns"] == inspected["turns"]
    assert (summary["inspect"]["surface"], summary["inspect"]["savings"], summary["inspect"]["checkpoints"]) == (
        inspected["surface"], inspected["savings"], inspected["checkpoints"])
    for turn in inspected["turns"]:
        after = turn["after"]
        assert f"{after['nodes']:>2} msgs ~{after['tokens']:>5,} tok" in text, turn

    states = {t["turn"]: t["state"] for t in inspected["turns"]}
    # the big turn at once; the small ones held until together they are worth a worker (turns.policy=size):
    # how many join one depends on where the host put its runtime snapshots (rc8), so only the ends are fixed;
    # the last turn owes its pending marker (no turn after it): the engine's journal says pending
    assert states[1] == "compressed" and states[7] == "pending" and "open" not in states.values(), states
    assert [t["turn"] for t in inspected["turns"] if t["journaled"]] == [7], inspected["turns"]
    assert "turns.policy=size: by default a session this short runs no worker" in text
    assert "held, raw: below turns.minTurnTokens (600 tok)" in text
    (checkpoint,) = inspected["checkpoints"]
    assert checkpoint["shadowed"]["turns"] == [1, 4] and checkpoint["tokens"] < checkpoint["shadowed"]["tokens"] * 0.8
    assert "/compact folded turns 1-4" in text and "turn 1 before (5 msgs" in text

    # per-turn requests and cost; what the model sees against the raw log; how to leave
    by_turn = summary["requests"]["by_turn"]
    assert by_turn["1"]["worker_requests"] >= 1 and by_turn["7"]["worker_requests"] == 0
    assert by_turn["/compact"]["worker_requests"] >= 1 and summary["requests"]["total_usd"] > 0
    assert f"the model now sees {inspected['surface']['nodes']} messages" in text
    assert f"remove it with:  rm -rf {home}" in text
    assert f"turn-memory install --profile headless --dsh {host_runtime.root.parent / 'bin' / ('dsh-' + host_runtime.version)}" \
        in text  # the DSH the demo ran, for the user's own profiles

    # nothing was lost: turn 6 read turn 1's original back although it was compressed and then folded
    assert "cat > notes.md <<'EOF'" in summary["read_back"] and "turn-memory: landed" in summary["read_back"]

    # issue 32: the "next:" lines run as printed, in a shell, on a PATH without turn-memory; the
    # first puts it there (here: activates the environment it was installed into)
    nexts = text.split("\nnext:\n", 1)[1].splitlines()
    on_path, inspect_cmd, _log, own = (line.split(":  ", 1)[-1] for line in nexts[:4])
    assert on_path == shlex.join([".", str(installed_wheel_venv.venv / "bin" / "activate")]), nexts
    own_home = tmp_path / "own home"  # the user's own DSH home, with a blank in its path
    shell_env = {**env, "DSH_HOME": str(own_home)}

    def printed(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", f"{on_path} && {command}"], cwd=tmp_path, env=shell_env,
                              capture_output=True, text=True, timeout=600)

    assert printed(inspect_cmd).returncode == 0
    installed = printed(own)
    assert installed.returncode == 0 and "verdict: installed" in installed.stdout, installed.stderr[-2000:]
    # the README's check right after that install, with no --dsh: doctor finds the DSH install was given
    checked = printed("turn-memory doctor --profile headless")
    assert checked.returncode == 0, checked.stdout
    assert "(found via the --dsh an install recorded)" in checked.stdout
    removed = printed("turn-memory uninstall --profile headless")
    assert removed.returncode == 0 and "verdict: uninstalled" in removed.stdout, removed.stderr[-2000:]
