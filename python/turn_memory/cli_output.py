"""How every `turn-memory` command talks to its user, in one style.

* the report goes to stdout; `--quiet` keeps only its verdict, `--verbose` adds the detail;
* an error goes to stderr as `turn-memory <command>: error: <what> (fix: <command that fixes it>)`;
* a reader that leaves early (`turn-memory doctor --json | head`) ends the output quietly,
  without a traceback, and the command still exits with its own status;
* exit codes: 0 done, 1 refused or failed (the error says why), 2 bad usage (argparse), and
  per command what its `--help` lists (e.g. `inspect` 3: the log is damaged).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def render(argv: Sequence[str]) -> str:
    """A command line to print for the user's shell (POSIX sh, or cmd/PowerShell on Windows)."""
    return subprocess.list2cmdline(list(argv)) if os.name == "nt" else shlex.join(argv)


def error_text(command: str, message: str, fix: str | None = None) -> str:
    return f"turn-memory {command}: error: {message}" + (f" (fix: {fix})" if fix else "")


def _reader_left(stream: TextIO) -> None:
    """Point the stream's descriptor at /dev/null: later writes and the exit flush go nowhere."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError):  # not a real descriptor (a test's capture): nothing to redirect
        pass


class Output:
    """One command's output channels, with its --quiet/--verbose level."""

    def __init__(self, command: str, *, quiet: bool = False, verbose: bool = False,
                 stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self.command = command
        self.quiet = quiet
        self.verbose = verbose
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.closed = False  # the stdout reader left

    @classmethod
    def from_args(cls, command: str, args: argparse.Namespace) -> "Output":
        return cls(command, quiet=getattr(args, "quiet", False), verbose=getattr(args, "verbose", False))

    def write(self, text: str) -> None:
        """Raw text on stdout (JSON, a table), whatever the level."""
        if self.closed:
            return
        try:
            self.stdout.write(text)
            self.stdout.flush()
        except BrokenPipeError:
            self.closed = True
            _reader_left(self.stdout)

    def write_line(self, line: str = "") -> None:
        """One line on stdout; the caller has applied the level (the installer's report)."""
        self.write(line + "\n")

    def say(self, line: str = "") -> None:
        """A report line (left out with --quiet)."""
        if not self.quiet:
            self.write(line + "\n")

    def detail(self, line: str = "") -> None:
        """A line only --verbose shows."""
        if self.verbose:
            self.write(line + "\n")

    def result(self, line: str) -> None:
        """The verdict: shown even with --quiet."""
        self.write(line + "\n")

    def error(self, message: str, fix: str | None = None) -> None:
        try:
            print(error_text(self.command, message, fix), file=self.stderr, flush=True)
        except BrokenPipeError:
            _reader_left(self.stderr)

    def fail(self, message: str, fix: str | None = None, code: int = EXIT_FAILED) -> int:
        self.error(message, fix)
        return code


def add_level_flags(parser: argparse.ArgumentParser) -> None:
    level = parser.add_mutually_exclusive_group()
    level.add_argument("-q", "--quiet", action="store_true", help="print only the verdict and errors")
    level.add_argument("-v", "--verbose", action="store_true", help="print every detail")


def closed_pipe_exit() -> int:
    """For `cli.main`: output that bypassed `Output` met a closed pipe; end quietly."""
    _reader_left(sys.stdout)
    return EXIT_OK
