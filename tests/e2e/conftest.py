"""End-to-end fixtures: the real DSH 0.1.0-rc.8 from npm with turn-memory installed by the
real installer, against a scripted model server on 127.0.0.1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from turn_memory.devtools.dsh_home import DshHome
from turn_memory.devtools.fake_model import FakeModel

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def installed_template(dsh_runtime, tmp_path_factory) -> Path:
    """One DSH home with turn-memory installed (pnpm runs once per test session)."""
    root = tmp_path_factory.mktemp("dsh-template") / "home"
    home = DshHome(root, dsh_runtime, "http://127.0.0.1:9").create()
    home.install_turn_memory()
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
