"""`turn-memory inspect` on a 100+ MB multi-frame log: bounded memory, damage still located.

The log is generated once per test session (about 10 s); each check runs the real command
in a child process, which reports its own peak RSS (so nothing else this pytest process
started can inflate the figure).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from turn_memory.devtools.synthetic_log import SyntheticLog, write_synthetic_log

SIZE = 105_000_000
PEAK_LIMIT_MB = 200

# run the CLI, then print the child's own peak RSS on stderr. Linux: VmHWM, the peak of this
# process image only (ru_maxrss would carry over the forked pytest parent's RSS across exec, so it
# grows with whatever the suite ran before); elsewhere ru_maxrss (KiB, bytes on macOS).
CHILD = """
import resource, sys
from turn_memory.cli import main
code = main(sys.argv[1:])
try:
    hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    peak = int(hwm.split()[1]) / 1024
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
print(f"PEAK_MB {peak:.1f}", file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture(scope="session")
def big_log(tmp_path_factory) -> SyntheticLog:
    return write_synthetic_log(tmp_path_factory.mktemp("big-log") / "session.jsonl.zstd", target_bytes=SIZE)


def inspect_child(path: Path) -> tuple[int, dict, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, "inspect", "--json", str(path)],
                          capture_output=True, text=True, timeout=300)
    peak = float(next(line.split()[1] for line in proc.stderr.splitlines() if line.startswith("PEAK_MB")))
    return proc.returncode, json.loads(proc.stdout), peak


def test_a_100mb_log_streams_in_bounded_memory(big_log):
    assert big_log.bytes >= 100_000_000 and big_log.frames > 10_000
    code, report, peak = inspect_child(big_log.path)
    assert code == 0 and report["whole"]
    assert peak < PEAK_LIMIT_MB, f"peak RSS {peak} MB"
    assert report["log"]["events"] == big_log.events and report["log"]["frames"] == big_log.frames
    assert len(report["turns"]) == big_log.turns
    assert len(report["checkpoints"]) == len(big_log.checkpoints) > 10


def test_a_flipped_byte_and_a_truncated_last_frame_are_each_located(big_log, tmp_path):
    """One damaged copy (one child run: the machine has 2 cores): both damages, both offsets."""
    k = int(len(big_log.frame_offsets) * 0.3)
    start, end = big_log.frame_offsets[k], big_log.frame_offsets[k + 1]
    last = big_log.frame_offsets[-1]
    path = tmp_path / "session.jsonl.zstd"
    shutil.copyfile(big_log.path, path)
    with open(path, "r+b") as f:
        f.seek(end - 2)  # inside frame k's checksum
        byte = f.read(1)[0]
        f.seek(end - 2)
        f.write(bytes([byte ^ 0x01]))
        f.truncate(last + 9)  # an append interrupted 9 bytes into the last frame
    code, report, peak = inspect_child(path)
    assert code == 3 and not report["whole"] and peak < PEAK_LIMIT_MB
    damage = [(d["kind"], d["offset"]) for d in report["damage"]]
    assert damage[:2] == [("corrupt-frame", start), ("truncated-frame", last)]
    assert [kind for kind, _ in damage[2:]] == ["seq-gap"]  # the events of frame k are missing
    # every frame but the corrupt one is read; the last turn's marker sits in the torn frame
    assert report["log"]["frames"] == big_log.frames - 1
    assert len(report["turns"]) == big_log.turns
