"""Issue 32: every command the README and the demo print runs as printed, and every command
has one exit-status table, where bad usage is 2.

A printed `turn-memory …` command must name a real command and real flags (argparse parses it);
the command that puts `turn-memory` on PATH must be one Python users know and must install the
console script from the clone.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from turn_memory.cli import COMMANDS, build_parser
from turn_memory.demo import command as demo_command
from turn_memory.demo.screen import next_lines

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: what a reader of the README is asked to run, besides `turn-memory …` itself
SETUP = {"./run demo", "./run test", "pipx install .", "python3 -m pip install ."}


def parses(command: str) -> None:
    """argparse accepts it: a real command with real flags (SystemExit otherwise)."""
    argv = shlex.split(command)
    assert argv[0] == "turn-memory", command
    build_parser(argv[1] if len(argv) > 1 else None).parse_args(argv[1:])


def readme_commands() -> list[str]:
    """Each line of a sh block (its comment dropped), and each inline `turn-memory …`."""
    blocks = re.findall(r"```sh\n(.*?)```", README, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]
    inline = re.findall(r"`(turn-memory [^`]*)`", README)
    return lines + [c for c in inline if "…" not in c or c.split()[1] in COMMANDS]


def test_every_command_the_readme_prints_is_a_real_one():
    commands = readme_commands()
    assert "turn-memory doctor --profile headless" in commands and "pipx install ." in commands
    for command in commands:
        if command in SETUP:
            continue
        if len(command.split()) == 2:  # prose naming a command ("`turn-memory install` records …")
            assert command.split()[1] in COMMANDS, command
            continue
        parses(command.replace("…", "x"))


def test_the_readme_puts_turn_memory_on_path_from_the_clone_and_nowhere_into_dot_venv():
    assert ".venv/bin/turn-memory" not in README
    assert "no pipx: python3 -m pip install ." in README
    # what `pip install .` / `pipx install .` install from the clone: the `turn-memory` command
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # (tomllib is 3.11+; 3.10 is supported)
    assert re.search(r'^\[project\.scripts\]\nturn-memory = "turn_memory\.cli:main"\n\n', pyproject, flags=re.M)


@pytest.mark.parametrize("found, expected", [
    ({"turn-memory": "/usr/bin/turn-memory"}, None),
    ({"pipx": "/usr/bin/pipx"}, f"pipx install {ROOT}"),
    ({}, f"python3 -m pip install {ROOT}"),
])
def test_the_demo_says_how_to_put_turn_memory_on_path_when_it_is_not(found, expected):
    assert demo_command.path_setup(which=found.get) == expected


def test_every_command_the_demos_next_lines_print_is_a_real_one(tmp_path):
    home, wrapper = tmp_path / "demo home", tmp_path / "bin" / "dsh-0.2.1-rc.2"
    lines = next_lines(inspect=shlex.join(["turn-memory", "inspect", "--dsh-home", str(home)]),
                       engine_log=str(home / "turn-memory" / "engine.log"),
                       own=shlex.join(["turn-memory", "install", "--profile", "headless", "--dsh", str(wrapper)]),
                       on_path=demo_command.path_setup(which={}.get))
    assert lines[:2] == ["next:", f"  turn-memory is not on your PATH yet; put it there first:  "
                                  f"python3 -m pip install {ROOT}"]
    printed = [line.split(":  ", 1)[1] for line in lines if ":  " in line]
    assert len(printed) == 3
    for command in printed[1:]:
        parses(command)
    assert shlex.split(printed[2])[-1] == str(wrapper)  # a path with a space survives the shell


def test_the_docs_exit_status_table_has_every_command_and_2_is_bad_usage_in_each():
    table = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split("## Exit status", 1)[1]
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)` \|(.*)\|$", table, flags=re.M)}
    assert sorted(rows) == sorted(COMMANDS)
    for command, cells in rows.items():
        assert cells.split("|")[2].strip().startswith("bad usage"), command


@pytest.mark.parametrize("argv", [
    ["install", "--profile", "headless", "--set", "turns.enabled"],
    ["install", "--profile", "headless", "--set", "turns.enabled=false", "--unset", "turns"],
    ["install", "--profile", "headless", "--set", "turns.enabeld=false"],
    ["install", "--profile", "headless", "--unset", "turns.enabeld"],
    ["install", "--profile", "headless", "--config-json", "{not json"],
    ["uninstall", "--profile", "headless", "--set", "turns.enabled=false"],
    ["doctor", "--profile"],
    ["inspect", "--no-such-flag"],
    ["config", "--no-such-flag"],
    ["demo", "--model", "user"],  # no DEEPSEEK_API_KEY
    ["eval", "--model", "scripted", "--scenario", "nope"],
    ["serve"],  # no TURN_MEMORY_SECRET
    ["nope"],
])
def test_bad_usage_exits_2_in_every_command(argv, tmp_path, monkeypatch, capsys):
    from turn_memory.cli import main

    monkeypatch.setenv("DSH_HOME", str(tmp_path / "home"))  # none of them may get as far as reading it
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # nor as far as looking for a dsh
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.delenv("TURN_MEMORY_SECRET", raising=False)
    try:
        code = main(argv)
    except SystemExit as done:  # argparse's own
        code = done.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"turn-memory {argv[0]}: error: " if argv[0] in COMMANDS else "turn-memory: error: "), err
    assert not (tmp_path / "home").exists()


def test_a_misspelt_scenario_names_the_one_meant_and_its_fix_lists_them_as_printed(capsys):
    from installer_world import printed_fix, run_printed
    from turn_memory.cli import main
    from turn_memory.eval.scenario import SHIPPED_DIR

    assert main(["eval", "--model", "scripted", "--scenario", "dashbord-screenshot"]) == 2
    err = capsys.readouterr().err
    assert err == ("turn-memory eval: error: unknown scenario(s) dashbord-screenshot (did you mean "
                   f"dashboard-screenshot?); {SHIPPED_DIR} has checkout-timeouts, config-refactor, customer-migration, "
                   "dashboard-screenshot, latency-regression (fix: turn-memory eval --list)\n")
    assert run_printed(printed_fix(err)) == 0
    assert "dashboard-screenshot: " in capsys.readouterr().out
