"""The wheel is what users install: it carries the shim, the prompts and the templates, and
installed in a fresh venv with no checkout anywhere near it, it installs into a real DSH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from turn_memory import __version__
from turn_memory.devtools.dsh_home import DshHome
from turn_memory.doctor.checks import our_rows
from turn_memory.install.patchyaml import load_entry_list

pytestmark = pytest.mark.e2e

CHECKOUT = Path(__file__).resolve().parents[2]


def package_data_in_checkout() -> set[str]:
    """Every file the three top-level folders hold that a user's install needs."""
    files = {"shim-js/package.json"} | {f"shim-js/{p.relative_to(CHECKOUT / 'shim-js').as_posix()}"
                                        for p in (CHECKOUT / "shim-js" / "lib").glob("*.js")}
    files |= {f"prompts/{p.name}" for p in (CHECKOUT / "prompts").glob("*.md")}
    files |= {f"profile-patch/{p.name}" for p in (CHECKOUT / "profile-patch").iterdir() if p.is_file()}
    return files


def test_wheel_and_sdist_carry_the_shim_prompts_and_templates(installed_wheel_venv):
    expected = package_data_in_checkout()
    assert {"shim-js/lib/index.js", "prompts/turn-compression.md", "profile-patch/bundle-layout.yml",
            "profile-patch/preset-layout.yml"} <= expected
    prefix = "turn_memory/_bundled/"
    wheel = {n[len(prefix):] for n in zipfile.ZipFile(installed_wheel_venv.wheel).namelist() if n.startswith(prefix)}
    assert wheel == expected
    with tarfile.open(installed_wheel_venv.sdist) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        names = {n[len(top) + 1:] for n in sdist.getnames()}
    assert expected <= names and "setup.py" in names and not any("node_modules" in n for n in names)


def test_the_installed_wheel_needs_no_checkout(installed_wheel_venv, dsh_runtime, tmp_path):
    venv = installed_wheel_venv
    probe = subprocess.run([str(venv.python), "-c", (
        "import json, sys, turn_memory, turn_memory.resources as r\n"
        "print(json.dumps({'path': sys.path, 'package': turn_memory.__file__, 'checkout': str(r.editable_checkout()),"
        " 'shim': str(r.shim_dir()), 'prompts': str(r.prompts_dir()), 'templates': str(r.profile_patch_dir())}))")],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    found = json.loads(probe.stdout)
    assert not [p for p in found["path"] if p and Path(p).resolve().is_relative_to(CHECKOUT)], found["path"]
    assert found["checkout"] == "None"
    for key in ("package", "shim", "prompts", "templates"):
        assert Path(found[key]).is_relative_to(venv.venv), (key, found[key])

    # `turn-memory install` from that venv into a real DSH 0.1.0-rc.8 profile
    home = DshHome(tmp_path / "home", dsh_runtime, None).create()
    out = home.install_turn_memory(cli=str(venv.cli)).stdout
    assert "verdict: installed" in out, out
    tree = load_entry_list(home.dsh("--profile", home.profile, "--dump-config").stdout, what="dump")
    ours, basic = our_rows(tree)
    assert len(ours) == 1 and basic == [], (ours, basic)
    assert ours[0].row["config"]["engine"]["command"] == [str(venv.python), "-m", "turn_memory", "serve"]
    packed = home.root / "turn-memory" / "dsh-turn-memory-0.1.0.tgz"
    with tarfile.open(packed) as tar:
        assert "package/lib/defaults.js" in tar.getnames()
    print(f"wheel build {venv.build_s:.1f} s (0 = cached), fresh venv + pip install {venv.install_s:.1f} s")


def test_the_readmes_pip_install_of_the_clone_puts_turn_memory_on_path(tmp_path):
    """README: `python3 -m pip install .` in the clone (pipx runs the same build into a venv of
    its own). The `turn-memory` it installs runs by name, from that environment, and reads its
    package data from there, not from the clone."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *(p for p in env["PATH"].split(os.pathsep)
                                                       if not (Path(p) / "turn-memory").exists())])
    proc = subprocess.run("python3 -m pip install --quiet --disable-pip-version-check .", shell=True, cwd=CHECKOUT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = subprocess.run("command -v turn-memory && turn-memory --version && turn-memory doctor --help",
                           shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    where, version, *_ = found.stdout.splitlines()
    assert (where, version) == (str(venv / "bin" / "turn-memory"), f"turn-memory {__version__}")
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import turn_memory.resources as r; print(r.shim_dir())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True)
    assert Path(probe.stdout.strip()).is_relative_to(venv), probe.stdout
