"""turn-memory installed the way users install it: the built wheel in a fresh venv.

`python -m build` makes the sdist and then the wheel *from that sdist* (so both are
tested), once per source digest: the wheel is cached under the runtime cache
(`$TURN_MEMORY_CACHE/wheels/<digest>/`), and a rerun with unchanged sources reuses it. Each
test session then creates a fresh venv outside the checkout and pip-installs the wheel
there with its dependencies from the index (pip's own cache makes that quick). The e2e
tests call that venv's `turn-memory`, never the checkout.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: what goes into the sdist (MANIFEST.in + pyproject): the digest covers exactly these
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "python", "shim-js", "prompts", "profile-patch")
SKIP_PARTS = {"__pycache__", "node_modules", "_bundled", ".pytest_cache"}


@dataclass(frozen=True)
class WheelVenv:
    wheel: Path
    sdist: Path
    venv: Path
    build_s: float  # 0.0: the cached wheel was reused
    install_s: float

    @property
    def python(self) -> Path:
        return self.venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")

    @property
    def cli(self) -> Path:
        return self.venv / ("Scripts/turn-memory.exe" if sys.platform == "win32" else "bin/turn-memory")


def source_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        base = root / name
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            rel = path.relative_to(root)
            if SKIP_PARTS & set(rel.parts) or path.suffix in (".pyc", ".tgz") \
                    or any(part.endswith(".egg-info") for part in rel.parts):
                continue
            digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def build_wheel(root: Path, cache: Path) -> tuple[Path, Path, float]:
    """(wheel, sdist, seconds spent building; 0 when cached) for the sources at `root`."""
    out = cache / "wheels" / source_digest(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # other worktrees share the cache
        started = time.monotonic()
        spent = 0.0
        if not (out / "done").exists():
            tmp = Path(tempfile.mkdtemp(prefix="build-", dir=out.parent))
            proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(tmp), str(root)],
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise RuntimeError(f"python -m build failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            (tmp / "done").write_text("")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
            spent = time.monotonic() - started
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist, spent


def install_into_fresh_venv(wheel: Path, sdist: Path, venv: Path, build_s: float) -> WheelVenv:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    made = WheelVenv(wheel, sdist, venv, build_s, 0.0)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(made.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           str(wheel)], capture_output=True, text=True, timeout=600, env=env, cwd=venv)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install {wheel.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return WheelVenv(wheel, sdist, venv, build_s, time.monotonic() - started)
