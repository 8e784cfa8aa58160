"""`turn-memory doctor` on each real DSH host (0.1.0-rc.8, 0.2.1-rc.2) home the installer set up, then broken."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from turn_memory.doctor.checks import our_rows
from turn_memory.install.patchyaml import load_entry_list

pytestmark = pytest.mark.e2e


def doctor(cli: str, home, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run([cli, "doctor", "--dsh-home", str(home.root), "--dsh", str(home.runtime.dsh), "--json", *extra],
                          cwd=home.workspace, env=home.env(), capture_output=True, text=True, timeout=300)
    return proc.returncode, {f["check"]: f for f in json.loads(proc.stdout)["findings"]}


def test_doctor_on_an_installed_profile_then_after_uninstall(home, tm_cli):
    code, found = doctor(tm_cli, home, "--profile", "tm")
    assert code == 0, found
    assert found["node"]["status"] == "ok" and "v22." in found["node"]["detail"]
    dsh = found["dsh"]
    assert dsh["status"] == "ok" and home.runtime.version in dsh["detail"] and f"{home.dialect.name} dialect" in dsh["detail"], dsh
    assert found["profile tm: live engine"]["status"] == "ok"
    assert found["profile tm: engine command"]["status"] == "ok"
    assert found["bridge round trip"]["status"] == "ok", found["bridge round trip"]

    subprocess.run([tm_cli, "uninstall", "--profile", "tm", "--dsh-home", str(home.root),
                    "--dsh", str(home.runtime.dsh)], cwd=home.workspace, env=home.env(), capture_output=True, text=True,
                   timeout=300, check=True)
    code, found = doctor(tm_cli, home, "--profile", "tm", "--no-bridge")
    live = found["profile tm: live engine"]
    assert code == 1 and live["status"] == "fail" and "compaction-basic is live" in live["detail"]
    assert live["fix"] == shlex.join(["turn-memory", "install", "--profile", "tm", "--dsh-home", str(home.root),
                                      "--dsh", str(home.runtime.dsh)])

    # the fix works as printed
    fixed = subprocess.run([tm_cli, *shlex.split(live["fix"])[1:]], cwd=home.workspace, env=home.env(),
                           capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    code, found = doctor(tm_cli, home, "--profile", "tm", "--no-bridge")
    assert code == 0 and found["profile tm: live engine"]["status"] == "ok", found


def test_the_readmes_overlay_switches_it_off_for_one_session(home, tmp_path):
    """README, "Switch it off": the overlay it prints, given to DSH with --patch, runs the stock
    engine and leaves the installed profile as it was."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Switch it off", 1)[1]
    overlay = tmp_path / "turn-memory-off.yml"
    overlay.write_text(section.split("```yaml\n", 1)[1].split("```", 1)[0], encoding="utf-8")
    patch_file = home.profile_dir / "cordis.patch.yml"
    before = patch_file.read_bytes()

    off = load_entry_list(home.dsh("--profile", "tm", "--patch", str(overlay), "--dump-config").stdout, what="dump")
    ours, basic = our_rows(off)
    assert (len(ours), len(basic)) == (0, 1), (ours, basic)
    ours, basic = our_rows(load_entry_list(home.dsh("--profile", "tm", "--dump-config").stdout, what="dump"))
    assert (len(ours), len(basic)) == (1, 0)  # without the overlay: turn-memory, as installed
    assert patch_file.read_bytes() == before
