"""The one place that finds turn-memory's package data: the JS shim, the prompts, the templates.

The repository keeps one copy of each at its top level (`shim-js/`, `prompts/`,
`profile-patch/`). A built wheel or sdist carries them inside this package, under
`turn_memory/_bundled/` (copied there by `setup.py`'s `build_py` at build time), and that
is where an installed turn-memory reads them — wherever it was installed from.

An *editable* install (`pip install -e <checkout>`) builds nothing: Python imports this
package straight from `<checkout>/python/turn_memory`, so the checkout's own folders are the
package data, and editing one takes effect at once. That is the one case where a path
outside the package is used, and it is recognised from this file's own location (the
package must be the checkout's `python/turn_memory`), never from the working directory or
an environment variable: an installed package never looks for a checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "_bundled"
#: resource -> folder name, in the repository and under `_bundled/`
FOLDERS = {"shim": "shim-js", "prompts": "prompts", "profile_patch": "profile-patch"}


#: how a broken or outdated install is replaced: turn-memory is installed from its clone, not an index
REINSTALL = "in the clone: pipx install --force .  (no pipx: python3 -m pip install --force-reinstall .)"


class ResourceError(RuntimeError):
    """The package data is missing: a broken install. The message says how to fix it."""


def editable_checkout() -> Path | None:
    """The checkout this package is imported from (an editable install), else None."""
    root = PACKAGE_DIR.parent.parent
    if PACKAGE_DIR.parent.name == "python" and (root / "pyproject.toml").is_file() \
            and (root / "shim-js" / "package.json").is_file():
        return root
    return None


def resource_dir(name: str) -> Path:
    folder = FOLDERS[name]
    checkout = editable_checkout()
    if checkout is not None:
        return checkout / folder
    bundled = BUNDLED_DIR / folder
    if bundled.is_dir():
        return bundled
    raise ResourceError(
        f"turn-memory's package data is missing: no {bundled} (this install was built without it); "
        f"reinstall it {REINSTALL}")


def shim_dir() -> Path:
    """The JS shim to pack (`package.json`, `lib/*.js`)."""
    return resource_dir("shim")


def profile_patch_dir() -> Path:
    """The managed-block templates (`bundle-layout.yml`, `preset-layout.yml`)."""
    return resource_dir("profile_patch")


def prompts_dir() -> Path:
    """`$TURN_MEMORY_PROMPTS` (a folder of your own prompt files), else the package's prompts."""
    env = os.environ.get("TURN_MEMORY_PROMPTS")
    return Path(env).expanduser() if env else resource_dir("prompts")
