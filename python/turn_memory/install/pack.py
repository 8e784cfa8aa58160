"""Build the npm tarball of the JS shim (`shim-js/`) without npm.

npm's format: a gzip'd tar whose entries live under `package/`. We include
`package.json`, `README.md` if present and everything under `lib/`. The
output is deterministic (sorted entries, fixed mtime/owner/mode, gzip mtime 0)
so the same sources give the same bytes: pnpm's lockfile records the
tarball's integrity, and a re-install with unchanged sources can then be
recognised and skipped. The tarball is written under `$DSH_HOME/turn-memory/`
because the profile's package.json keeps referring to its path.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

from turn_memory.files import FILES

# npm pack stamps every entry with this date (1985-10-26T08:15:00Z) for reproducibility.
NPM_EPOCH = 499162500
EXPECTED_NAME = "dsh-turn-memory"


class PackError(Exception):
    pass


@dataclass(frozen=True)
class PackResult:
    path: Path
    name: str
    version: str
    files: tuple[str, ...]
    sha256: str
    unchanged: bool  # the file already held exactly these bytes


def shim_files(shim_dir: Path) -> list[str]:
    """Relative POSIX paths to pack, sorted."""
    if not (shim_dir / "package.json").is_file():
        raise PackError(f"{shim_dir} has no package.json (is --shim-dir the shim-js folder?)")
    files = ["package.json"]
    if (shim_dir / "README.md").is_file():
        files.append("README.md")
    lib = shim_dir / "lib"
    if lib.is_dir():
        files.extend(p.relative_to(shim_dir).as_posix() for p in lib.rglob("*") if p.is_file() and not p.is_symlink())
    return sorted(set(files))


def read_manifest(shim_dir: Path) -> dict:
    try:
        manifest = json.loads((shim_dir / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PackError(f"cannot read {shim_dir / 'package.json'}: {err}") from err
    if manifest.get("name") != EXPECTED_NAME:
        raise PackError(f"{shim_dir / 'package.json'} names {manifest.get('name')!r}, expected {EXPECTED_NAME!r}")
    if not isinstance(manifest.get("version"), str):
        raise PackError(f"{shim_dir / 'package.json'} has no version")
    return manifest


def build_tarball(shim_dir: Path) -> tuple[bytes, list[str]]:
    files = shim_files(shim_dir)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            data = (shim_dir / rel).read_bytes()
            info = tarfile.TarInfo(f"package/{rel}")
            info.size = len(data)
            info.mtime = NPM_EPOCH
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    # gzip.compress(mtime=0) writes no file name and a zero timestamp: stable bytes.
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0), files


def pack_shim(shim_dir: Path, out_dir: Path, *, write: bool = True) -> PackResult:
    """The tarball, written to `out_dir` (`write=False`, a dry run: only what it would be)."""
    manifest = read_manifest(shim_dir)
    data, files = build_tarball(shim_dir)
    path = out_dir / f"{manifest['name']}-{manifest['version']}.tgz"
    unchanged = path.is_file() and path.read_bytes() == data
    if write and not unchanged:
        out_dir.mkdir(parents=True, exist_ok=True)
        FILES.write(path, data)
    return PackResult(path, manifest["name"], manifest["version"], tuple(files), hashlib.sha256(data).hexdigest(), unchanged)

