"""One CLI style: every command's errors read `turn-memory <command>: error: … (fix: …)` on
stderr, every --help lists its exit statuses, and `./run --help` sets nothing up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from turn_memory.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_documents_its_exit_statuses(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert "exit status: 0" in capsys.readouterr().out


@pytest.mark.parametrize("argv, error", [
    (["install", "--profile", "x", "--config-json", "[1]"],
     "turn-memory install: error: --config-json must be a JSON object; nothing was changed\n"),
    (["install", "--profile", "x", "--set", "novalue"],
     "turn-memory install: error: --set expects KEY=VALUE, got 'novalue'; nothing was changed\n"),
    (["serve"], "turn-memory serve: error: TURN_MEMORY_SECRET is not set (DSH's shim sets it when it starts the "
                "engine) (fix: turn-memory serve --print-secret)\n"),
])
def test_errors_have_one_shape(argv, error, capsys, monkeypatch):
    monkeypatch.delenv("TURN_MEMORY_SECRET", raising=False)
    assert main(argv) in (1, 2)
    captured = capsys.readouterr()
    assert captured.err == error


def test_a_missing_dsh_is_an_error_in_that_shape_with_a_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["uninstall", "--profile", "headless", "--dsh-home", str(tmp_path)]) == 1
    assert capsys.readouterr().err == ("turn-memory uninstall: error: no dsh found: pass --dsh PATH, --desktop "
                                       "<DSH Desktop install dir>, or put dsh on PATH\n")


def test_run_help_prints_its_usage_without_setting_anything_up(tmp_path):
    shutil.copy(ROOT / "run", tmp_path / "run")
    for flag, code, stream in (("--help", 0, "stdout"), ("bogus", 2, "stderr")):
        proc = subprocess.run(["bash", str(tmp_path / "run"), flag], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHON": "/nonexistent/python"})
        assert proc.returncode == code, proc.stderr
        assert getattr(proc, stream).startswith("usage: ./run demo [turn-memory demo options")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no .venv, nothing downloaded


def test_the_package_runs_as_a_module_for_help(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "turn_memory", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Errors read `turn-memory <command>: error: <what> (fix: <command>)`" in proc.stdout
