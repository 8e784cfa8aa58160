"""The shim's crash restarts back off until a handshake succeeds (shim-js/lib/engine-process.js).

An engine that boots (prints READY) and dies before any handshake, over and over, must be
restarted ever more slowly; only a completed handshake (`healthy()`) starts the delay over.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("engine_process_restarts.mjs")
MODULE = ROOT / "shim-js" / "lib" / "engine-process.js"


def restarts(dsh_runtime, healthy: str) -> dict:
    if not Path(dsh_runtime.node).exists():
        pytest.skip("no node in the cached runtime")
    out = subprocess.run([str(dsh_runtime.node), str(SCRIPT), str(MODULE), healthy], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_an_engine_that_dies_before_its_handshake_is_restarted_with_a_growing_delay(dsh_runtime):
    found = restarts(dsh_runtime, "never")
    assert found["delays"] == [20, 40, 80, 160, 320], found


def test_a_completed_handshake_starts_the_delay_over(dsh_runtime):
    found = restarts(dsh_runtime, "ready")
    assert found["delays"] == [20] * 5 and found["starts"] >= 5, found
