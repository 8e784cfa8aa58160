"""argparse wiring for `turn-memory install` / `turn-memory uninstall`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from turn_memory.cli_output import EXIT_USAGE, Output, add_level_flags

from .installer import InstallError, Options, install, parse_sets, uninstall
from .layout import deep_merge
from .row_config import clashes, typed_values

INSTALL_EPILOG = """\
config: a re-install keeps every key of the installed row unless you give it (--set,
--config-json) or remove it (--unset KEY); --replace-config writes the row from this
command's options only. Every run lists each key as kept, set, changed or removed.

exit status: 0 installed (or the dry run's plan printed); 1 refused or failed, nothing
changed (the error names the fix); 2 bad usage (an unknown option, a --set that is not
KEY=VALUE or names a key or value the config refuses, --set and --unset of one key, a
misspelt --unset key); 3 the verification after writing failed and everything was rolled back."""

UNINSTALL_EPILOG = """\
exit status: 0 uninstalled (or nothing to uninstall in an existing profile); 1 refused, nothing
changed (no such profile, no usable dsh); 2 bad usage; 3 the verification after removing
failed (the report says what is still live)."""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", required=True, help="DSH profile name (e.g. headless, web; desktop for DSH Desktop)")
    parser.add_argument("--dsh-home", help="DSH home (default: $DSH_HOME, else ~/.dsh; DSH Desktop: <install>\\home)")
    parser.add_argument("--desktop", metavar="INSTALL_DIR",
                        help="DSH Desktop install dir: home <dir>\\home, CLI <dir>\\resources\\runtime\\cli\\bin\\dsh.cmd")
    parser.add_argument("--dsh", metavar="PATH", help="dsh executable to use, remembered for the profile (default: "
                        "the one an install was given, the Desktop wrapper next to the home, else dsh on PATH; "
                        "`turn-memory doctor` names the one the demo cached)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON object (schema turn-memory.install/1) instead of lines")
    add_level_flags(parser)


def add_install_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("install", help="make turn-memory the compaction engine of a DSH profile",
                              description="Pack the JS shim, install it into the profile with `dsh plugin add`, "
                              "write the managed block into the profile's cordis.patch.yml and verify with "
                              "`dsh --dump-config` that turn-memory is the only live compaction engine.",
                              epilog=INSTALL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="row config (dotted keys, YAML values), e.g. --set engine.logFile=~/.dsh/turn-memory/engine.log")
    p.add_argument("--config-json", metavar="JSON", help="row config as a JSON object (merged before --set)")
    p.add_argument("--unset", action="append", default=[], metavar="KEY",
                   help="remove this key (or section) from the installed row: it goes back to its default")
    p.add_argument("--replace-config", action="store_true",
                   help="write the row from this command's options only, dropping the installed row's other keys")
    p.add_argument("--shim-dir", type=Path, help="a shim-js folder to pack instead of the shim this turn-memory carries (for shim development)")
    p.add_argument("--force-plugin", action="store_true",
                   help="run `dsh plugin add` even when the identical tarball is already installed")
    p.set_defaults(func=run_install)

    u = subparsers.add_parser("uninstall", help="restore DSH's stock compaction engine in a profile",
                              description="Remove the managed block from the profile's cordis.patch.yml, "
                              "`dsh plugin remove dsh-turn-memory`, and verify compaction-basic is live again.",
                              epilog=UNINSTALL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(u)
    u.set_defaults(func=run_uninstall)


def _options(args: argparse.Namespace, output: Output) -> Options:
    return Options(profile=args.profile, dsh_home=args.dsh_home, desktop=args.desktop, dsh=args.dsh,
                   dry_run=args.dry_run, out=output.write_line, err=output.error, quiet=args.quiet,
                   verbose=args.verbose, json=args.json)


def run_install(args: argparse.Namespace) -> int:
    output = Output.from_args("install", args)
    opts = _options(args, output)
    opts.shim_dir = args.shim_dir
    opts.force_plugin = args.force_plugin
    opts.unset = list(args.unset)
    opts.replace_config = args.replace_config
    try:  # what the command line says, checked before anything is read: its errors are bad usage (2)
        extra = {}
        if args.config_json:
            try:
                extra = json.loads(args.config_json)
            except ValueError as err:
                raise InstallError(f"--config-json is not JSON ({err})") from err
            if not isinstance(extra, dict):
                raise InstallError("--config-json must be a JSON object")
        opts.extra_config = typed_values(deep_merge(extra, parse_sets(args.sets)))
    except InstallError as err:
        return output.fail(f"{err}; nothing was changed", code=EXIT_USAGE)
    both = clashes(opts.extra_config, opts.unset)
    if both:  # which one was meant is not ours to guess
        return output.fail(f"--set and --unset both name {', '.join(both)}; nothing was changed",
                           "give each key either a --set or an --unset", EXIT_USAGE)
    return install(opts)


def run_uninstall(args: argparse.Namespace) -> int:
    output = Output.from_args("uninstall", args)
    return uninstall(_options(args, output))
