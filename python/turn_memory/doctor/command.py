"""`turn-memory doctor [--profile NAME]`: run the checks, print each problem with its fix."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from turn_memory import __version__
from turn_memory.cli_output import EXIT_FAILED, EXIT_OK, Output, add_level_flags
from turn_memory.devtools.runtime import cached_wrappers
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
from turn_memory.doctor import windows
from turn_memory.doctor.findings import Finding, fail
from turn_memory.install.fix_commands import Invocation
from turn_memory.install.installer import default_engine_command
from turn_memory.install.recorded import recorded_dsh
from turn_memory.install.profile import (
    Dsh,
    LocateError,
    ProcResult,
    ProfilePaths,
    Runner,
    default_runner,
    desktop_wrapper_from_home,
    list_profiles,
    resolve_dsh,
    resolve_home,
)

SCHEMA = "turn-memory.doctor/1"


def _run_plain(env: Mapping[str, str]) -> Callable[[Sequence[str]], ProcResult | None]:
    def run(argv: Sequence[str]) -> ProcResult | None:
        try:
            proc = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return ProcResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
    return run


def diagnose(*, profile: str | None, dsh_home: str | None, desktop: str | None, dsh_path: str | None,
             env: Mapping[str, str] | None = None, runner: Runner | None = None,
             bridge: bool = True, platform: str = sys.platform) -> tuple[Path, list[Finding]]:
    env = dict(os.environ if env is None else env)
    home = resolve_home(dsh_home, env, desktop)
    inv = Invocation(profile, dsh_home, dsh_path, desktop)  # every fix repeats what the user gave
    cached = cached_wrappers()  # the DSH the demo downloaded: a fix can point there
    recorded = None if dsh_path or desktop else recorded_dsh(home, profile)  # the --dsh install used
    try:
        dsh: Dsh | None = Dsh(resolve_dsh(dsh_path, desktop, home, recorded=recorded), home, env,
                              runner or default_runner)
        missing: LocateError | None = None
    except LocateError as err:
        dsh, missing = None, err
    findings: list[Finding] = [check_node(_run_plain(env), dsh.location if dsh else None, cached, inv,
                                          platform=platform)]
    found, version = check_dsh(dsh, missing, cached, inv)
    findings.append(found)
    if version is None:  # not a DSH that answers: asking it for profiles would only fail again
        dsh = None

    names = [profile] if profile else list_profiles(home)
    if not names:
        findings.append(fail("profile", f"no DSH profile under {home / 'profiles'}; installing into DSH's "
                             "headless profile creates it (or name the profile you use)",
                             inv.install(profile="headless")))
    command: list[str] | None = None
    configs: dict[str, dict[str, Any]] = {}
    rows: dict[str, dict[str, Any]] = {}  # every profile's row config, for the Windows lines
    for name in names:
        if dsh is None:
            findings.append(fail(f"profile {name}", "cannot ask DSH for the composed profile without a dsh",
                                 "fix the dsh problem above, then run doctor again"))
            continue
        profile_findings, config = check_profile(dsh, ProfilePaths(home, name), inv)
        findings += profile_findings
        if config is None:
            continue
        rows[name] = config
        command_finding = check_engine_command(config, name, inv, platform=platform)
        findings += [command_finding, check_engine_log(config, name, inv, home)]
        if command_finding.status == "ok":
            command = command or engine_command(config)
            # the handshake with exactly this config: a profile with another engine command gets it too,
            # from this command's engine, which judges it by the same model
            configs[name] = config
    hello: dict[str, Any] = {}
    if bridge:
        if command is None:  # still tell the user whether this install's engine works at all
            command = default_engine_command()
        target = names[0] if names else "headless"
        findings += check_bridge(command, "bridge round trip", inv.install(profile=target), configs=configs,
                                 install=inv.install, platform=platform, on_hello=hello.update)
    if platform == "win32":
        findings += _windows_findings(home, dsh, names, rows, hello.get("eventLoop"), bridge, inv)
    findings.append(check_processes(running_engines(), home))
    return home, findings


def _windows_findings(home: Path, dsh: Dsh | None, names: list[str], rows: Mapping[str, Mapping[str, Any]],
                      loop: str | None, bridge: bool, inv: Invocation) -> list[Finding]:
    found = [windows.desktop_home(home, Path(desktop_wrapper_from_home(home)).is_file(), names)]
    if dsh is not None:
        found.append(windows.dsh_wrapper(dsh.location, names))
    for name, config in rows.items():
        found.append(windows.transport(name, config, inv.install))
        batch = windows.engine_command(name, engine_command(config), inv.install)
        if batch is not None:
            found.append(batch)
    found.append(windows.event_loop(loop, bridge))
    return found


def print_findings(home: Path, findings: list[Finding], out: Output) -> None:
    out.say(f"turn-memory doctor -- DSH home {home}")
    out.detail(f"  turn-memory {__version__} on Python {sys.version.split()[0]} ({sys.executable})")
    for version, wrapper in cached_wrappers().items():
        out.detail(f"  cached DSH {version} (the demo's): {wrapper}")
    for f in findings:
        line = out.say if f.status == "ok" else out.result  # --quiet keeps the problems
        line(f"  {f.status.upper():<5} {f.check}: {f.detail}")
        if f.fix:
            line(f"        fix: {f.fix}")
    problems = [f for f in findings if f.status == "fail"]
    warnings = [f for f in findings if f.status == "warn"]
    if problems:
        out.result(f"verdict: {len(problems)} problem(s), {len(warnings)} warning(s); run the fixes above")
    else:
        out.result("verdict: turn-memory is installed and live" + (f" ({len(warnings)} warning(s))" if warnings else ""))


def run(args: argparse.Namespace) -> int:
    out = Output.from_args("doctor", args)
    home, findings = diagnose(profile=args.profile, dsh_home=args.dsh_home, desktop=args.desktop, dsh_path=args.dsh,
                              bridge=not args.no_bridge)
    healthy = all(f.status != "fail" for f in findings)
    if args.json:
        report: dict[str, Any] = {"schema": SCHEMA, "home": str(home), "ok": healthy,
                                  "findings": [f.to_json() for f in findings]}
        out.write(json.dumps(report, indent=2) + "\n")
    else:
        print_findings(home, findings, out)
    return EXIT_OK if healthy else EXIT_FAILED


EPILOG = """\
Each problem comes with its fix: a command that repeats your --profile/--dsh-home/--dsh and
works as printed (or, where no command can, the step to take).

exit status: 0 no check failed (warnings allowed); 1 at least one check failed; 2 bad usage."""


def add_doctor_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check that turn-memory is installed, live and reachable",
                       description="Check Node and DSH (version, dialect), whether turn-memory is the live compaction "
                                   "engine of each profile (from dsh --dump-config), its engine command and log, the "
                                   "bridge round trip (starts the engine once, hello + ping) and running engines.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", help="check only this profile (default: every profile under the DSH home)")
    p.add_argument("--dsh-home", help="DSH home (default: $DSH_HOME, else ~/.dsh)")
    p.add_argument("--desktop", metavar="INSTALL_DIR", help="DSH Desktop install dir (home and CLI from there)")
    p.add_argument("--dsh", metavar="PATH", help="dsh executable (default: the one `install --dsh` was given, the "
                                                 "Desktop wrapper next to the home, else PATH)")
    p.add_argument("--no-bridge", action="store_true", help="skip starting the engine for the round trip")
    p.add_argument("--json", action="store_true", help="print the findings as JSON (schema turn-memory.doctor/1)")
    add_level_flags(p)
    p.set_defaults(func=run)
