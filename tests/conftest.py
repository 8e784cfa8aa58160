import pytest


@pytest.fixture(scope="session")
def dsh_runtime():
    """The cached real DSH 0.1.0-rc.8 runtime (installed on first use)."""
    from turn_memory.devtools.runtime import ensure_runtime

    return ensure_runtime()


#: where the DSH 0.2.1-rc.2 host's JavaScript lies when TURN_MEMORY_V021_MODULES is not set
V021_MODULES_DEFAULT = "/tmp/v021/fs/node/node_modules"


@pytest.fixture(scope="session")
def dsh_v021_modules():
    """The extracted `node_modules` of the real DSH 0.2.1-rc.2 host (all `@deepseek-ai/*`).

    The one place its path comes from: env TURN_MEMORY_V021_MODULES, else the extraction
    at V021_MODULES_DEFAULT (to be rewired to the cached runtime's `host_modules`). Skips
    when neither holds the host's session package.
    """
    import os
    from pathlib import Path

    path = Path(os.environ.get("TURN_MEMORY_V021_MODULES") or V021_MODULES_DEFAULT)
    if not (path / "@deepseek-ai" / "dsh-session" / "lib" / "index.js").is_file():
        pytest.skip(f"the DSH 0.2.1-rc.2 host modules are not at {path} (set TURN_MEMORY_V021_MODULES)")
    return path
