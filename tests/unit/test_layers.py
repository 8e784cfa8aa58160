"""The package's one-way layers (docs/architecture.md, "Layers"), read from every module's imports.

The checker is `turn_memory.devtools.layers`; the last tests plant violations in a synthetic
package to show it reports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from turn_memory.devtools import layers

PKG = layers.package_root()


def test_every_import_goes_down_the_layers_and_no_units_form_a_cycle():
    edges, _ = layers.unit_edges(PKG)
    assert layers.violations(edges) == []


def test_every_unit_has_a_layer():
    _, lines = layers.unit_edges(PKG)
    assert sorted(set(lines) - set(layers.RANK)) == []
    assert sorted(set(layers.RANK) - set(lines)) == []  # no stale names either


def test_host_is_pure():
    """No event loop, no files, no sockets, no logging in the host model: those live in runtime/."""
    impure = {"asyncio", "os", "pathlib", "logging", "subprocess", "socket", "zmq", "time", "shutil"}
    found = []
    for path in sorted((PKG / "host").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in impure]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                found.append(f"{path.name}:{node.lineno} opens a file")
    assert found == []


# -- the checker itself ------------------------------------------------------------------
def _package(tmp: Path, files: dict[str, str]) -> Path:
    pkg = tmp / "python" / "turn_memory"
    for rel, text in {"__init__.py": "", **files}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(pkg).parents:
            (pkg / parent / "__init__.py").touch()
        path.write_text(text)
    return pkg


def test_the_checker_reports_a_planted_upward_import(tmp_path):
    pkg = _package(tmp_path, {
        "host/surface.py": "from turn_memory.turns.editor import Editor\n",  # host -> a feature
        "turns/editor.py": "from turn_memory.host import surface\nclass Editor: ...\n",
    })
    problems = layers.violations(layers.unit_edges(pkg)[0])
    assert "host -> turns (host.surface:1) runs against the layers" in problems
    assert "cycle: host -> turns -> host" in problems


def test_the_checker_reports_features_importing_each_other_even_lazily(tmp_path):
    pkg = _package(tmp_path, {
        "compaction/service.py": "def later():\n    from turn_memory.turns import service\n",
        "turns/service.py": "from ..host import markers\n",  # relative, and downward: fine
        "host/markers.py": "",
    })
    assert layers.violations(layers.unit_edges(pkg)[0]) == [
        "compaction -> turns (compaction.service:2) runs against the layers"]


def test_the_checker_reports_a_cycle_among_tools(tmp_path):
    """Tools share a rank and may import each other, but not both ways."""
    pkg = _package(tmp_path, {
        "logs/reader.py": "import turn_memory.inspection.fold\n",
        "inspection/fold.py": "from turn_memory.logs import reader\n",
        "doctor/command.py": "from turn_memory.logs.reader import x\n",
    })
    assert layers.violations(layers.unit_edges(pkg)[0]) == ["cycle: inspection -> logs -> inspection"]


def test_the_checker_reports_a_unit_without_a_layer(tmp_path):
    pkg = _package(tmp_path, {"landing/port.py": "from turn_memory.bridge import protocol\n",
                              "bridge/protocol.py": ""})
    assert layers.violations(layers.unit_edges(pkg)[0]) == ["landing has no layer (add it to LAYERS)"]
