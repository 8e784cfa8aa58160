"""Build hook: the wheel carries the shim, the prompts and the profile-patch templates.

They live once, at the repository's top level (`shim-js/`, `prompts/`, `profile-patch/`);
`build_py` copies them into the built package as `turn_memory/_bundled/<folder>/`, which is
where `turn_memory.resources` finds them in an installed turn-memory. The sdist carries the
top-level folders (MANIFEST.in), so a wheel built from it gets the same files. An editable
install copies nothing: the package is the checkout then (see turn_memory/resources.py).
Everything else about the package is declared in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: top-level folder -> glob patterns of the files the package carries (mirrored in MANIFEST.in)
BUNDLED = {
    "shim-js": ["package.json", "README.md", "lib/**/*.js", "lib/**/*.json"],
    "prompts": ["*.md"],
    "profile-patch": ["*.md", "*.yml"],
}
TARGET = Path("turn_memory") / "_bundled"


def bundled_files() -> list[tuple[Path, Path]]:
    """(source, path relative to the build dir) of every bundled file, sorted."""
    out: dict[Path, Path] = {}
    for folder, patterns in BUNDLED.items():
        base = ROOT / folder
        for pattern in patterns:
            for src in base.glob(pattern):
                if src.is_file() and "node_modules" not in src.relative_to(base).parts:
                    out[src] = TARGET / folder / src.relative_to(base)
    missing = [folder for folder in BUNDLED if not any(dst.parts[2] == folder for dst in out.values())]
    if missing:
        raise SystemExit(f"turn-memory build: no files found in {', '.join(missing)} under {ROOT}")
    return sorted(out.items())


class build_py_with_resources(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the package is the checkout itself: nothing to copy
        target = Path(self.build_lib) / TARGET
        if target.exists():
            shutil.rmtree(target)  # a stale copy from an earlier build must not linger
        for src, rel in bundled_files():
            dst = Path(self.build_lib) / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs += [str(Path(self.build_lib) / rel) for _, rel in bundled_files()]
        return outputs


setup(cmdclass={"build_py": build_py_with_resources})
