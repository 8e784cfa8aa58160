"""`turn-memory doctor [--profile NAME]`: run the checks, print each problem with its fix."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from turn_memory.doctor.bridge_check import check_bridge
from turn_memory.doctor.checks import (
    check_dsh,
    check_engine_command,
    check_engine_log,
    check_node,
    check_processes,
    check_profile,
    engine_command,
    running_engines,
)
from turn_memory.doctor.findings import Finding, fail
from turn_memory.install.fix_commands import Invocation
from turn_memory.install.installer import default_engine_command
from turn_memory.install.profile import (
    Dsh,
    LocateError,
    ProcResult,
    ProfilePaths,
    Runner,
    default_runner,
    list_profiles,
    resolve_dsh,
    resolve_home,
)

SCHEMA = "turn-memory.doctor/1"


def _run_plain(env: Mapping[str, str]):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str]) -> ProcResult | None:
        try:
            proc = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return ProcResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
    return run


def diagnose(*, profile: str | None, dsh_home: str | None, desktop: str | None, dsh_path: str | None,
             env: Mapping[str, str] | None = None, runner: Runner | None = None,
             bridge: bool = True) -> tuple[Path, list[Finding]]:
    env = dict(os.environ if env is None else env)
    home = resolve_home(dsh_home, env, desktop)
    inv = Invocation(profile, dsh_home, dsh_path, desktop)  # every fix repeats what the user gave
    findings: list[Finding] = [check_node(_run_plain(env))]
    try:
        dsh: Dsh | None = Dsh(resolve_dsh(dsh_path, desktop, home), home, env, runner or default_runner)
        why = None
    except LocateError as err:
        dsh, why = None, str(err)
    found, _version = check_dsh(dsh, why)
    findings.append(found)

    names = [profile] if profile else list_profiles(home)
    if not names:
        findings.append(fail("profile", f"no DSH profile under {home / 'profiles'}; installing into DSH's "
                             "headless profile creates it (or name the profile you use)",
                             inv.install(profile="headless")))
    command: list[str] | None = None
    configs: dict[str, dict[str, Any]] = {}
    for name in names:
        if dsh is None:
            findings.append(fail(f"profile {name}", "cannot ask DSH for the composed profile without a dsh",
                                 "fix the dsh problem above, then run doctor again"))
            continue
        profile_findings, config = check_profile(dsh, ProfilePaths(home, name), inv)
        findings += profile_findings
        if config is None:
            continue
        command_finding = check_engine_command(config, name, inv)
        findings += [command_finding, check_engine_log(config, name, inv, home)]
        if command_finding.status == "ok":
            command = command or engine_command(config)
            # the handshake with exactly this config: a profile with another engine command gets it too,
            # from this command's engine, which judges it by the same model
            configs[name] = config
    if bridge:
        if command is None:  # still tell the user whether this install's engine works at all
            command = default_engine_command()
        target = names[0] if names else "headless"
        findings += check_bridge(command, "bridge round trip", inv.install(profile=target), configs=configs,
                                 install=inv.install)
    findings.append(check_processes(running_engines()))
    return home, findings


def print_findings(home: Path, findings: list[Finding]) -> None:
    print(f"turn-memory doctor -- DSH home {home}")
    for f in findings:
        print(f"  {f.status.upper():<5} {f.check}: {f.detail}")
        if f.fix:
            print(f"        fix: {f.fix}")
    problems = [f for f in findings if f.status == "fail"]
    warnings = [f for f in findings if f.status == "warn"]
    if problems:
        print(f"verdict: {len(problems)} problem(s), {len(warnings)} warning(s); run the fixes above")
    else:
        print("verdict: turn-memory is installed and live" + (f" ({len(warnings)} warning(s))" if warnings else ""))


def run(args: argparse.Namespace) -> int:
    home, findings = diagnose(profile=args.profile, dsh_home=args.dsh_home, desktop=args.desktop, dsh_path=args.dsh,
                              bridge=not args.no_bridge)
    if args.json:
        report: dict[str, Any] = {"schema": SCHEMA, "home": str(home), "ok": all(f.status != "fail" for f in findings),
                                  "findings": [f.to_json() for f in findings]}
        print(json.dumps(report, indent=2))
    else:
        print_findings(home, findings)
    return 0 if all(f.status != "fail" for f in findings) else 1


def add_doctor_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check that turn-memory is installed, live and reachable",
                       description="Check Node and DSH (version, dialect), whether turn-memory is the live compaction "
                                   "engine of each profile (from dsh --dump-config), its engine command and log, the "
                                   "bridge round trip (starts the engine once, hello + ping) and running engines. "
                                   "Each problem comes with the command that fixes it. Exit status 1 when any check "
                                   "failed.")
    p.add_argument("--profile", help="check only this profile (default: every profile under the DSH home)")
    p.add_argument("--dsh-home", help="DSH home (default: $DSH_HOME, else ~/.dsh)")
    p.add_argument("--desktop", metavar="INSTALL_DIR", help="DSH Desktop install dir (home and CLI from there)")
    p.add_argument("--dsh", metavar="PATH", help="dsh executable (default: Desktop wrapper next to the home, else PATH)")
    p.add_argument("--no-bridge", action="store_true", help="skip starting the engine for the round trip")
    p.add_argument("--json", action="store_true", help="print the findings as JSON (schema turn-memory.doctor/1)")
    p.set_defaults(func=run)


