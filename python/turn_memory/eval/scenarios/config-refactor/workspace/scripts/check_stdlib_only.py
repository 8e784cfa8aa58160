"""Fail when a package imports anything outside the standard library (the zipapp rule)."""

import ast
import sys
from pathlib import Path

ALLOWED_LOCAL = {"invoicer", "plugins"}


def third_party(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ALLOWED_LOCAL:
                    found.append(f"{path}:{node.lineno} imports {name}")
    return found


if __name__ == "__main__":
    problems = [p for root in sys.argv[1:] for p in third_party(Path(root))]
    print("\n".join(problems) or "standard library only")
    sys.exit(1 if problems else 0)
