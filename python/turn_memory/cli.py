"""`turn-memory` command line: one `add_*_commands(subparsers)` per area."""

from __future__ import annotations

import argparse
import importlib
import sys

from turn_memory import __version__
from turn_memory.cli_output import closed_pipe_exit

#: command -> module with its `add_*_commands`; imported only when needed, because the
#: engine side (pydantic, zmq, the whole engine) costs about a second of imports that
#: `inspect` and `doctor` should not pay on every run
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("turn_memory.serve", "add_serve_commands"),
    "install": ("turn_memory.install.commands", "add_install_commands"),
    "uninstall": ("turn_memory.install.commands", "add_install_commands"),
    "demo": ("turn_memory.demo.command", "add_demo_commands"),
    "inspect": ("turn_memory.inspection.command", "add_inspect_commands"),
    "doctor": ("turn_memory.doctor.command", "add_doctor_commands"),
    "config": ("turn_memory.config_command", "add_config_commands"),
    "eval": ("turn_memory.eval.command", "add_eval_commands"),
}


EPILOG = """\
first steps: `turn-memory demo` (a real DSH session in a throwaway home), then
`turn-memory doctor` and `turn-memory install --profile NAME` for your own DSH.

Errors read `turn-memory <command>: error: <what> (fix: <command>)`. Exit status: 0 done,
1 refused or failed, 2 bad usage; each command's --help lists its own."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (`only`) just the one command being run."""
    parser = argparse.ArgumentParser(
        prog="turn-memory",
        description="Continuous, losslessly recoverable context memory for DSH (DeepSeek Harness).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"turn-memory {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for module, adder in wanted:
        getattr(importlib.import_module(module), adder)(sub)
    return parser


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = actions[0].choices[command]
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and not argv[0].startswith("-") else None
    try:
        parser = build_parser(command)
        args, extra = parser.parse_known_args(argv)
        if extra:  # said by the command's own parser: `turn-memory <command>: error: …`, as every error reads
            _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `turn-memory … | head`: the reader left; no traceback
        return closed_pipe_exit()


if __name__ == "__main__":
    sys.exit(main())
