"""The installer on the files and paths a Windows user has (issue 19): CRLF and a UTF-8 byte
order mark in the files it edits, an engine command with spaces and non-ASCII characters,
and the DSH Desktop layout found from `--desktop <folder>` (Windows paths, tested anywhere).

The end-to-end cases run `install`/`uninstall` against the fake `dsh` of test_installer.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path, PureWindowsPath

import pytest
import yaml

from test_installer import World, bundle_world, desktop_world, node20_on_path, our_row, snapshot  # noqa: F401 - fixtures
from turn_memory.install import patchfile, patchyaml
from turn_memory.install.build_rules import with_zeromq_rule
from turn_memory.install.desktop import DesktopNotFound, find_desktop
from turn_memory.install.installer import install, uninstall
from turn_memory.install.layout import live_engines
from turn_memory.install.profile import build_invocation, resolve_dsh, resolve_home

BOM = "\ufeff"
ROW = {"id": "turn-memory", "name": "dsh-turn-memory", "config": {"engine": {"command": ["py", "serve"]}}}
#: what `turn-memory install` records on Windows for a user named 张伟 with a venv in "My Envs"
WINDOWS_COMMAND = ["C:\\Users\\张伟\\My Envs\\tm\\Scripts\\python.exe", "-m", "turn_memory", "serve"]


# ---- cordis.patch.yml: CRLF and a BOM -----------------------------------------------------------


def test_a_fresh_profile_file_saved_with_a_bom_and_crlf_round_trips_byte_for_byte():
    original = BOM + "# my notes\r\n[]\r\n"
    installed = patchfile.with_block(original, ("# hdr",), [ROW])
    assert installed == (BOM + "# my notes\r\n# >>> turn-memory managed block\r\n# hdr\r\n- id: turn-memory\r\n"
                         "  name: dsh-turn-memory\r\n  config:\r\n    engine:\r\n      command:\r\n        - py\r\n"
                         "        - serve\r\n# <<< turn-memory managed block\r\n")
    assert patchfile.with_block(installed, ("# hdr",), [ROW]) == installed
    assert patchfile.remove_block(installed) == original


def test_a_block_only_file_that_an_editor_saved_with_a_bom_is_still_ours():
    # install into `[]` leaves only the block; Notepad's "UTF-8 with BOM" then puts the mark in
    # front of its first marker line, which used to read as "<<< without >>>"
    installed = patchfile.with_block("[]\r\n", ("# hdr",), [ROW])
    assert installed.startswith(patchfile.BEGIN)
    resaved = BOM + installed
    user_text, block = patchfile.split_block(resaved)
    assert (user_text, block) == (BOM, installed)
    assert patchfile.with_block(resaved, ("# hdr",), [ROW]) == resaved
    assert patchfile.remove_block(resaved) == BOM + "[]\r\n"
    assert patchyaml.load(patchfile.remove_block(resaved)) == []


def test_desktop_install_and_uninstall_keep_a_bom_and_crlf_patch_file_exactly(
        desktop_world: World):  # noqa: F811 - fixture imported from test_installer
    w = desktop_world
    original = b"\xef\xbb\xbf" + w.patch_file.read_bytes()
    w.patch_file.write_bytes(original)
    out: list[str] = []
    assert install(w.options(out, dsh=None, desktop=str(w.root / "DeepSeek Harness"), dsh_home=None)) == 0, \
        "\n".join(out)
    text = w.patch_file.read_bytes()
    assert text.startswith(original)
    block = text[len(original):].decode("utf-8")
    assert block.startswith(patchfile.BEGIN + "\r\n") and "\n" not in block.replace("\r\n", "")
    assert [s.row for s in live_engines(w.dump())["preset-standard"]] == [our_row()]
    assert uninstall(w.options(out, dsh=None, desktop=str(w.root / "DeepSeek Harness"), dsh_home=None)) == 0, \
        "\n".join(out)
    assert w.patch_file.read_bytes() == original


# ---- pnpm-workspace.yaml: CRLF and a BOM --------------------------------------------------------


@pytest.mark.parametrize("bom", ["", BOM], ids=["crlf", "bom+crlf"])
def test_the_zeromq_build_rule_joins_an_existing_allow_builds_written_on_windows(bom):
    text = bom + "packages:\r\n  - .\r\nallowBuilds:\r\n  esbuild: true\r\n"
    new = with_zeromq_rule(text)
    assert new == bom + "packages:\r\n  - .\r\nallowBuilds:\r\n  zeromq: false\r\n  esbuild: true\r\n"
    # one allowBuilds key (a second one is a duplicate key pnpm refuses), both rules in it
    assert yaml.safe_load(new.removeprefix(BOM)) == {"packages": ["."], "allowBuilds": {"zeromq": False,
                                                                                        "esbuild": True}}
    assert with_zeromq_rule(new) is None


def test_the_zeromq_build_rule_is_added_with_the_files_own_line_end():
    assert with_zeromq_rule(BOM + "packages:\r\n  - .\r\n") == BOM + "packages:\r\n  - .\r\nallowBuilds:\r\n  zeromq: false\r\n"
    assert with_zeromq_rule("packages:\n  - .") == "packages:\n  - .\nallowBuilds:\n  zeromq: false\n"


# ---- package.json: a BOM DSH cannot read ----------------------------------------------------


def test_a_profile_manifest_with_a_bom_is_refused_before_anything_changes(
        bundle_world: World):  # noqa: F811 - fixture imported from test_installer
    w = bundle_world
    manifest = w.pdir / "package.json"
    manifest.write_bytes(b"\xef\xbb\xbf" + manifest.read_bytes().replace(b"\n", b"\r\n"))
    before = snapshot(w.root)
    out: list[str] = []
    assert install(w.options(out)) == 1
    assert out[-1] == (f"turn-memory install: error: {manifest} starts with a UTF-8 byte order mark, which DSH cannot read (JSON.parse); "
                       "save it as UTF-8 without BOM and run this again; nothing was changed")
    assert snapshot(w.root) == before and w.plugin_calls() == []
    manifest.write_bytes(manifest.read_bytes()[3:])  # saved without BOM (CRLF is fine for JSON.parse)
    assert install(w.options(out)) == 0, "\n".join(out)


# ---- engine.command: spaces and non-ASCII ------------------------------------------------------


def test_an_engine_command_with_spaces_and_non_ascii_is_recorded_exactly(
        bundle_world: World, dsh_runtime):  # noqa: F811 - fixture imported from test_installer
    w = bundle_world
    w.patch_file.write_bytes(b"\xef\xbb\xbf" + w.patch_file.read_bytes().replace(b"\n", b"\r\n"))
    out: list[str] = []
    assert install(w.options(out, engine_command=WINDOWS_COMMAND)) == 0, "\n".join(out)
    row = next(r for r in w.dump() if r.get("id") == "turn-memory")
    assert row["config"]["engine"]["command"] == WINDOWS_COMMAND
    # and as DSH itself reads the file: js-yaml, from the real runtime, on the bytes written
    js_yaml = Path(dsh_runtime.node_modules) / "js-yaml"
    read = subprocess.run(
        [str(dsh_runtime.node), "-e", "const y = require(process.argv[1]); const fs = require('fs');"
         "process.stdout.write(JSON.stringify(y.load(fs.readFileSync(process.argv[2], 'utf8'))))",
         str(js_yaml), str(w.patch_file)], capture_output=True, timeout=60, check=True)
    entries = json.loads(read.stdout.decode("utf-8"))
    ours = next(e for e in entries if isinstance(e.get("insert"), list))["insert"][0]
    assert ours["config"]["engine"]["command"] == WINDOWS_COMMAND


# ---- a failing `dsh plugin add` on a Windows DSH (issue 31) -----------------------------------


def test_a_failing_plugin_add_on_a_windows_dsh_does_not_blame_this_machines_node(
        bundle_world: World, tmp_path: Path):  # noqa: F811 - fixture imported from test_installer
    """Install on Linux for a Windows DSH (here the fake dsh says it runs one, as the Windows
    tests' Wine wrapper does): pnpm ran on the Windows side, so Linux's Node 20 is not the cause."""
    w = bundle_world
    w.conf(plugin_fail=True)
    head, rest = w.dsh.read_text(encoding="utf-8").split("\n", 1)
    w.dsh.write_text(f"{head}\n# turn-memory-dsh-platform: win32\n{rest}", encoding="utf-8")
    out: list[str] = []
    assert install(w.options(out, env=node20_on_path(tmp_path), platform="linux")) == 1
    (error,) = [line for line in out if ": error: " in line]
    assert error.startswith("turn-memory install: error: dsh plugin add failed (1) (dsh is a Windows DSH: pnpm ran "
                            "on the Windows side, so this linux machine's node is not the cause; DSH's pnpm log says "
                            "what is): "), error
    assert "v20.20.2" not in error and "22.19" not in error


def test_on_windows_a_failing_plugin_add_of_the_dsh_exe_names_a_missing_pnpm():
    from turn_memory.install.node_check import windows_node

    exe = Path("C:/Users/me/tm/Scripts/dsh.exe")
    missing = windows_node(exe, "win32", which=lambda name: None)
    assert missing is not None and missing.hint == ("no pnpm on PATH: the DSH exe runs `pnpm` through cmd.exe for "
                                                    "`dsh plugin add`")
    found = windows_node(exe, "win32", which=lambda name: r"C:\pnpm\pnpm.exe")
    assert found is not None and found.hint is None  # pnpm is there: DSH's pnpm log says why it failed
    assert windows_node(Path("C:/Users/me/AppData/Roaming/npm/dsh.cmd"), "win32") is None  # node on PATH: checked


# ---- the DSH Desktop layout from --desktop -----------------------------------------------------

INSTALL = PureWindowsPath(r"D:\DeepSeek Harness")
WRAPPER = INSTALL / "resources" / "runtime" / "cli" / "bin" / "dsh.cmd"


def _on_this_disk(path: PureWindowsPath) -> bool:
    # Windows paths compare case-insensitively, as the file system does
    return str(path).lower() == str(WRAPPER).lower()


@pytest.mark.parametrize("given", [
    r"D:\DeepSeek Harness",
    r"D:\DeepSeek Harness\\",
    r"d:\deepseek harness\home",
    r"D:\DeepSeek Harness\resources",
    r"D:\DeepSeek Harness\resources\runtime\cli\bin\dsh.cmd",
    r"D:\DeepSeek Harness\DeepSeek Harness.exe",
], ids=["install", "trailing-backslash", "home-lowercase", "resources", "wrapper", "app-exe"])
def test_the_desktop_layout_is_found_from_the_install_folder_or_any_path_inside_it(given):
    found = find_desktop(given, path_type=PureWindowsPath, is_file=_on_this_disk)
    assert str(found.install).lower() == str(INSTALL).lower()
    assert str(found.home).lower() == r"d:\deepseek harness\home"
    assert str(found.wrapper).lower() == str(WRAPPER).lower()


def test_a_folder_that_is_no_desktop_install_says_what_to_pass():
    with pytest.raises(DesktopNotFound) as err:
        find_desktop(r"D:\Programs", path_type=PureWindowsPath, is_file=_on_this_disk)
    assert str(err.value) == (r"--desktop D:\Programs: no DSH Desktop CLI wrapper (resources\runtime\cli\bin\dsh.cmd) "
                              "in it or in a folder above it; pass the folder DSH Desktop is installed in, the one "
                              "holding `resources` and `home`")


def test_a_quoted_folder_with_a_trailing_backslash_is_explained():
    # cmd: turn-memory install --desktop "D:\DeepSeek Harness\" --profile desktop
    with pytest.raises(DesktopNotFound) as err:
        find_desktop('D:\\DeepSeek Harness" --profile desktop', path_type=PureWindowsPath, is_file=_on_this_disk)
    assert str(err.value) == (
        "--desktop 'D:\\\\DeepSeek Harness\" --profile desktop' contains a double quote: a backslash right before a "
        'closing quote escapes it on Windows; write the folder without a trailing backslash, e.g. --desktop '
        '"D:\\DeepSeek Harness"')


def test_install_finds_home_and_wrapper_from_the_desktop_home_folder(
        desktop_world: World):  # noqa: F811 - fixture imported from test_installer
    install_dir = desktop_world.root / "DeepSeek Harness"
    given = str(install_dir / "home")
    assert resolve_home(None, {}, given) == (install_dir / "home").resolve()
    found = resolve_dsh(None, given, resolve_home(None, {}, given))
    assert (found.path, found.how, found.is_desktop_wrapper) == (desktop_world.dsh.absolute(), "--desktop", True)


def test_the_desktop_wrapper_is_run_through_cmd_even_from_a_folder_cmd_would_split():
    # cmd.exe acts on & | < > ^ ( ) outside quotes: `D:\R&D\...` unquoted would run `D:\R`
    wrapper = PureWindowsPath(r"D:\R&D\DeepSeek\resources\runtime\cli\bin\dsh.cmd")
    line = build_invocation(wrapper, ["plugin", "--profile", "desktop", "add", r"D:\R&D\DeepSeek\home\tm.tgz",
                                      "C:\\x(1)\\", "a b"], windows=True, comspec=r"C:\Windows\system32\cmd.exe")
    assert line == (r'"C:\Windows\system32\cmd.exe" /d /s /c ""D:\R&D\DeepSeek\resources\runtime\cli\bin\dsh.cmd" '
                    r'plugin --profile desktop add "D:\R&D\DeepSeek\home\tm.tgz" "C:\x(1)\\" "a b""')
