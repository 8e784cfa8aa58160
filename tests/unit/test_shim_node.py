"""The JS shim's own unit tests (shim-js/test/*.test.js, Node's test runner), run by `./run test`.

One pytest test per test file: `node --test <file>` with the cached Node 22, the spec reporter
(one line per node test, each suite by name) on stdout; a failing node test fails it, with
node's whole output in the message.

Module resolution: the shim imports `zeromq` (lib/bridge.js) and, in index.js and the modules
it pulls in, the DSH packages (`@deepseek-ai/dsh-compaction`, `-session`, `-tools`). In the
checkout none of them sits in a node_modules above shim-js/lib, and ES modules ignore
NODE_PATH. So NODE_PATH names the cached runtime's zeromq@6 and DSH 0.1.0-rc.8 node_modules,
and `--import shim-js/test/resolve-node-path.mjs` registers a resolve hook that retries a bare
specifier the normal resolution could not find from inside each NODE_PATH entry (nothing is
linked or copied into the checkout; see the hook for details).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from turn_memory.install.pack import shim_files

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "shim-js"
TEST_DIR = SHIM / "test"
HOOK = TEST_DIR / "resolve-node-path.mjs"
TEST_FILES = sorted(TEST_DIR.glob("*.test.js"))
#: the units the shim suite must cover (issue 13): file -> its top-level suite
SUITES = {
    "host-ops.test.js": "HostOps.apply",
    "mirror.test.js": "Mirror",
    "bridge.test.js": "Bridge",
    "engine-process.test.js": "EngineProcess",
    "config.test.js": "row config",
    "hooks.test.js": "hooks",
    "public-tools.test.js": "declarations cache",
    "workers.test.js": "Workers.setup",
}


def test_every_unit_has_its_node_test_file():
    assert {f.name for f in TEST_FILES} >= set(SUITES), sorted(f.name for f in TEST_FILES)


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name.removesuffix(".test.js"))
def test_shim_unit(node, dsh_runtime, test_file: Path):
    node_path = [str(p) for p in (dsh_runtime.zeromq_modules, dsh_runtime.node_modules) if p is not None]
    env = {**os.environ, "NODE_PATH": os.pathsep.join(node_path)}
    env.pop("NODE_OPTIONS", None)  # nothing from the caller's shell changes how node runs the tests
    cmd = [node, "--import", HOOK.as_uri(), "--test", "--test-reporter=spec",
           "--test-timeout=60000", str(test_file.relative_to(ROOT))]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, encoding="utf-8", timeout=600)
    out = proc.stdout + (f"\n--- stderr ---\n{proc.stderr}" if proc.stderr.strip() else "")
    print(out)  # what each node test reported (pytest shows it with -rP, and on failure)
    assert proc.returncode == 0, f"node --test {test_file.name} failed (rc={proc.returncode}):\n{out}"
    assert "ℹ fail 0" in proc.stdout, out
    suite = SUITES.get(test_file.name)
    if suite is not None:
        assert f"✔ {suite} (" in proc.stdout, f"suite {suite!r} did not pass:\n{out}"


def test_the_shim_tests_are_not_packed():
    """Neither the plugin tarball, nor npm's own `files`, nor the wheel carries shim-js/test."""
    assert not [f for f in shim_files(SHIM) if not (f.startswith("lib/") or f in ("package.json", "README.md"))]
    assert json.loads((SHIM / "package.json").read_text())["files"] == ["lib/*.js", "README.md"]
    # setup.py's BUNDLED (read, not imported: importing it runs setup())
    tree = ast.parse((ROOT / "setup.py").read_text())
    bundled = next(ast.literal_eval(node.value) for node in tree.body
                   if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "BUNDLED")
    wheel = {p.relative_to(SHIM) for pattern in bundled["shim-js"] for p in SHIM.glob(pattern) if p.is_file()}
    assert wheel and not [p for p in wheel if p.parts[0] == "test"], sorted(map(str, wheel))
