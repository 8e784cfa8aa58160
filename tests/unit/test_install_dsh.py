"""Issue 32: `doctor` and `uninstall` find the dsh `install --dsh` used; a `--dsh` that is not a
dsh program is one line in every command; and the installer's small refusals (a `--set` and
`--unset` of one key, a misspelt `--unset`, yes/no booleans, a misspelt profile to uninstall,
one backup per file, a dry run that says whether pnpm would run)."""

from __future__ import annotations

import json
import os
import shlex
from datetime import datetime, timezone
from pathlib import Path

import pytest

from installer_world import World, bundle_world, find_row, printed_fix, run_printed
from turn_memory.cli import main as cli_main
from turn_memory.install.installer import install

__all__ = ["bundle_world"]  # a fixture, used by name


@pytest.fixture
def no_dsh_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH without any dsh (nor the developer's) and with a Node DSH accepts; the home given by flag only."""
    node = tmp_path / "node22" / "node"
    node.parent.mkdir()
    node.write_text("#!/bin/sh\necho v22.23.5\n")
    node.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(node.parent), *(p for p in os.environ["PATH"].split(os.pathsep)
                                                                     if not (Path(p) / "dsh").exists())]))
    monkeypatch.setenv("DSH_HOME", "")
    monkeypatch.setenv("TURN_MEMORY_CACHE", str(tmp_path / "empty-cache"))  # no demo DSH to offer


def doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, dict[str, str]]]:
    code = cli_main(["doctor", *argv, "--no-bridge", "--json"])
    return code, {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}


def test_doctor_and_uninstall_find_the_dsh_install_was_given(bundle_world: World, capsys, no_dsh_on_path) -> None:
    w = bundle_world
    home = ["--dsh-home", str(w.home)]
    assert cli_main(["install", "--profile", "headless", *home, "--dsh", str(w.dsh), "--shim-dir", str(w.shim)]) == 0
    assert f"  dsh      : remembered for doctor and uninstall in {w.home / 'turn-memory' / 'install.json'}" \
        in capsys.readouterr().out

    code, found = doctor(capsys, "--profile", "headless", *home)
    assert found["dsh"]["status"] == "ok" and found["dsh"]["detail"].startswith(
        f"dsh 0.1.0-rc.8 at {w.dsh} (found via the --dsh an install recorded); rc8 dialect"), found["dsh"]
    assert found["profile headless: live engine"]["status"] == "ok"
    assert code == 0, found  # the documented install, then doctor without --dsh: no problem left

    assert cli_main(["uninstall", "--profile", "headless", *home]) == 0
    assert "verdict: uninstalled" in capsys.readouterr().out
    assert not (w.home / "turn-memory").exists()  # the record went with the rest
    code, found = doctor(capsys, "--profile", "headless", *home)
    assert code == 1 and found["dsh"]["detail"].startswith("no dsh found")  # forgotten with the install


def _not_dsh(w: World) -> Path:
    other = w.root / "bin" / "not-dsh"
    other.write_text("#!/bin/sh\necho hello\n")
    other.chmod(0o755)
    return other


@pytest.mark.parametrize("case", ["folder", "not executable", "another program"])
@pytest.mark.parametrize("command", ["install", "uninstall", "doctor"])
def test_a_dsh_that_is_not_a_dsh_program_is_one_line_in_every_command(bundle_world: World, capsys, no_dsh_on_path,
                                                                        command: str, case: str) -> None:
    w = bundle_world
    plain = w.root / "notes.txt"
    plain.write_text("not a program\n")
    given, problem = {
        "folder": (w.dsh.parent, f"--dsh {w.dsh.parent} is a folder, not the dsh program (it holds {w.dsh})"),
        "not executable": (plain, f"--dsh {plain} is not executable: it is not the dsh program, or it lost its "
                                  f"execute bit (chmod +x {plain})"),
        "another program": (_not_dsh(w), f"{w.root / 'bin' / 'not-dsh'} is not a working DSH: `not-dsh --version` "
                                         "printed 'hello', not a version"),
    }[case]
    argv = [command, "--profile", "headless", "--dsh-home", str(w.home), "--dsh", str(given)]
    code = cli_main([*argv, "--no-bridge"] if command == "doctor" else argv)
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    if command == "doctor":
        dsh = next(line for line in out.splitlines() if line.startswith("  FAIL  dsh: "))
        assert dsh == f"  FAIL  dsh: {problem}; `turn-memory demo` downloads and caches a DSH you can use" or \
            (case == "folder" and dsh == f"  FAIL  dsh: {problem}"), out
        return
    (line,) = err.splitlines()
    assert line.startswith(f"turn-memory {command}: error: {problem} (fix: "), line
    if case == "folder":  # the folder held the program: the fix is this command with it, and works as printed
        assert printed_fix(err) == shlex.join([*(["turn-memory"] + argv[:-1]), str(w.dsh)])
        assert run_printed(printed_fix(err)) == 0, capsys.readouterr()


def test_the_usage_errors_of_install_exit_2_before_any_dsh_is_looked_for(bundle_world: World, capsys,
                                                                         no_dsh_on_path) -> None:
    w = bundle_world
    where = ["install", "--profile", "headless", "--dsh-home", str(w.home)]  # no --dsh, none on PATH
    for extra, said, fix in (
        (["--set", "turns.enabled=no", "--unset", "turns.enabled"],
         "--set and --unset both name turns.enabled; nothing was changed", "give each key either a --set or an "
                                                                           "--unset"),
        (["--set", "turns.minTurnTokens"], "--set expects KEY=VALUE, got 'turns.minTurnTokens'; nothing was changed",
         None),
        (["--unset", "turns.enabld"], "--unset turns.enabld: no such key (did you mean turns.enabled?); nothing was "
                                      "changed", shlex.join([*(["turn-memory"] + where), "--unset", "turns.enabled"])),
        (["--set", "turns.minTurnTokens=abc"], "invalid turn-memory config: turns.minTurnTokens: Input should be a "
                                               "valid integer, unable to parse string as an integer (got 'abc'); "
                                               "nothing was changed",
         shlex.join([*(["turn-memory"] + where), "--set", "turns.minTurnTokens=600"])),
        (["--set", "turns.enabled=maybe"], "invalid turn-memory config: turns.enabled: Input should be a valid "
                                           "boolean, unable to interpret input (got 'maybe'); nothing was changed",
         shlex.join([*(["turn-memory"] + where), "--set", "turns.enabled=true"])),
    ):
        assert cli_main([*where, *extra]) == 2, extra
        assert capsys.readouterr().err == f"turn-memory install: error: {said}" + (f" (fix: {fix})" if fix else "") \
            + "\n"
    assert w.plugin_calls() == [] and not (w.home / "turn-memory").exists()


@pytest.mark.parametrize("word, value", [("no", False), ("Off", False), ("0", False), ("yes", True), ("on", True),
                                         ("1", True), ("true", True)])
def test_a_boolean_key_takes_yes_no_on_off_and_1_0_as_the_boolean(bundle_world: World, capsys, word: str,
                                                                  value: bool) -> None:
    w = bundle_world
    assert cli_main(["install", "--profile", "headless", "--dsh-home", str(w.home), "--dsh", str(w.dsh),
                     "--shim-dir", str(w.shim), "--set", f"turns.enabled={word}", "--set", "turns.minTurnTokens=1",
                     "-q"]) == 0, capsys.readouterr()
    config = find_row(w.dump(), "turn-memory")["config"]["turns"]
    assert config == {"enabled": value, "minTurnTokens": 1} and type(config["enabled"]) is bool


def test_uninstall_of_a_misspelt_profile_fails_and_names_the_one_meant(bundle_world: World, capsys) -> None:
    w = bundle_world
    where = ["--dsh-home", str(w.home), "--dsh", str(w.dsh)]
    assert cli_main(["uninstall", "--profile", "headles", *where]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"turn-memory uninstall: error: profile 'headles' does not exist in {w.home / 'profiles'} "
                          "(profiles there: headless); nothing was changed (did you mean 'headless'?) (fix: "), err
    assert printed_fix(err) == shlex.join(["turn-memory", "uninstall", "--profile", "headless", *where])
    assert run_printed(printed_fix(err)) == 0


def test_one_backup_per_file_is_kept_the_last_one(bundle_world: World) -> None:
    w = bundle_world
    for day, ratio in ((1, 0.5), (2, 0.6), (3, 0.7)):
        when = datetime(2026, 12, day, tzinfo=timezone.utc)
        assert install(w.options([], extra_config={"compaction": {"thresholdRatio": ratio}},
                                 now=lambda when=when: when)) == 0
    backups = sorted(p.name for p in w.pdir.glob("*.bak"))
    # the patch file changed three times: one backup, of the state before the last change
    assert [b for b in backups if b.startswith("cordis.patch.yml")] == [
        "cordis.patch.yml.turn-memory-20261203T000000Z.bak"]
    assert "thresholdRatio: 0.6" in (w.pdir / "cordis.patch.yml.turn-memory-20261203T000000Z.bak").read_text()
    assert len([b for b in backups if b.startswith("package.json")]) == 1


def test_the_dry_run_says_whether_pnpm_would_run_as_the_real_run_decides(bundle_world: World) -> None:
    w = bundle_world
    tgz = w.home / "turn-memory" / "dsh-turn-memory-0.1.0.tgz"
    out: list[str] = []
    assert install(w.options(out, dry_run=True)) == 0
    assert f"  would run: dsh plugin --profile headless add {tgz}" in out and not tgz.exists()
    assert install(w.options([])) == 0
    out = []
    assert install(w.options(out, dry_run=True)) == 0
    assert "  plugin   : dsh-turn-memory@0.1.0 already installed from this exact tarball; would not run pnpm" in out
    assert not [line for line in out if "would run: dsh plugin" in line]
    real: list[str] = []
    assert install(w.options(real)) == 0 and len(w.plugin_calls()) == 1  # and the real run did not either
