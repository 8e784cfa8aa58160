"""argparse wiring for `turn-memory install` / `turn-memory uninstall`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .installer import InstallError, Options, install, parse_sets, uninstall
from .layout import deep_merge


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", required=True, help="DSH profile name (e.g. headless, desktop)")
    parser.add_argument("--dsh-home", help="DSH home (default: $DSH_HOME, else ~/.dsh; DSH Desktop: <install>\\home)")
    parser.add_argument("--desktop", metavar="INSTALL_DIR",
                        help="DSH Desktop install dir: home <dir>\\home, CLI <dir>\\resources\\runtime\\cli\\bin\\dsh.cmd")
    parser.add_argument("--dsh", metavar="PATH", help="dsh executable to use (default: the Desktop wrapper next to "
                        "the home, else dsh on PATH)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")


def add_install_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("install", help="make turn-memory the compaction engine of a DSH profile",
                              description="Pack the JS shim, install it into the profile with `dsh plugin add`, "
                              "write the managed block into the profile's cordis.patch.yml and verify with "
                              "`dsh --dump-config` that turn-memory is the only live compaction engine.")
    _common(p)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="extra row config (dotted keys, YAML values), e.g. --set engine.startTimeoutMs=20000")
    p.add_argument("--config-json", metavar="JSON", help="extra row config as a JSON object (merged before --set)")
    p.add_argument("--shim-dir", type=Path, help="a shim-js folder to pack instead of the shim this turn-memory carries (for shim development)")
    p.add_argument("--force-plugin", action="store_true",
                   help="run `dsh plugin add` even when the identical tarball is already installed")
    p.set_defaults(func=run_install)

    u = subparsers.add_parser("uninstall", help="restore DSH's stock compaction engine in a profile",
                              description="Remove the managed block from the profile's cordis.patch.yml, "
                              "`dsh plugin remove dsh-turn-memory`, and verify compaction-basic is live again.")
    _common(u)
    u.set_defaults(func=run_uninstall)


def _options(args: argparse.Namespace) -> Options:
    return Options(profile=args.profile, dsh_home=args.dsh_home, desktop=args.desktop, dsh=args.dsh,
                   dry_run=args.dry_run)


def run_install(args: argparse.Namespace) -> int:
    opts = _options(args)
    try:
        extra = {}
        if args.config_json:
            extra = json.loads(args.config_json)
            if not isinstance(extra, dict):
                raise InstallError("--config-json must be a JSON object")
        opts.extra_config = deep_merge(extra, parse_sets(args.sets))
    except (InstallError, ValueError) as err:
        print(f"error: {err}")
        return 1
    opts.shim_dir = args.shim_dir
    opts.force_plugin = args.force_plugin
    return install(opts)


def run_uninstall(args: argparse.Namespace) -> int:
    return uninstall(_options(args))
