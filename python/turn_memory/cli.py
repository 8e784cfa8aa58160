"""`turn-memory` command line: one `add_*_commands(subparsers)` per area."""

from __future__ import annotations

import argparse
import sys

from turn_memory import __version__
from turn_memory.demo import add_demo_commands
from turn_memory.inspection.command import add_inspect_commands
from turn_memory.install.commands import add_install_commands
from turn_memory.serve import add_serve_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turn-memory",
        description="Continuous, losslessly recoverable context memory for DSH (DeepSeek Harness).",
    )
    parser.add_argument("--version", action="version", version=f"turn-memory {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_commands(sub)
    add_install_commands(sub)
    add_demo_commands(sub)
    add_inspect_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
