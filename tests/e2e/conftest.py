"""End-to-end fixtures: the real DSH hosts — 0.1.0-rc.8 from npm and the official 0.2.1-rc.2
runtime from PyPI — with turn-memory installed by the real installer, against a scripted model
server on 127.0.0.1. Every test that takes `home` runs once per host."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from turn_memory.devtools.dsh_home import DshHome
from turn_memory.devtools.fake_model import FakeModel
from turn_memory.devtools.runtime import HOSTS, Runtime, default_cache_dir, ensure_runtime
from helpers import worker_task_problems
from wheel_venv import WheelVenv, build_wheel, install_into_fresh_venv

CHECKOUT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session", params=HOSTS)
def host_runtime(request) -> Runtime:
    """One real DSH host per parameter: `rc8` or `v021` (installed and cached on first use)."""
    return ensure_runtime(host=request.param)


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
def installed_template(host_runtime, tmp_path_factory, tm_cli) -> Path:
    """One DSH home per host with turn-memory installed (pnpm runs once per host per test session)."""
    root = tmp_path_factory.mktemp(f"dsh-template-{host_runtime.host}") / "home"
    home = DshHome(root, host_runtime, "http://127.0.0.1:9").create()
    # the scripted turns are a few hundred tokens, below the default turns.minTurnTokens:
    # these tests are about compressing them; and their workers are scripted per turn, so a
    # backlog that timing happens to form gets one worker per turn (the policy's and the
    # batch's own tests restore the defaults). The installer seeds the shim's declarations
    # cache: turn 1's first request offers the memory tools without a warm-up boot
    home.install_turn_memory("--set", "turns.minTurnTokens=0", "--set", "turns.batchTurns=1", cli=tm_cli)
    return root


@pytest.fixture
def fake():
    with FakeModel() as model:
        yield model
        # whatever a test is about, every worker request it caused ends with the worker's task
        assert not worker_task_problems(model.requests)


@pytest.fixture
def home(installed_template, host_runtime, fake, tmp_path) -> DshHome:
    root = tmp_path / "home"
    shutil.copytree(installed_template, root, symlinks=True)
    return DshHome(root, host_runtime, fake.base_url)


def only_on(home: DshHome, *hosts: str, why: str) -> None:
    """Skip a test on a host it cannot apply to, naming the host and the reason."""
    if home.host not in hosts:
        pytest.skip(f"not applicable on DSH {home.runtime.version} ({home.host}): {why}")
