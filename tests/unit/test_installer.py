"""`turn-memory install` / `uninstall` against a fake `dsh` (no real DSH, no pnpm): see installer_world."""

from __future__ import annotations

import copy
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
from datetime import datetime, timezone
from pathlib import Path, PureWindowsPath

import pytest

from installer_world import (
    DEFAULT_PATCH_TEXT,
    OUR_COMMAND,
    World,
    bundle_world,
    desktop_world,
    find_row,
    our_row,
    printed_fix,
    run_printed,
    snapshot,
    write_shim,
)
from turn_memory.cli import main as cli_main
from turn_memory.install import layout as L
from turn_memory.install import patchfile, patchyaml
from turn_memory.install.installer import install, uninstall
from turn_memory.install.pack import build_tarball, pack_shim
from turn_memory.install.profile import (
    DshLocation,
    build_invocation,
    default_runner,
    desktop_wrapper_from_home,
    resolve_dsh,
    resolve_home,
)
from turn_memory.paths import expand_path

__all__ = ["bundle_world", "desktop_world"]  # fixtures, used by name

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
    assert install(w.options(out)) == 3
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


def node20_on_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose `node` on PATH is Node 20 (older than DSH needs)."""
    old_node = tmp_path / "node20" / "node"
    old_node.parent.mkdir()
    old_node.write_text("#!/bin/sh\necho v20.20.2\n")
    old_node.chmod(0o755)
    return {**os.environ, "DSH_HOME": "", "PATH": f"{old_node.parent}{os.pathsep}{os.environ['PATH']}"}


def test_a_failed_plugin_add_names_a_node_too_old_for_dsh(bundle_world: World, tmp_path: Path) -> None:
    """pnpm runs on the `node` on PATH: Node 20 there is the cause, said with the one requirement."""
    w = bundle_world
    w.conf(plugin_fail=True)
    out: list[str] = []
    assert install(w.options(out, env=node20_on_path(tmp_path))) == 1
    (error,) = [line for line in out if ": error: " in line]
    assert error.startswith("turn-memory install: error: dsh plugin add failed (1) (node v20.20.2 is older than "
                            "22.19; DSH needs Node >= 22.19 on PATH"), error


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
    naming the key, the nearest valid one and the corrected command; no file, no dsh call.
    The fix is the same command, corrected, and it works as printed."""
    w = bundle_world
    monkeypatch.setenv("DSH_HOME", str(w.home))
    before = snapshot(w.root)
    argv = ["install", "--profile", "headless", "--dsh", str(w.dsh), "--shim-dir", str(w.shim),
            "--set", "compaction.retainTurns=2", "--set", "turns.enabeld=false"]
    assert cli_main(argv) == 2  # the command line's own key: bad usage
    err = capsys.readouterr().err
    assert err.startswith("turn-memory install: error: invalid turn-memory config: "
                          "unknown key turns.enabeld (did you mean turns.enabled?); nothing was changed (fix: "), err
    fix = printed_fix(err)
    assert fix == shlex.join(["turn-memory", "install", "--profile", "headless", "--dsh", str(w.dsh), "--shim-dir",
                              str(w.shim), "--set", "compaction.retainTurns=2", "--set", "turns.enabled=false"])
    assert snapshot(w.root) == before and w.plugin_calls() == []

    # a bound, through --config-json: the model's own message; the fix sets the key's default instead
    assert cli_main([*argv[:-4], "--config-json", '{"compaction": {"thresholdRatio": 1.5}}']) == 2
    err = capsys.readouterr().err
    assert "compaction.thresholdRatio: Input should be less than 1 (got 1.5)" in err
    assert printed_fix(err) == shlex.join(["turn-memory", "install", "--profile", "headless", "--dsh", str(w.dsh),
                                           "--shim-dir", str(w.shim), "--set", "compaction.thresholdRatio=0.8"])
    assert snapshot(w.root) == before and w.plugin_calls() == []

    assert run_printed(fix) == 0, capsys.readouterr()
    assert find_row(w.dump(), "turn-memory")["config"] == {"engine": {"command": OUR_COMMAND},
                                                           "compaction": {"retainTurns": 2}, "turns": {"enabled": False}}


def test_a_reinstall_keeps_the_rows_keys_and_its_dry_run_lists_each_one(bundle_world: World) -> None:
    """The documented fix `--set engine.logFile=…` must not drop `turns.minTurnTokens: 0`."""
    w = bundle_world
    assert install(w.options([], extra_config={"turns": {"minTurnTokens": 0}})) == 0
    before = snapshot(w.root)
    out: list[str] = []
    assert install(w.options(out, dry_run=True, extra_config={"engine": {"logFile": "~/tm/engine.log"}})) == 0
    report = "\n".join(out)
    assert "  config   : merged into the installed row (a key is kept unless given; --unset KEY removes one)\n" \
           f"    kept     engine.command = {json.dumps(OUR_COMMAND)}\n" \
           "    set      engine.logFile = ~/tm/engine.log  (new)\n" \
           "    kept     turns.minTurnTokens = 0\n" in report, report
    assert "minTurnTokens: 0" in report and "logFile: ~/tm/engine.log" in report  # in the block it would write
    after = snapshot(w.root)
    after.pop("dsh-calls.jsonl", None)
    before.pop("dsh-calls.jsonl", None)
    assert after == before

    assert install(w.options([], extra_config={"engine": {"logFile": "~/tm/engine.log"}})) == 0
    row = find_row(w.dump(), "turn-memory")
    assert row["config"] == {"engine": {"command": OUR_COMMAND, "logFile": "~/tm/engine.log"},
                             "turns": {"minTurnTokens": 0}}

    out = []
    assert install(w.options(out, unset=["turns.minTurnTokens", "compaction"], extra_config={
        "turns": {"enabled": False}})) == 0, "\n".join(out)
    assert "    removed  turns.minTurnTokens = 0  (--unset)" in out
    assert "    set      turns.enabled = false  (new)" in out
    assert "  note     : --unset compaction: the installed row does not set it (nothing to remove)" in out
    assert find_row(w.dump(), "turn-memory")["config"] == {
        "engine": {"command": OUR_COMMAND, "logFile": "~/tm/engine.log"}, "turns": {"enabled": False}}

    out = []
    assert install(w.options(out, replace_config=True)) == 0, "\n".join(out)
    assert "  config   : --replace-config: written from this command's options only" in out
    assert "    removed  engine.logFile = ~/tm/engine.log  (--replace-config)" in out
    assert "    removed  turns.enabled = false  (--replace-config)" in out
    assert find_row(w.dump(), "turn-memory")["config"] == {"engine": {"command": OUR_COMMAND}}


def test_a_bad_key_the_installed_row_already_holds_is_unset_by_the_printed_fix(
        bundle_world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand edit misspelt a key of the installed row: merging would keep it, so install refuses
    and prints the command that renames it (`--set` the right key, `--unset` the wrong one)."""
    w = bundle_world
    assert install(w.options([], extra_config={"turns": {"enabled": False}})) == 0
    w.patch_file.write_text(w.patch_file.read_text().replace("enabled: false", "enabeld: false"))
    before = snapshot(w.root)
    monkeypatch.setenv("DSH_HOME", "")
    assert cli_main(["install", "--profile", "headless", "--dsh-home", str(w.home), "--dsh", str(w.dsh),
                     "--shim-dir", str(w.shim), "--set", "compaction.retainTurns=2"]) == 1
    err = capsys.readouterr().err
    assert "error: invalid turn-memory config in the installed row: unknown key turns.enabeld (did you mean " \
           "turns.enabled?); nothing was changed" in err
    fix = printed_fix(err)
    assert fix == shlex.join(["turn-memory", "install", "--profile", "headless", "--dsh-home", str(w.home), "--dsh",
                              str(w.dsh), "--shim-dir", str(w.shim), "--set", "compaction.retainTurns=2",
                              "--unset", "turns.enabeld", "--set", "turns.enabled=false"])
    assert snapshot(w.root) == before
    assert run_printed(fix) == 0, capsys.readouterr()
    assert find_row(w.dump(), "turn-memory")["config"] == {"engine": {"command": OUR_COMMAND},
                                                           "turns": {"enabled": False}, "compaction": {"retainTurns": 2}}


def test_a_missing_profile_lists_the_profiles_there_and_its_fix_works(
        bundle_world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    w = bundle_world
    w.conf(templates={"web": ["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-headless"]})
    monkeypatch.setenv("DSH_HOME", "")
    where = ["--dsh-home", str(w.home), "--dsh", str(w.dsh), "--shim-dir", str(w.shim)]
    profiles = w.home / "profiles"

    # a name DSH does not ship: the profiles that exist, how to create one, and an install into one that exists
    assert cli_main(["install", "--profile", "nope", *where]) == 1
    err = capsys.readouterr().err
    assert f"error: profile 'nope' does not exist in {profiles} (profiles there: headless); dsh did not create it " \
           "(Error: dsh: profile \"nope\" does not exist; create it with 'dsh plugin --profile nope add <package>'); " \
           "dsh creates only the profiles it ships (headless, web, sdk, acp) on first use; create your own with " \
           "`dsh plugin --profile nope add <package>`, or install into 'headless'" in err, err
    assert printed_fix(err) == shlex.join(["turn-memory", "install", "--profile", "headless", *where])
    assert not (profiles / "nope").exists() and w.plugin_calls() == []

    # a name DSH ships, in a dry run: nothing is created; the fix is the real install, which lets dsh create it
    assert cli_main(["install", "--profile", "web", *where, "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert f"error: profile 'web' does not exist in {profiles} (profiles there: headless); a dry run does not ask " \
           "dsh to create it; install without --dry-run lets dsh create its shipped 'web' profile first" in err, err
    fix = printed_fix(err)
    assert fix == shlex.join(["turn-memory", "install", "--profile", "web", *where])
    assert not (profiles / "web").exists()
    assert run_printed(fix) == 0, capsys.readouterr()
    assert (profiles / "web" / "package.json").is_file()


def test_install_and_uninstall_report_as_json(bundle_world: World, capsys, monkeypatch) -> None:
    w = bundle_world
    monkeypatch.setenv("DSH_HOME", "")
    where = ["--dsh-home", str(w.home), "--dsh", str(w.dsh)]
    argv = ["install", "--profile", "headless", *where, "--shim-dir", str(w.shim), "--set", "turns.minTurnTokens=0",
            "--json"]
    assert cli_main([*argv, "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["schema"], plan["command"], plan["dry_run"], plan["ok"], plan["exit"], plan["error"]) == (
        "turn-memory.install/1", "install", True, True, 0, None)
    assert plan["home"] == str(w.home) and plan["dsh"] == {"path": str(w.dsh), "how": "--dsh"}
    assert {"key": "turns.minTurnTokens", "kind": "set", "old": None, "new": 0} in plan["config"]["changes"]
    assert plan["layout"] == "bundle" and "minTurnTokens: 0" in plan["block"] and plan["would_change"] is True
    assert plan["verdict"] == "dry run: nothing was changed"

    assert cli_main(argv) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["verdict"].startswith("verdict: installed") and done["ok"] is True
    assert done["verification"][0] == "OK   <root>: exactly one live compaction engine, ours (turn-memory)"
    assert str(w.patch_file) in [f["path"] for f in done["files"]]

    assert cli_main(["install", "--profile", "nope", *where, "--json"]) == 1
    captured = capsys.readouterr()
    refused = json.loads(captured.out)
    assert refused["ok"] is False and refused["exit"] == 1
    assert refused["error"]["message"].startswith("profile 'nope' does not exist")
    assert refused["error"]["fix"] == shlex.join(["turn-memory", "install", "--profile", "headless", *where])
    assert captured.err.startswith("turn-memory install: error: profile 'nope' does not exist")

    assert cli_main(["uninstall", "--profile", "headless", *where, "--json"]) == 0
    gone = json.loads(capsys.readouterr().out)
    assert gone["command"] == "uninstall" and gone["verdict"].startswith("verdict: uninstalled")


def test_paths_expand_home_and_variables_everywhere_they_are_read(bundle_world: World, monkeypatch, capsys) -> None:
    w = bundle_world
    monkeypatch.setenv("HOME", str(w.root))
    monkeypatch.setenv("TM_BIN", str(w.dsh.parent))
    monkeypatch.setenv("DSH_HOME", "")
    assert expand_path("~/dsh-home") == w.home
    assert expand_path("$TM_BIN/dsh") == expand_path("${TM_BIN}/dsh") == w.dsh
    assert expand_path("$TM_UNSET_VARIABLE/x") == Path("$TM_UNSET_VARIABLE/x")  # left as written
    # the shell expands neither inside quotes: install does
    assert cli_main(["install", "--profile", "headless", "--dsh-home", "~/dsh-home", "--dsh", "$TM_BIN/dsh",
                     "--shim-dir", str(w.shim), "--dry-run"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert f"  DSH home : {w.home}\n" in out and f"  dsh      : {w.dsh}  (found via --dsh)\n" in out


def test_serve_expands_the_log_file_it_is_given(tmp_path: Path) -> None:
    """The shim hands `engine.logFile` to `serve --log-file` as one argument: no shell expands it."""
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TM_LOGS": "logs", "TURN_MEMORY_SECRET": "s"}
    proc = subprocess.run([sys.executable, "-m", "turn_memory", "serve", "--log-file", "~/$TM_LOGS/engine.log"],
                          cwd=tmp_path, env=env, input="", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "engine listening on" in (tmp_path / "home" / "logs" / "engine.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # no literal `~` folder


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

