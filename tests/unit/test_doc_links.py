"""Comments and docs point at design decisions and architecture sections by anchor
(`docs/decisions.md#…`, `architecture.md#…`): every anchor cited must name a heading there,
so a renamed heading cannot leave a pointer to nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"(decisions|architecture)\.md#([\w\-]+)")


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as '-'."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def citing_files() -> list[Path]:
    globs = ("python/turn_memory/**/*.py", "shim-js/lib/*.js", "shim-js/test/*.js", "tests/**/*.py", "docs/*.md",
             "bench/*.py", "prompts/*.md", "README.md")
    return sorted({p for g in globs for p in ROOT.glob(g)})


def test_every_cited_anchor_names_a_heading():
    known = {"decisions": anchors(ROOT / "docs" / "decisions.md"),
             "architecture": anchors(ROOT / "docs" / "architecture.md")}
    cited = [(p.relative_to(ROOT).as_posix(), doc, anchor) for p in citing_files()
             for doc, anchor in CITED.findall(p.read_text(encoding="utf-8"))]
    assert len(cited) > 20  # the comments do cite them
    assert [c for c in cited if c[2] not in known[c[1]]] == []
