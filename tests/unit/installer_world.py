"""A DSH home with a fake `dsh` (fixtures/installer/fake_dsh.py) for the installer's and
doctor's tests, and helpers that run a printed fix exactly as printed.

The fake composes `--dump-config` from the bundle patch files the way DSH does and logs
`plugin add/remove` calls. Two homes: an rc8 bundle profile (dsh-base + dsh-headless, real
patch files copied from the 0.1.0-rc.8 packages) and a DSH-Desktop-like tree under a
"DeepSeek Harness" folder whose engine sits inside preset-standard.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from turn_memory.cli import main as cli_main
from turn_memory.install import patchyaml
from turn_memory.install.installer import Options
from turn_memory.install.profile import default_runner

FIX = Path(__file__).parent / "fixtures" / "installer"
DESKTOP_FIX = FIX / "desktop"
RC8_BUNDLES = {
    "@deepseek-ai/dsh-base": str(FIX / "dsh-base.cordis.patch.yml"),
    "@deepseek-ai/dsh-headless": str(FIX / "dsh-headless.cordis.patch.yml"),
}
DESKTOP_BUNDLES = {
    "@deepseek-ai/dsh-base": str(FIX / "dsh-base.cordis.patch.yml"),
    "@deepseek-ai/dsh-web-app": [
        str(DESKTOP_FIX / "dsh-web-app.cordis.patch.yml"),
        str(DESKTOP_FIX / "dsh-web-app.presets.standard.patch.yml"),
    ],
    "dsh-gitbash-shell": str(DESKTOP_FIX / "dsh-gitbash-shell.cordis.patch.yml"),
}
DEFAULT_PATCH_TEXT = (
    "# Your patch layer for this dsh profile, applied after every bundle layer:\n"
    "# a top-level YAML array of loader patch entries (id-targeted config\n"
    "# overrides, disables, and insert lists; `!!js` expressions allowed).\n"
    "[]\n"
)
OUR_COMMAND = [str(Path(sys.executable).absolute()), "-m", "turn_memory", "serve"]
FIXED_NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)




def write_fake_dsh(dest: Path, conf: dict) -> Path:
    """Copy the fake next to its config; the shebang points at this interpreter."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    body = (FIX / "fake_dsh.py").read_text(encoding="utf-8").split("\n", 1)[1]
    dest.write_text(f"#!{sys.executable}\n{body}", encoding="utf-8")
    dest.chmod(0o755)
    (dest.parent / "fake_dsh.json").write_text(json.dumps(conf), encoding="utf-8")
    return dest


def write_shim(root: Path) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "package.json").write_text(
        json.dumps({"name": "dsh-turn-memory", "version": "0.1.0", "type": "module", "main": "lib/index.js",
                    "dependencies": {"zeromq": "^6.0.0"}}, indent=2),
        encoding="utf-8",
    )
    (root / "README.md").write_text("# dsh-turn-memory\n", encoding="utf-8")
    (root / "lib" / "index.js").write_text("export default class TurnMemory {}\n", encoding="utf-8")
    (root / "lib" / "bridge.js").write_text("export const bridge = 1;\n", encoding="utf-8")
    (root / "node_modules").mkdir()  # must not be packed
    (root / "node_modules" / "junk.js").write_text("nope\n", encoding="utf-8")
    return root


def write_profile(pdir: Path, bundles: list[str], patch_text: str, *, crlf: bool = False) -> None:
    pdir.mkdir(parents=True)
    (pdir / "package.json").write_text(
        json.dumps({"name": f"dsh-profile-{pdir.name}", "private": True, "dependencies": {},
                    "dsh": {"profile": {"bundles": bundles}}}, indent=2) + "\n",
        encoding="utf-8",
    )
    (pdir / "cordis.yml").write_text("[]\n", encoding="utf-8")
    (pdir / "pnpm-workspace.yaml").write_text("packages:\n  - .\n\nnodeLinker: hoisted\n", encoding="utf-8")
    data = patch_text.replace("\n", "\r\n") if crlf else patch_text
    (pdir / "cordis.patch.yml").write_bytes(data.encode("utf-8"))


@dataclass
class World:
    root: Path
    home: Path
    profile: str
    dsh: Path
    shim: Path
    log: Path

    @property
    def pdir(self) -> Path:
        return self.home / "profiles" / self.profile

    @property
    def patch_file(self) -> Path:
        return self.pdir / "cordis.patch.yml"

    def conf(self, **changes: object) -> None:
        path = self.dsh.parent / "fake_dsh.json"
        conf = json.loads(path.read_text(encoding="utf-8"))
        conf.update(changes)
        path.write_text(json.dumps(conf), encoding="utf-8")

    def dump(self) -> list[dict]:
        result = default_runner(self.dsh, ["--profile", self.profile, "--dump-config"],
                                {**os.environ, "DSH_HOME": str(self.home)}, None, 60)
        assert result.returncode == 0, result.stderr
        return patchyaml.load_entry_list(result.stdout, what="dump")

    def plugin_calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]
        return [c["argv"] for c in calls if c["argv"][:1] == ["plugin"]]

    def options(self, out: list[str], **kw: object) -> Options:
        base = dict(profile=self.profile, dsh_home=str(self.home), dsh=str(self.dsh), shim_dir=self.shim,
                    env={**os.environ, "DSH_HOME": ""}, out=out.append, now=lambda: FIXED_NOW)
        base.update(kw)
        return Options(**base)  # type: ignore[arg-type]


@pytest.fixture
def bundle_world(tmp_path: Path) -> World:
    home = tmp_path / "dsh-home"
    log = tmp_path / "dsh-calls.jsonl"
    dsh = write_fake_dsh(tmp_path / "bin" / "dsh", {"bundles": RC8_BUNDLES, "log": str(log)})
    write_profile(home / "profiles" / "headless", ["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-headless"],
                  DEFAULT_PATCH_TEXT)
    return World(tmp_path, home, "headless", dsh, write_shim(tmp_path / "shim-js"), log)


@pytest.fixture
def desktop_world(tmp_path: Path) -> World:
    install_dir = tmp_path / "DeepSeek Harness"
    home = install_dir / "home"
    log = tmp_path / "dsh-calls.jsonl"
    wrapper = write_fake_dsh(install_dir / "resources" / "runtime" / "cli" / "bin" / "dsh.cmd",
                             {"bundles": DESKTOP_BUNDLES, "log": str(log)})
    write_profile(home / "profiles" / "desktop", list(DESKTOP_BUNDLES),
                  (DESKTOP_FIX / "profile.cordis.patch.yml").read_text(encoding="utf-8"), crlf=True)
    return World(tmp_path, home, "desktop", wrapper, write_shim(tmp_path / "shim-js"), log)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def our_row(extra: dict | None = None) -> dict:
    config: dict = {"engine": {"command": OUR_COMMAND}}
    config.update(extra or {})
    return {"id": "turn-memory", "name": "dsh-turn-memory", "config": config}


def find_row(rows: list[dict], row_id: str) -> dict:
    return next(r for r in rows if r.get("id") == row_id)


def run_printed(command: str) -> int:
    """Run a fix exactly as printed (the shell's word splitting, then the real CLI)."""
    argv = shlex.split(command)
    assert argv[0] == "turn-memory", command
    return cli_main(argv[1:])


def printed_fix(err: str) -> str:
    """The fix of a one-line error `turn-memory <command>: error: … (fix: …)`."""
    (line,) = [line for line in err.splitlines() if ": error: " in line]
    assert line.startswith("turn-memory ") and line.endswith(")"), line
    return line[line.rindex("(fix: ") + len("(fix: "):-1]
