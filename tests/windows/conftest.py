"""Fixtures of the opt-in Windows tests (`./run test --windows`): Wine 10 in its chroot, the
official Windows DSH exe, and the Linux launcher its engine relay asks for an engine."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from turn_memory.devtools.windows_dsh import WindowsDsh, ensure_windows_dsh
from turn_memory.devtools.wine import WineMissing, WineNode, ensure_wine_node

# the e2e tests' readers of a real run (tests/e2e/helpers.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))


@pytest.fixture(scope="session")
def wine_node() -> WineNode:
    try:
        return ensure_wine_node()
    except WineMissing as missing:
        pytest.skip(f"the Windows tests need Wine 10 in a chroot: {missing}")


@pytest.fixture(scope="session")
def windows_dsh(wine_node: WineNode) -> WindowsDsh:
    return ensure_windows_dsh()


@pytest.fixture(scope="session")
def launcher() -> Iterator[object]:
    from turn_memory.devtools.engine_launcher import engine_launcher

    with engine_launcher(Path(sys.executable)) as server:
        yield server


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Named on the command line without `./run test --windows`, every test here skips, saying why."""
    if os.environ.get("TURN_MEMORY_WINDOWS") == "1" or os.environ.get("TURN_MEMORY_WINDOWS_SHIM") == "1":
        return
    skip = pytest.mark.skip(reason="opt-in Windows test (Wine 10 in a chroot, needs root): run ./run test --windows")
    for item in items:
        if "tests/windows/" in item.nodeid or item.nodeid.startswith("windows/"):
            item.add_marker(skip)
