"""DSH Desktop's profile layout on a real host: 0.2's `web` profile keeps each agent preset's
live compaction group inside the preset row's object config — the layout the
user's Desktop 0.2.0-rc.2 has. The installer rewrites every preset, and DSH's own composition
(`--dump-config`) shows turn-memory as the one live engine of each. (A session cannot be run
in this profile here: the PyPI runtime's web app lacks packages its required plugins import.)"""

from __future__ import annotations

import pytest

from turn_memory.devtools.dsh_home import DshHome
from turn_memory.install.patchyaml import load

pytestmark = pytest.mark.e2e


def _preset_rows(tree: list, preset: str) -> list[dict]:
    row = next(r for r in tree if isinstance(r, dict) and r.get("id") == preset)
    group = next(r for r in row["config"]["plugins"] if isinstance(r, dict) and r.get("id") == "compaction")
    return [r for r in group["config"] if isinstance(r, dict)]


def test_web_profile_presets_get_turn_memory(host_runtime, fake, tmp_path):
    if host_runtime.host != "v021":
        pytest.skip(f"not applicable on DSH {host_runtime.version} ({host_runtime.host}): its profiles have no "
                    "agent presets; the Desktop preset layout is covered there by the installer's unit fixtures")
    home = DshHome(tmp_path / "home", host_runtime, fake.base_url, profile="web").create()
    out = home.install_turn_memory().stdout
    assert "preset-standard: exactly one live compaction engine, ours" in out, out

    tree = load(home.dsh("--profile", "web", "--dump-config").stdout)
    rows = {r["id"]: r for r in _preset_rows(tree, "preset-standard")}
    assert rows["compaction-basic"].get("disabled") is True and not rows["turn-memory"].get("disabled")

    for preset in ("preset-standard", "preset-ptc", "preset-minimal", "preset-cordis"):
        live = [r["id"] for r in _preset_rows(tree, preset) if not r.get("disabled")]
        assert "turn-memory" in live and "compaction-basic" not in live, (preset, live)
