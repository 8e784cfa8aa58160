import pytest


@pytest.fixture(scope="session")
def dsh_runtime():
    """The cached real DSH 0.1.0-rc.8 runtime (installed on first use)."""
    from turn_memory.devtools.runtime import ensure_runtime

    return ensure_runtime()
