"""End-to-end fixtures: the real DSH 0.1.0-rc.8 from npm with turn-memory installed by the
real installer, against a scripted model server on 127.0.0.1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from turn_memory.devtools.dsh_home import DshHome
from turn_memory.devtools.fake_model import FakeModel
from turn_memory.devtools.runtime import default_cache_dir
from wheel_venv import WheelVenv, build_wheel, install_into_fresh_venv

CHECKOUT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def installed_wheel_venv(tmp_path_factory) -> WheelVenv:
    """turn-memory as users get it: the wheel (built once per source digest) in a fresh venv
    outside the checkout. Its `turn-memory` is what the e2e tests run."""
    wheel, sdist, build_s = build_wheel(CHECKOUT, default_cache_dir())
    return install_into_fresh_venv(wheel, sdist, tmp_path_factory.mktemp("wheel-venv") / "venv", build_s)


@pytest.fixture(scope="session")
def tm_cli(installed_wheel_venv) -> str:
    """The installed `turn-memory` executable."""
    return str(installed_wheel_venv.cli)


@pytest.fixture(scope="session")
def installed_template(dsh_runtime, tmp_path_factory, tm_cli) -> Path:
    """One DSH home with turn-memory installed (pnpm runs once per test session)."""
    root = tmp_path_factory.mktemp("dsh-template") / "home"
    home = DshHome(root, dsh_runtime, "http://127.0.0.1:9").create()
    home.install_turn_memory(cli=tm_cli)
    return root


@pytest.fixture
def fake():
    with FakeModel() as model:
        yield model


@pytest.fixture
def home(installed_template, dsh_runtime, fake, tmp_path) -> DshHome:
    root = tmp_path / "home"
    shutil.copytree(installed_template, root, symlinks=True)
    return DshHome(root, dsh_runtime, fake.base_url)
