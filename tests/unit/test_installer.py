"""`turn-memory install` / `uninstall` against a fake `dsh` (no real DSH, no pnpm).

The fake (fixtures/installer/fake_dsh.py) composes `--dump-config` from the
bundle patch files the way DSH does and logs `plugin add/remove` calls. Two
profiles: an rc8 bundle profile (dsh-base + dsh-headless, real patch files
copied from the 0.1.0-rc.8 packages) and a DSH-Desktop-like tree under a
"DeepSeek Harness" folder whose engine sits inside preset-standard.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import sys
import tarfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PureWindowsPath

import pytest

from turn_memory.cli import main as cli_main
from turn_memory.install import layout as L
from turn_memory.install import patchfile, patchyaml
from turn_memory.install.installer import Options, install, uninstall
from turn_memory.install.pack import build_tarball, pack_shim
from turn_memory.install.profile import (
    DshLocation,
    build_invocation,
    default_runner,
    desktop_wrapper_from_home,
    resolve_dsh,
    resolve_home,
)

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


# ---- fixtures ---------------------------------------------------------------------------------


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


# ---- pure helpers -----------------------------------------------------------------------------


def test_patchyaml_keeps_js_and_js_yaml_types() -> None:
    text = "- a: !!js process.env.X ?? 'y'\n  b: on\n  c: 012\n  d: 2026-10-01\n  e: 0x10\n  f: yes\n  g: ~\n"
    data = patchyaml.load(text)
    assert data == [{"a": "process.env.X ?? 'y'", "b": "on", "c": 12, "d": "2026-10-01", "e": 16, "f": "yes", "g": None}]
    assert isinstance(data[0]["a"], patchyaml.JsExpr)
    out = patchyaml.dump(data)
    assert "a: !!js process.env.X ?? 'y'" in out
    # every retypable string is quoted, so PyYAML 1.1 and js-yaml both read it back as a string
    assert "b: 'on'" in out and "d: '2026-10-01'" in out and "f: 'yes'" in out
    assert patchyaml.canonical(patchyaml.load(out)) == patchyaml.canonical(data)
    assert patchyaml.canonical(data)[0]["a"] == {"__jsExpr": "process.env.X ?? 'y'"}


def test_windows_cmd_invocation_and_wrapper_discovery() -> None:
    wrapper = desktop_wrapper_from_home(PureWindowsPath(r"D:\DeepSeek Harness\home"))
    assert wrapper == PureWindowsPath(r"D:\DeepSeek Harness\resources\runtime\cli\bin\dsh.cmd")
    line = build_invocation(wrapper, ["--profile", "desktop", "--dump-config"], windows=True,
                            comspec=r"C:\Windows\system32\cmd.exe")
    assert line == (r'"C:\Windows\system32\cmd.exe" /d /s /c '
                    r'""D:\DeepSeek Harness\resources\runtime\cli\bin\dsh.cmd" --profile desktop --dump-config"')
    assert build_invocation(PureWindowsPath(r"C:\x\dsh.exe"), ["a b"], windows=True) == [r"C:\x\dsh.exe", "a b"]
    assert build_invocation(Path("/usr/bin/dsh"), ["x"], windows=False) == ["/usr/bin/dsh", "x"]
    assert DshLocation(Path(str(wrapper)), "x").is_desktop_wrapper


def test_resolve_home_follows_dsh_home_paths(tmp_path: Path) -> None:
    assert resolve_home(str(tmp_path / "h"), {"DSH_HOME": "/elsewhere"}) == (tmp_path / "h").resolve()
    assert resolve_home(None, {"DSH_HOME": str(tmp_path / "e")}) == (tmp_path / "e").resolve()
    assert resolve_home(None, {"DSH_HOME": "   "}) == (Path.home() / ".dsh").resolve()  # blank = unset
    assert resolve_home("~/x", {}) == (Path.home() / "x").resolve()
    assert resolve_home(None, {}, desktop=str(tmp_path / "DeepSeek Harness")) == (tmp_path / "DeepSeek Harness" / "home").resolve()


def test_resolve_dsh_prefers_the_desktop_wrapper(desktop_world: World) -> None:
    found = resolve_dsh(None, None, desktop_world.home, which=lambda name: "/usr/bin/dsh")
    assert found.path == desktop_world.dsh.absolute() and found.is_desktop_wrapper
    via_install = resolve_dsh(None, str(desktop_world.root / "DeepSeek Harness"), desktop_world.home)
    assert via_install.path == desktop_world.dsh.absolute() and via_install.how == "--desktop"


def test_pack_is_deterministic_npm_layout(tmp_path: Path) -> None:
    shim = write_shim(tmp_path / "shim")
    first, files = build_tarball(shim)
    second, _ = build_tarball(shim)
    assert first == second
    assert files == ["README.md", "lib/bridge.js", "lib/index.js", "package.json"]
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [f"package/{f}" for f in files]
        assert {m.mtime for m in members} == {499162500}
    result = pack_shim(shim, tmp_path / "out")
    assert result.path.name == "dsh-turn-memory-0.1.0.tgz" and not result.unchanged
    assert pack_shim(shim, tmp_path / "out").unchanged


def test_patchfile_empty_flow_list_round_trip() -> None:
    entries = [{"id": "x", "disabled": True}]
    text = patchfile.with_block(DEFAULT_PATCH_TEXT, ["# header"], entries)
    assert "[]" not in text and text.startswith(DEFAULT_PATCH_TEXT.replace("[]\n", ""))
    assert patchyaml.load(text) == entries
    assert patchfile.with_block(text, ["# header"], entries) == text
    assert patchfile.remove_block(text) == DEFAULT_PATCH_TEXT
    with pytest.raises(patchfile.PatchFileError):
        patchfile.with_block("[{id: a, disabled: true}]\n", [], entries)


def test_classify_refuses_unmanaged_or_missing_engines() -> None:
    with pytest.raises(L.LayoutError, match="no live"):
        L.classify([{"id": "compaction-basic", "name": L.BASIC_ENGINE, "disabled": True}])
    with pytest.raises(L.LayoutError, match="already live"):
        L.classify([{"id": "compaction-basic", "name": L.BASIC_ENGINE},
                    {"id": "mine", "name": L.OUR_PACKAGE}])
    nested = [{"id": "p", "name": "x", "config": {"plugins": [
        {"id": "q", "name": "y", "config": {"plugins": [{"id": "c", "name": L.BASIC_ENGINE}]}}]}}]
    with pytest.raises(L.LayoutError, match="object config"):
        L.classify(nested)


# ---- bundle layout (rc8 dsh-base + dsh-headless) ----------------------------------------------


def test_bundle_install_reinstall_uninstall(bundle_world: World) -> None:
    w = bundle_world
    original_tree = w.dump()
    original_text = w.patch_file.read_bytes()
    original_pkg = (w.pdir / "package.json").read_bytes()

    out: list[str] = []
    assert install(w.options(out, extra_config={"compaction": {"thresholdRatio": 0.5}})) == 0, "\n".join(out)
    report = "\n".join(out)
    assert "verdict: installed" in report and "layout   : bundle" in report

    after = w.dump()
    census = L.live_engines(after)
    assert list(census) == [L.ROOT_SCOPE]
    assert [s.row for s in census[L.ROOT_SCOPE]] == [our_row({"compaction": {"thresholdRatio": 0.5}})]
    expected = copy.deepcopy(original_tree)
    find_row(expected, "compaction-basic")["disabled"] = True
    expected.append(our_row({"compaction": {"thresholdRatio": 0.5}}))
    assert patchyaml.canonical(after) == patchyaml.canonical(expected)  # every other row unchanged

    tgz = w.home / "turn-memory" / "dsh-turn-memory-0.1.0.tgz"
    assert w.plugin_calls() == [["plugin", "--profile", "headless", "add", str(tgz)]]
    assert json.loads((w.pdir / "package.json").read_text())["dependencies"]["dsh-turn-memory"].endswith(tgz.name)
    stamp = "turn-memory-20261130T120000Z.bak"
    assert (w.pdir / f"cordis.patch.yml.{stamp}").read_bytes() == original_text
    assert (w.pdir / f"package.json.{stamp}").read_bytes() == original_pkg
    text = w.patch_file.read_text()
    assert text.startswith(DEFAULT_PATCH_TEXT.replace("[]\n", "")) and patchfile.BEGIN in text
    assert text.rstrip().endswith(patchfile.END)

    # second install: nothing to do, no pnpm run, files untouched
    before = snapshot(w.pdir)
    out2: list[str] = []
    assert install(w.options(out2, extra_config={"compaction": {"thresholdRatio": 0.5}})) == 0, "\n".join(out2)
    assert snapshot(w.pdir) == before
    assert len(w.plugin_calls()) == 1
    assert "pnpm not run" in "\n".join(out2) and "unchanged" in "\n".join(out2)

    (w.home / "turn-memory" / "declared.json").write_text("{}")  # what a DSH run leaves there
    out3: list[str] = []
    assert uninstall(w.options(out3)) == 0, "\n".join(out3)
    assert "verdict: uninstalled" in "\n".join(out3)
    assert not (w.home / "turn-memory").exists()
    assert patchyaml.canonical(w.dump()) == patchyaml.canonical(original_tree)
    assert w.patch_file.read_bytes() == original_text
    assert w.plugin_calls()[-1] == ["plugin", "--profile", "headless", "remove", "dsh-turn-memory"]
    assert not tgz.exists()

    # uninstall again: idempotent, no pnpm call
    calls = len(w.plugin_calls())
    out4: list[str] = []
    assert uninstall(w.options(out4)) == 0, "\n".join(out4)
    assert len(w.plugin_calls()) == calls
    assert w.patch_file.read_bytes() == original_text


def test_bundle_dry_run_changes_nothing(bundle_world: World) -> None:
    w = bundle_world
    before = snapshot(w.root)
    out: list[str] = []
    assert install(w.options(out, dry_run=True)) == 0, "\n".join(out)
    report = "\n".join(out)
    assert patchfile.BEGIN in report and "- id: compaction-basic" in report and "dry run" in report
    assert w.plugin_calls() == []
    after = snapshot(w.root)
    after.pop("dsh-calls.jsonl", None)
    assert after == before

    # dry run with a block already present: recomposed without writing
    assert install(w.options([])) == 0
    before = snapshot(w.home)
    out2: list[str] = []
    assert install(w.options(out2, dry_run=True)) == 0, "\n".join(out2)
    assert "already holds exactly this block" in "\n".join(out2)
    assert uninstall(w.options(out2, dry_run=True)) == 0
    assert snapshot(w.home) == before


def test_verification_failure_restores_and_removes_plugin(bundle_world: World) -> None:
    w = bundle_world
    w.conf(ignore_user_patch=True)  # a DSH that silently drops the profile layer
    original_text = w.patch_file.read_bytes()
    out: list[str] = []
    assert install(w.options(out)) == 2
    report = "\n".join(out)
    assert "FAIL" in report and "rolling back" in report
    assert w.patch_file.read_bytes() == original_text
    assert w.plugin_calls()[-1] == ["plugin", "--profile", "headless", "remove", "dsh-turn-memory"]
    assert "dsh-turn-memory" not in json.loads((w.pdir / "package.json").read_text())["dependencies"]


def test_no_live_engine_is_refused_and_rolled_back(bundle_world: World) -> None:
    w = bundle_world
    w.patch_file.write_text("- id: compaction-basic\n  disabled: true\n", encoding="utf-8")
    out: list[str] = []
    assert install(w.options(out)) == 1
    assert "no live @deepseek-ai/dsh-compaction-basic" in "\n".join(out)
    assert w.patch_file.read_text() == "- id: compaction-basic\n  disabled: true\n"
    assert [c[3] for c in w.plugin_calls()] == ["add", "remove"]


def test_plugin_add_failure_leaves_patch_alone(bundle_world: World) -> None:
    w = bundle_world
    w.conf(plugin_fail=True)
    out: list[str] = []
    assert install(w.options(out)) == 1
    assert "dsh plugin add failed" in "\n".join(out)
    assert w.patch_file.read_text() == DEFAULT_PATCH_TEXT


def test_reinstall_without_dump_default_config(bundle_world: World) -> None:
    """A dsh without --dump-default-config: the block is removed (backed up) before dumping."""
    w = bundle_world
    assert install(w.options([])) == 0
    text = w.patch_file.read_bytes()
    w.conf(no_default_dump=True)
    out: list[str] = []
    assert install(w.options(out, force_plugin=True, now=lambda: datetime(2026, 12, 1, tzinfo=timezone.utc))) == 0, "\n".join(out)
    assert "managed block removed first" in "\n".join(out)
    assert w.patch_file.read_bytes() == text


def test_cli_entry_point(bundle_world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    w = bundle_world
    monkeypatch.setenv("DSH_HOME", str(w.home))
    argv = ["install", "--profile", "headless", "--dsh", str(w.dsh), "--shim-dir", str(w.shim),
            "--set", "compaction.thresholdRatio=0.45", "--set", "engine.startTimeoutMs=20000", "--dry-run"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "thresholdRatio: 0.45" in out and "startTimeoutMs: 20000" in out and "serve" in out


def test_a_config_typo_is_refused_before_anything_changes(bundle_world: World, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`--set turns.enabeld=false` would make the engine refuse every handshake: refused here,
    naming the key, the nearest valid one and the corrected command; no file, no dsh call."""
    w = bundle_world
    monkeypatch.setenv("DSH_HOME", str(w.home))
    before = snapshot(w.root)
    argv = ["install", "--profile", "headless", "--dsh", str(w.dsh), "--shim-dir", str(w.shim),
            "--set", "turns.enabeld=false"]
    assert cli_main(argv) == 1
    out = capsys.readouterr().out
    assert "unknown key turns.enabeld (did you mean turns.enabled?)" in out and "nothing was changed" in out
    assert "fix: turn-memory install --profile headless --set turns.enabled=false" in out
    assert snapshot(w.root) == before and w.plugin_calls() == []

    # a bound, through --config-json: the model's own message, and still nothing written
    assert cli_main([*argv[:-2], "--config-json", '{"compaction": {"thresholdRatio": 1.5}}']) == 1
    out = capsys.readouterr().out
    assert "compaction.thresholdRatio: Input should be less than 1 (got 1.5)" in out
    assert snapshot(w.root) == before and w.plugin_calls() == []


# ---- preset layout (DSH Desktop) ---------------------------------------------------------------


def test_desktop_install_rewrites_preset_and_restores(desktop_world: World) -> None:
    w = desktop_world
    original_tree = w.dump()
    original_bytes = w.patch_file.read_bytes()
    seen: list[Path] = []

    def runner(exe, args, env, cwd, timeout):  # injectable: record, then run as usual
        seen.append(exe)
        return default_runner(exe, args, env, cwd, timeout)

    out: list[str] = []
    # Only the home is given, named like a Windows Desktop install: the wrapper is found from it.
    opts = w.options(out, dsh=None, dsh_home=str(w.root / "DeepSeek Harness" / "home"), runner=runner)
    assert install(opts) == 0, "\n".join(out)
    report = "\n".join(out)
    assert "Desktop wrapper next to the home" in report and "layout   : preset" in report
    assert seen and all(PureWindowsPath(str(p)).parts[-5:] == ("resources", "runtime", "cli", "bin", "dsh.cmd")
                        for p in seen)

    after = w.dump()
    census = L.live_engines(after)
    assert L.ROOT_SCOPE not in census  # host rows stay disabled by the web-app layer
    assert [s.row for s in census["preset-standard"]] == [our_row()]
    assert "preset-review" not in census

    expected = copy.deepcopy(original_tree)
    group = find_row(find_row(expected, "preset-standard")["config"]["plugins"], "compaction")
    at = [r["id"] for r in group["config"]].index("compaction-basic")
    group["config"][at]["disabled"] = True
    group["config"].insert(at + 1, our_row())
    assert patchyaml.canonical(after) == patchyaml.canonical(expected)
    new_group = find_row(find_row(after, "preset-standard")["config"]["plugins"], "compaction")
    assert new_group["isolate"] == {"compaction": True, "toolResultPruner": True}
    assert [r["id"] for r in new_group["config"]] == ["compaction-basic", "turn-memory", "command-compact",
                                                      "tool-result-pruner"]
    # js-yaml-only readings survived the copy: strings stay strings, 012 stays 12
    preset = find_row(after, "preset-standard")["config"]
    assert preset["since"] == "2026-10-01" and preset["revision"] == 12
    assert find_row(preset["plugins"], "model-selection")["config"]["reasoning"] == "on"

    text = w.patch_file.read_bytes()
    assert text.startswith(original_bytes)  # user entries and comments untouched, CRLF kept
    block = text[len(original_bytes):].decode()
    assert "\r\n" in block and "\n" not in block.replace("\r\n", "")
    assert "- id: preset-standard" in block and "!!js" in block

    tgz = w.home / "turn-memory" / "dsh-turn-memory-0.1.0.tgz"
    assert w.plugin_calls() == [["plugin", "--profile", "desktop", "add", str(tgz)]]

    # reinstall: recomposed from --dump-default-config + user entries; byte-identical result
    before = snapshot(w.pdir)
    out2: list[str] = []
    assert install(w.options(out2, dsh=None)) == 0, "\n".join(out2)
    assert snapshot(w.pdir) == before

    out3: list[str] = []
    assert uninstall(w.options(out3, dsh=None, desktop=str(w.root / "DeepSeek Harness"), dsh_home=None)) == 0, \
        "\n".join(out3)
    assert patchyaml.canonical(w.dump()) == patchyaml.canonical(original_tree)
    assert w.patch_file.read_bytes() == original_bytes
    assert w.plugin_calls()[-1] == ["plugin", "--profile", "desktop", "remove", "dsh-turn-memory"]


# ---- the shim's declarations cache ------------------------------------------------------------


def _handshake_declarations(policy: dict) -> dict:
    """What the engine's handshake declares for `policy`, in the JSON the shim caches."""
    import asyncio

    from turn_memory.bridge.protocol import HelloParams
    from turn_memory.bridge.server import Peer
    from turn_memory.engine import Engine

    hello = HelloParams(protocol=1, dshVersion="0.1.0-rc.8", dialect="rc8", secret="s", pid=1,
                        checkpointSource={"kind": "plugin", "plugin": "compact", "compactionId": "probe"}, config=policy)

    async def shake():
        return Engine().on_hello(Peer(b"p"), hello)

    result = asyncio.run(shake()).model_dump(mode="json", exclude_none=True)
    return {"publicTools": result["publicTools"], "contextSections": result["contextSections"]}


@pytest.mark.parametrize("policy", [{}, {"sessionHistory": {"enabled": False}}], ids=["default", "history-off"])
def test_install_seeds_the_shims_declarations_with_what_the_handshake_declares(bundle_world: World, policy: dict) -> None:
    # a fresh install's first DSH start must register the memory tools before its first
    # request: a tool list that changes mid-session breaks the provider's cached prefix
    w = bundle_world
    out: list[str] = []
    assert install(w.options(out, extra_config=policy)) == 0, "\n".join(out)
    cache = w.home / "turn-memory" / "declared.json"
    assert json.loads(cache.read_text(encoding="utf-8")) == _handshake_declarations(policy)
    names = [t["name"] for t in json.loads(cache.read_text(encoding="utf-8"))["publicTools"]]
    assert ("read_session_history" in names) == (policy == {})
    # byte-for-byte what the shim's JSON.stringify writes: its first handshake rewrites nothing
    assert cache.read_text(encoding="utf-8") == json.dumps(json.loads(cache.read_text(encoding="utf-8")),
                                                           ensure_ascii=False, separators=(",", ":"))
    assert "declared :" in "\n".join(out)

