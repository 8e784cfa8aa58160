"""DSH Desktop's profile layout on a real host: 0.2's `web` profile keeps each agent preset's
live compaction group inside the preset row's object config (survey §1.6) — the layout the
user's Desktop 0.2.0-rc.2 has. The installer rewrites every preset; a session run under the
default preset is compressed by turn-memory."""

from __future__ import annotations

import pytest

from helpers import reload
from test_turn_compression_e2e import AGENT_TURN_1, FINISH, FOLD, IS_WORKER, TASK_1, worker_requests
from turn_memory.devtools.dsh_home import DshHome
from turn_memory.install.patchyaml import load
from turn_memory.turns.markers import marker_of

pytestmark = pytest.mark.e2e


def _preset_rows(tree: list, preset: str) -> list[dict]:
    row = next(r for r in tree if isinstance(r, dict) and r.get("id") == preset)
    group = next(r for r in row["config"]["plugins"] if isinstance(r, dict) and r.get("id") == "compaction")
    return [r for r in group["config"] if isinstance(r, dict)]


def test_web_profile_presets_run_turn_memory(host_runtime, fake, tmp_path):
    if host_runtime.host != "v021":
        pytest.skip(f"not applicable on DSH {host_runtime.version} ({host_runtime.host}): its profiles have no "
                    "agent presets; the Desktop preset layout is covered there by the installer's unit fixtures")
    home = DshHome(tmp_path / "home", host_runtime, fake.base_url, profile="web").create()
    out = home.install_turn_memory().stdout
    assert "preset-standard: exactly one live compaction engine, ours" in out, out

    tree = load(home.dsh("--profile", "web", "--dump-config").stdout)
    rows = {r["id"]: r for r in _preset_rows(tree, "preset-standard")}
    assert rows["compaction-basic"].get("disabled") is True and not rows["turn-memory"].get("disabled")

    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE")
    fake.add_rule(IS_WORKER, replies=[FOLD, FINISH])
    run = home.run([TASK_1, "Second task: add a regression test."])
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert not run.logs(), run.logs()
    assert worker_requests(fake), "no compression worker ran under the preset"
    _, events = home.session_log(run.session_id)
    assert [e["seq"] for e in events if marker_of(e) == ("compression", 1)], "turn 1 never landed"
    reload(home, events)
