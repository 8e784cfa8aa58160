"""The README's main job: `turn-memory demo` on the embedded scripted model."""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = pytest.mark.e2e


def test_demo_compresses_turns_and_compacts(tmp_path, host_runtime, tm_cli):
    out = subprocess.run([tm_cli, "demo", "--host", host_runtime.host, "--home", str(tmp_path / "home"), "--json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert f"host: DSH {host_runtime.version}" in out.stdout
    assert "turn 1: landed (" in out.stdout and "-> 2 nodes" in out.stdout
    assert "Compacted" in out.stdout
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    (raw, _), (final, _) = summary["raw"], summary["final"]
    assert final < raw and "[turn-memory checkpoint]" in summary["checkpoint"]
    # the last turn reads turn 1's original back, although it was compressed and then folded
    read_back = out.stdout.split("read turn 1 back with read_session_history:", 1)[1]
    assert "turn-memory: landed" in read_back and "printf '# zstd" in read_back
