import os
from pathlib import Path

import pytest

#: tests/windows runs the shim and the official Windows DSH under Wine 10: opt-in
#: (`./run test --windows`; --windows-shim is its old name), never in `./run test`
WINDOWS = os.environ.get("TURN_MEMORY_WINDOWS") == "1" or os.environ.get("TURN_MEMORY_WINDOWS_SHIM") == "1"
collect_ignore = [] if WINDOWS else ["windows"]


@pytest.fixture(scope="session")
def dsh_runtime():
    """The cached real DSH 0.1.0-rc.8 runtime (installed on first use)."""
    from turn_memory.devtools.runtime import ensure_runtime

    return ensure_runtime()


@pytest.fixture(scope="session")
def dsh_v021_modules():
    """The real DSH 0.2.1-rc.2 host's `node_modules` (all `@deepseek-ai/*`), unpacked from the
    cached PyPI runtime (installed on first use)."""
    from turn_memory.devtools.runtime import ensure_runtime

    return ensure_runtime(host="v021").node_modules


@pytest.fixture(scope="session")
def node(dsh_runtime) -> str:
    """The cached Node 22. It is part of the set-up (`./run test` installs it with the DSH
    hosts), so a missing one fails the tests that need it; none of them skips."""
    path = Path(dsh_runtime.node)
    assert path.is_file(), f"no Node 22 at {path}: the cached DSH runtime is incomplete (`./run test` sets it up)"
    return str(path)
