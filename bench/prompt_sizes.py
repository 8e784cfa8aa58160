#!/usr/bin/env python3
"""Prompt sizes: `python bench/prompt_sizes.py [--before REV]`.

Each golden render of `tests/unit/golden/` (every prompt the engine sends, for the fixed
session of `tests/unit/golden_session.py`) in the working tree, side by side with the same
file at git revision REV (default `main`): characters and tokens, counted with DSH's token
meter heuristic (`turn_memory.host.tokens`: ceil(UTF-16 length / 4); no real tokenizer).
No timing: the figures depend only on the text.

A worker's system prompt and tools are the cached prefix of every one of its requests; its
task is paid at the cache-miss price once per job (and the rendered task depends on the
session: here, the fixed one).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = "tests/unit/golden"
sys.path.insert(0, str(ROOT / "python"))

from turn_memory.host.tokens import js_len  # noqa: E402


def tokens(text: str) -> int:
    return -(-js_len(text) // 4)


def at_revision(rev: str, name: str) -> str | None:
    proc = subprocess.run(["git", "show", f"{rev}:{GOLDEN}/{name}"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def kind(name: str) -> str:
    if ".system." in name or ".tools." in name or name == "memory-tools.txt":
        return "prefix"
    return "per job" if ".task." in name else "per use"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git revision to compare with (default: main)")
    args = parser.parse_args()
    rows = []
    for path in sorted((ROOT / GOLDEN).glob("*.txt")):
        now = path.read_text(encoding="utf-8")
        before = at_revision(args.before, path.name)
        rows.append((path.name, kind(path.name), None if before is None else tokens(before), tokens(now)))
    width = max(len(r[0]) for r in rows)
    print(f"{'prompt':<{width}}  {'paid':<7}  {'before':>6}  {'after':>6}  {'change':>7}   (tokens, DSH heuristic; "
          f"before = {args.before})")
    for name, paid, before, after in rows:
        change = "new" if before is None else f"{after - before:+d}"
        print(f"{name:<{width}}  {paid:<7}  {before if before is not None else '-':>6}  {after:>6}  {change:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
