#!/usr/bin/env python3
"""`turn-memory inspect` throughput against plain decompression: `python bench/inspect_throughput.py`.

Writes a synthetic multi-frame DSH session log (default 120 MB, `--log` to use your own),
then times, as child processes on the same file, alternating, `--repeats` times each:

- `zstd -dc FILE > /dev/null` (skipped when the zstd CLI is not on PATH);
- python-zstandard streaming every frame to /dev/null (the same library inspect uses);
- decompress + parse every line with the standard `json` module, and with `orjson`;
- the full report: `turn-memory inspect --json FILE > /dev/null`, with its peak RSS.

Prints median wall and CPU times, each as a ratio to `zstd -dc` (else to the python
decompress); the verdict is on wall time, CPU time is the steadier figure on a busy machine.
Target: the full report in at most 2.5x the time of `zstd -dc`. The exit status is
non-zero only when a run failed (inspect not exiting 0, a baseline crashing).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:
    import turn_memory  # noqa: F401
except ImportError:  # running with a Python that has not pip-installed the project
    sys.path.insert(0, str(ROOT / "python"))

from machine import machine_info  # noqa: E402
from turn_memory.devtools.synthetic_log import write_synthetic_log  # noqa: E402

TARGET = 2.5

# each baseline reads the file the way inspect does (all frames), without building a report
DECOMPRESS = """
import sys, zstandard
with open(sys.argv[1], 'rb') as f, open('/dev/null', 'wb') as out:
    reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
    while chunk := reader.read(1 << 22):
        out.write(chunk)
"""
PARSE = """
import sys, zstandard, {module} as parser
reader = zstandard.ZstdDecompressor().stream_reader(open(sys.argv[1], 'rb'), read_across_frames=True)
carry = b''
while chunk := reader.read(1 << 22):
    lines = (carry + chunk).split(b'\\n')
    carry = lines.pop()
    for line in lines:
        parser.loads(line)
"""
INSPECT = """
import resource, sys
from turn_memory.cli import main
code = main(['inspect', '--json', sys.argv[1]])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the child, result). CPU is steadier than wall on a busy machine."""
    cpu0, started = _children_cpu(), time.perf_counter()
    with open(os.devnull, "w") as null:
        proc = subprocess.run(argv, stdout=null, stderr=subprocess.PIPE, text=True)
    return time.perf_counter() - started, _children_cpu() - cpu0, proc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, help="an existing session.jsonl.zstd to read (default: generate one)")
    ap.add_argument("--size-mb", type=int, default=120, help="size of the generated log (default 120)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each reader; medians are reported (default 3)")
    ap.add_argument("--keep", action="store_true", help="keep the generated log and print its path")
    ap.add_argument("--json", action="store_true", help="print every number as JSON instead of the table")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="tm-inspect-bench-"))
    try:
        if args.log:
            path, made = args.log, None
        else:
            started = time.perf_counter()
            made = write_synthetic_log(tmp / "session.jsonl.zstd", target_bytes=args.size_mb * 1_000_000)
            path = made.path
            if not args.json:
                print(f"generated {path} ({made.bytes / 1e6:.0f} MB, {made.frames:,} frames, {made.events:,} events, "
                      f"{made.turns:,} turns) in {time.perf_counter() - started:.1f} s", flush=True)
        return _run(args, path)
    finally:
        if args.keep and not args.log:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(args: argparse.Namespace, path: Path) -> int:
    py = sys.executable
    readers: dict[str, list[str]] = {}
    zstd = shutil.which("zstd")
    if zstd:
        readers["zstd -dc > /dev/null"] = [zstd, "-dc", str(path)]
    readers["python zstandard -> /dev/null"] = [py, "-c", DECOMPRESS, str(path)]
    readers["decompress + json.loads"] = [py, "-c", PARSE.format(module="json"), str(path)]
    readers["decompress + orjson.loads"] = [py, "-c", PARSE.format(module="orjson"), str(path)]
    readers["turn-memory inspect --json"] = [py, "-c", INSPECT, str(path)]

    times: dict[str, list[float]] = {name: [] for name in readers}
    cpu: dict[str, list[float]] = {name: [] for name in readers}
    peaks: list[float] = []
    for _ in range(args.repeats):
        for name, argv in readers.items():  # interleaved: load drifts hit every reader alike
            seconds, cpu_s, proc = timed(argv)
            if proc.returncode != 0:
                print(f"bench: {name} failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            times[name].append(seconds)
            cpu[name].append(cpu_s)
            if name.startswith("turn-memory"):
                peaks.append(int(proc.stderr.split()[-1]) / (1 << 20 if sys.platform == "darwin" else 1 << 10))

    medians = {name: statistics.median(ts) for name, ts in times.items()}
    cpu_medians = {name: statistics.median(ts) for name, ts in cpu.items()}
    base_name = "zstd -dc > /dev/null" if zstd else "python zstandard -> /dev/null"
    base = medians[base_name]
    ratio = medians["turn-memory inspect --json"] / base
    result = {"log": str(path), "bytes": path.stat().st_size, "machine": machine_info(),
              "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
              "baseline": base_name, "zstd_cli": bool(zstd), "seconds": times, "median_s": medians,
              "cpu_seconds": cpu, "median_cpu_s": cpu_medians,
              "ratio_to_baseline": {n: m / base for n, m in medians.items()}, "inspect_peak_rss_mb": max(peaks),
              "target_ratio": TARGET, "meets_target": ratio <= TARGET}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"machine: {result['machine']}; load average {result['load_avg']:.2f}")
    if not zstd:
        print("zstd CLI not on PATH: ratios are to python-zstandard's decompress instead")
    short = base_name.split(" >")[0]
    base_cpu = cpu_medians[base_name]
    print(f"{'reader':<30} {'wall':>7} {'x ' + short:>13} {'CPU':>7} {'x ' + short:>13}   wall runs (s)")
    for name, median in medians.items():
        runs = ", ".join(f"{t:.2f}" for t in times[name])
        print(f"{name:<30} {median:>6.2f}s {median / base:>12.2f}x {cpu_medians[name]:>6.2f}s "
              f"{cpu_medians[name] / base_cpu:>12.2f}x   {runs}")
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"inspect: {ratio:.2f}x {short} in wall time ({verdict} the {TARGET}x target), "
          f"{cpu_medians['turn-memory inspect --json'] / base_cpu:.2f}x in CPU time; "
          f"peak RSS {max(peaks):.0f} MB; {result['bytes'] / 1e6 / medians['turn-memory inspect --json']:.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
