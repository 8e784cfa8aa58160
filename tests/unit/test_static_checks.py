"""The type checker and the linter pass on the tree, as pyproject.toml configures them (CI runs
them through `./run test`), and every remaining `type: ignore` says why it is there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "turn_memory"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_mypy_finds_no_type_error() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "python", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    # `# type: ignore[code]  # why: ...` — a bare ignore would hide any later error on that line
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "scenarios" in path.relative_to(PACKAGE).parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "type: ignore" in line and not re.search(r"type: ignore\[[a-z-]+(, ?[a-z-]+)*\]\s+# why: \S", line):
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert bad == []
