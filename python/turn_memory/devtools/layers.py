"""The package's layers, read from its imports: who imports whom, and what runs against them.

A *unit* is a top-level package (`host`, `turns`, …) or module (`engine`, `config`, …) of
`turn_memory`. Each unit has a rank; an import must go to a lower rank, or stay inside its
unit. Features share one rank and so never import each other (they meet through `host/` and
`runtime/interfaces.py`, wired by `engine.py`); tools share the top rank and may import each
other, but no two units may form a cycle. `tests/unit/test_layers.py` enforces this;
`python -m turn_memory.devtools.layers [ROOT]` prints the graph with line counts.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "turn_memory"

#: rank -> the units on it, lowest first (docs/architecture.md, "Layers")
LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"__init__", "resources", "faults", "config", "files", "paths"}),
    ("prompts and wire", {"prompts", "bridge"}),
    ("host model (pure)", {"host"}),
    ("runtime state", {"runtime"}),
    ("features", {"turns", "compaction", "history", "continuation", "hints"}),
    ("composition", {"catalog"}),
    ("engine", {"engine"}),
    ("tools", {"logs", "inspection", "install", "doctor", "devtools", "cli", "cli_output", "config_command", "demo",
               "eval", "serve", "__main__"}),
]
#: ranks whose units may import each other (still without a cycle)
OPEN_RANKS = {"tools"}

RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}
LAYER_NAME = {unit: name for name, units in LAYERS for unit in units}


@dataclass(frozen=True)
class Edge:
    source: str  # unit
    target: str  # unit
    where: str  # module:line of one import making the edge


def package_root(root: Path | None = None) -> Path:
    return (root or Path(__file__).resolve().parents[3]) / "python" / PACKAGE


def _unit_of_module(rel_parts: list[str]) -> str:
    return rel_parts[0] if len(rel_parts) > 1 else rel_parts[0].removesuffix(".py")


def module_imports(pkg: Path) -> dict[str, list[tuple[str, int]]]:
    """Module (dotted, relative to the package) -> the turn_memory modules it imports, with
    the line (every import: top level, inside functions, under TYPE_CHECKING)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).with_suffix("")
        name = ".".join(rel.parts)
        package = ".".join(rel.parts[:-1])  # what a relative import starts from
        found: list[tuple[str, int]] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == PACKAGE]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".") if package else []
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join([PACKAGE, *base, *([node.module] if node.module else [])])
                elif node.module and node.module.split(".")[0] == PACKAGE:
                    module = node.module
                else:
                    continue
                # `from turn_memory.host import continuations` names a submodule: it is the target
                found += [(f"{module}.{a.name}", node.lineno) for a in node.names]
        out[name] = found
    return out


def unit_edges(pkg: Path) -> tuple[list[Edge], dict[str, int]]:
    """The edges between units (one per source/target pair) and each unit's line count."""
    units = {p.name if p.is_dir() else p.stem for p in pkg.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    lines: dict[str, int] = defaultdict(int)
    for path in pkg.rglob("*.py"):
        lines[_unit_of_module(list(path.relative_to(pkg).parts))] += path.read_text().count("\n")
    edges: dict[tuple[str, str], Edge] = {}
    for module, imports in module_imports(pkg).items():
        source = module.split(".")[0]
        for target_module, line in imports:
            parts = target_module.split(".")[1:]
            target = parts[0] if parts and parts[0] in units else "__init__"
            if target != source:
                edges.setdefault((source, target), Edge(source, target, f"{module}:{line}"))
    return sorted(edges.values(), key=lambda e: (e.source, e.target)), dict(lines)


def violations(edges: list[Edge], rank: dict[str, int] | None = None,
               open_ranks: set[int] | None = None) -> list[str]:
    """Every edge that runs against the layers, every unit with no layer, and every cycle."""
    rank = RANK if rank is None else rank
    if open_ranks is None:
        open_ranks = {i for i, (name, _) in enumerate(LAYERS) if name in OPEN_RANKS}
    problems = []
    for e in edges:
        for unit in (e.source, e.target):
            if unit not in rank:
                problems.append(f"{unit} has no layer (add it to LAYERS)")
        if e.source not in rank or e.target not in rank:
            continue
        a, b = rank[e.source], rank[e.target]
        if b > a or (b == a and a not in open_ranks):
            problems.append(f"{e.source} -> {e.target} ({e.where}) runs against the layers")
    problems += [f"cycle: {' -> '.join(c)}" for c in cycles(edges)]
    return sorted(set(problems))


def cycles(edges: list[Edge]) -> list[list[str]]:
    """One cycle per strongly connected group of units that has more than one unit."""
    graph: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        graph[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [g + [g[0]] for g in groups]


def report(root: Path | None = None) -> str:
    edges, lines = unit_edges(package_root(root))
    out: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        out[e.source].append(e.target)
    rows = [f"{unit:14} {LAYER_NAME.get(unit, '?'):18} {lines[unit]:6}  -> {', '.join(out[unit])}"
            for unit in sorted(lines, key=lambda u: (RANK.get(u, 99), u))]
    problems = violations(edges)
    return "\n".join(rows + [f"total {sum(lines.values())} lines", *(problems or ["no layer violations"])])


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
