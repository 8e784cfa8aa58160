"""What the benchmarks ran on: printed with every table, so numbers stay comparable."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def python_info() -> str:
    info = f"python {platform.python_version()}"
    try:
        import zmq

        info += f", pyzmq {zmq.pyzmq_version()} (libzmq {zmq.zmq_version()})"
    except ImportError:
        pass
    try:
        import pydantic

        info += f", pydantic {pydantic.VERSION}"
    except ImportError:
        pass
    return info


def machine_info() -> str:
    return f"{os.cpu_count()} CPUs ({cpu_name()}), {platform.system().lower()}-{platform.machine()}; {python_info()}"
