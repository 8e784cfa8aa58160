"""`turn-memory doctor`: each problem a user can have is reported with the command that fixes it.

`dsh` is faked through the installer's injectable runner (the real one is covered end to
end); the bridge round trip starts the real engine.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from installer_world import DEFAULT_PATCH_TEXT, bundle_world, find_row, run_printed
from turn_memory.doctor.checks import check_processes, running_engines
from turn_memory.doctor.command import _run_plain, diagnose
from turn_memory.install.patchyaml import dump
from turn_memory.install.profile import ProcResult

__all__ = ["bundle_world"]  # a fixture, used by name

BASIC = {"id": "compaction-basic", "name": "@deepseek-ai/dsh-compaction-basic"}
ENGINE = [sys.executable, "-m", "turn_memory", "serve"]


def ours(command: list[str], **engine: Any) -> dict[str, Any]:
    return {"id": "turn-memory", "name": "dsh-turn-memory", "config": {"engine": {"command": command, **engine}}}


def make_home(tmp_path: Path, *profiles: str) -> Path:
    home = tmp_path / "home"
    for name in profiles:
        (home / "profiles" / name).mkdir(parents=True)
        (home / "profiles" / name / "package.json").write_text("{}")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "dsh").write_text("#!/bin/sh\n")  # located, never run: the runner below answers
    (tmp_path / "dsh").chmod(0o755)  # a dsh that is not executable is refused before it is asked anything
    return home


def fake_dsh(trees: dict[str, list[dict[str, Any]]], version: str = "0.1.0-rc.8"):  # type: ignore[no-untyped-def]
    def runner(exe, args, env, cwd, timeout):  # type: ignore[no-untyped-def]
        if args == ["--version"]:
            return ProcResult((str(exe), *args), 0, version + "\n", "")
        profile = args[args.index("--profile") + 1]
        return ProcResult((str(exe), *args), 0, dump(trees[profile]), "")
    return runner


def run_doctor(tmp_path: Path, home: Path, trees: dict[str, list[dict[str, Any]]], *, profile: str | None = None,
               bridge: bool = False) -> dict[str, Any]:
    _, findings = diagnose(profile=profile, dsh_home=str(home), desktop=None, dsh_path=str(tmp_path / "dsh"),
                           runner=fake_dsh(trees), bridge=bridge)
    return {f.check: f for f in findings}


def where(tmp_path: Path, home: Path) -> str:
    """The location flags every fix repeats, as the user gave them."""
    return f"--dsh-home {home} --dsh {tmp_path / 'dsh'}"


def test_no_profile_at_all_names_the_install_command(tmp_path):
    home = make_home(tmp_path)
    found = run_doctor(tmp_path, home, {})
    assert found["dsh"].status == "ok" and "rc8 dialect" in found["dsh"].detail
    assert found["profile"].status == "fail"
    assert found["profile"].fix == f"turn-memory install --profile headless {where(tmp_path, home)}"
    # a profile DSH does not ship: the ones there, and an install into one of them
    other = make_home(tmp_path / "x", "tm", "web")
    missing = run_doctor(tmp_path / "x", other, {}, profile="nope")["profile nope"]
    assert missing.status == "fail" and f"no profile 'nope' in {other / 'profiles'} (profiles there: tm, web)" \
        in missing.detail
    assert missing.fix == f"turn-memory install --profile tm {where(tmp_path / 'x', other)}"
    # one it ships: installing creates it
    shipped = run_doctor(tmp_path / "x", other, {}, profile="headless")["profile headless"]
    assert shipped.fix == f"turn-memory install --profile headless {where(tmp_path / 'x', other)}"


def test_a_profile_still_on_the_stock_engine(tmp_path):
    home = make_home(tmp_path, "headless")
    found = run_doctor(tmp_path, home, {"headless": [BASIC]})
    live = found["profile headless: live engine"]
    assert live.status == "fail" and "compaction-basic is live" in live.detail
    assert live.fix == f"turn-memory install --profile headless {where(tmp_path, home)}"


def test_two_live_engines_are_a_problem(tmp_path):
    home = make_home(tmp_path, "tui")
    found = run_doctor(tmp_path, home, {"tui": [BASIC, ours(ENGINE)]})
    live = found["profile tui: live engine"]
    assert live.status == "fail" and "two engines" in live.detail
    assert live.fix == f"turn-memory install --profile tui {where(tmp_path, home)}"


def test_an_engine_command_that_no_longer_exists(tmp_path):
    home = make_home(tmp_path, "headless")
    gone = [str(tmp_path / "deleted-venv" / "bin" / "python"), "-m", "turn_memory", "serve"]
    found = run_doctor(tmp_path, home, {"headless": [{**BASIC, "disabled": True}, ours(gone)]})
    assert found["profile headless: live engine"].status == "ok"
    command = found["profile headless: engine command"]
    assert command.status == "fail" and "does not exist" in command.detail
    assert command.fix == f"turn-memory install --profile headless {where(tmp_path, home)}"


def test_a_healthy_profile_with_an_engine_log_that_recorded_an_error(tmp_path):
    home = make_home(tmp_path, "headless")
    log = tmp_path / "engine.log"
    log.write_text("2026-01-01 INFO turn_memory: engine listening\n"
                   "2026-01-01 ERROR turn_memory.turns: turn 3: worker crashed\n")
    tree = [{**BASIC, "disabled": True}, ours(ENGINE, logFile=str(log))]
    found = run_doctor(tmp_path, home, {"headless": tree}, bridge=True)
    assert found["profile headless: live engine"].status == "ok"
    assert found["profile headless: engine command"].status == "ok"
    engine_log = found["profile headless: engine log"]
    assert engine_log.status == "warn" and "worker crashed" in engine_log.detail
    bridge = found["bridge round trip"]
    assert bridge.status == "ok" and "ping round trip" in bridge.detail, bridge


def test_no_engine_log_configured_suggests_one(tmp_path):
    home = make_home(tmp_path, "headless")
    found = run_doctor(tmp_path, home, {"headless": [ours(ENGINE)]})
    engine_log = found["profile headless: engine log"]
    assert engine_log.status == "warn"
    assert engine_log.fix == (f"turn-memory install --profile headless {where(tmp_path, home)} "
                              f"--set engine.logFile={home}/turn-memory/engine.log")


def test_a_broken_engine_fails_the_round_trip_with_its_stderr(tmp_path):
    from turn_memory.doctor.bridge_check import check_bridge

    broken = [sys.executable, "-c", "import sys; sys.exit('engine import failed: no module named zmq')"]
    (finding,) = check_bridge(broken, "bridge round trip", "reinstall", timeout_s=10)
    assert finding.status == "fail" and "no module named zmq" in finding.detail and finding.fix == "reinstall"


def test_the_handshake_carries_the_profiles_config_and_reports_a_refusal(tmp_path):
    """A typo that the engine refuses at handshake (DSH would run without turn-memory) is a
    failed check of that profile, naming the key and the command that fixes it."""
    home = make_home(tmp_path, "headless", "work")
    typo = ours(ENGINE)
    typo["config"]["turns"] = {"enabeld": False}
    fine = ours(ENGINE)
    fine["config"]["turns"] = {"enabled": False}
    found = run_doctor(tmp_path, home, {"headless": [{**BASIC, "disabled": True}, typo],
                                        "work": [{**BASIC, "disabled": True}, fine]}, bridge=True)
    assert found["bridge round trip"].status == "ok", found["bridge round trip"]
    refused = found["profile headless: config"]
    assert refused.status == "fail", refused
    assert "unknown key turns.enabeld (did you mean turns.enabled?)" in refused.detail
    assert refused.fix == (f"turn-memory install --profile headless {where(tmp_path, home)} "
                           "--set turns.enabled=false --unset turns.enabeld")
    assert found["profile work: config"].status == "ok", found["profile work: config"]


def test_doctor_cli_json_and_exit_status(tmp_path, capsys, monkeypatch):
    from turn_memory.cli import main

    home = make_home(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # no node, no dsh
    assert main(["doctor", "--dsh-home", str(home), "--no-bridge", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    by_check = {f["check"]: f for f in report["findings"]}
    assert report["ok"] is False and by_check["node"]["status"] == "fail" and by_check["dsh"]["status"] == "fail"
    assert "--dsh PATH" in by_check["dsh"]["fix"]


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="process listing reads /proc")
def test_running_engines_are_found_by_command_line_and_counted_for_the_home_they_serve(tmp_path):
    """Engines of other DSH homes (the demo's, another checkout's tests) are not this home's;
    the ones that are keep their whole command line (a long venv path is not cut)."""
    fake_proc = tmp_path / "proc"
    home, other = tmp_path / "home", tmp_path / "demo-home"
    python = "/opt/" + "a-long-virtual-environment-path/" * 6 + "bin/python"
    serve = [python, "-m", "turn_memory", "serve", "--endpoint", "ipc:///x"]
    for pid, argv, env in (("101", serve, f"DSH_HOME={home}"), ("102", ["python", "-m", "pytest"], ""),
                           ("103", serve, f"DSH_HOME={other}"), ("104", serve, f"HOME={tmp_path}"),
                           ("self", ["x"], "")):
        (fake_proc / pid).mkdir(parents=True)
        (fake_proc / pid / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (fake_proc / pid / "environ").write_bytes(env.encode() + b"\0")
    (fake_proc / "105").mkdir()  # another user's engine: its environment is not ours to read
    (fake_proc / "105" / "cmdline").write_bytes(b"\0".join(a.encode() for a in serve) + b"\0")
    found = running_engines(fake_proc)
    assert [(e.pid, e.home) for e in found] == [(101, home), (103, other), (104, tmp_path / ".dsh"), (105, None)]
    finding = check_processes(found, home)
    assert finding.detail == (f"1 running for this DSH home: pid 101: {' '.join(serve)}; 3 more serve other DSH "
                              "homes")
    assert check_processes(found, tmp_path / "elsewhere").detail == (
        "none running for this DSH home (DSH starts one per process, with its first session); 4 more serve other "
        "DSH homes")


def doctor_json(capsys, *argv: str) -> dict[str, Any]:
    from turn_memory.cli import main

    code = main(["doctor", *argv, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == (0 if report["ok"] else 1)
    return {f["check"]: f for f in report["findings"]}


def test_every_fix_doctor_prints_works_as_printed(bundle_world, capsys, monkeypatch):
    """A home on a fake `dsh` (a real executable): each fix, run exactly as printed, clears its
    finding, and the user's --dsh-home/--dsh come back in each one."""
    w = bundle_world
    monkeypatch.setenv("DSH_HOME", "")
    flags = ["--dsh-home", str(w.home), "--dsh", str(w.dsh)]

    found = doctor_json(capsys, "--profile", "nope", *flags, "--no-bridge")
    assert found["profile nope"]["fix"] == shlex.join(["turn-memory", "install", "--profile", "headless", *flags])
    assert run_printed(found["profile nope"]["fix"]) == 0, capsys.readouterr()
    capsys.readouterr()

    w.patch_file.write_text(DEFAULT_PATCH_TEXT)  # back to the stock engine, as before any install
    found = doctor_json(capsys, "--profile", "headless", *flags, "--no-bridge")
    live = found["profile headless: live engine"]
    assert live["status"] == "fail" and "compaction-basic is live" in live["detail"]
    assert run_printed(live["fix"]) == 0, capsys.readouterr()
    capsys.readouterr()

    found = doctor_json(capsys, "--profile", "headless", *flags, "--no-bridge")
    assert found["profile headless: live engine"]["status"] == "ok"
    log = found["profile headless: engine log"]
    assert log["status"] == "warn" and log["fix"] == shlex.join(
        ["turn-memory", "install", "--profile", "headless", *flags, "--set",
         f"engine.logFile={w.home / 'turn-memory' / 'engine.log'}"])
    assert run_printed(log["fix"]) == 0, capsys.readouterr()
    capsys.readouterr()

    # a hand edit misspells a key: the engine refuses the handshake; the fix renames it
    assert run_printed(shlex.join(["turn-memory", "install", "--profile", "headless", *flags, "--set",
                                   "turns.enabled=false"])) == 0
    capsys.readouterr()
    w.patch_file.write_text(w.patch_file.read_text().replace("enabled: false", "enabeld: false"))
    found = doctor_json(capsys, "--profile", "headless", *flags)
    config = found["profile headless: config"]
    assert config["status"] == "fail" and "turns.enabeld" in config["detail"], config
    assert config["fix"] == shlex.join(["turn-memory", "install", "--profile", "headless", *flags,
                                        "--set", "turns.enabled=false", "--unset", "turns.enabeld"])
    assert run_printed(config["fix"]) == 0, capsys.readouterr()
    capsys.readouterr()

    found = doctor_json(capsys, "--profile", "headless", *flags)
    assert {k: f["status"] for k, f in found.items() if k.startswith("profile")} == {
        "profile headless: live engine": "ok", "profile headless: engine command": "ok",
        "profile headless: engine log": "ok", "profile headless: config": "ok"}, found
    assert find_row(w.dump(), "turn-memory")["config"]["turns"] == {"enabled": False}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """turn-memory's cache, empty unless a test puts a cached DSH there (not the developer's)."""
    monkeypatch.setenv("TURN_MEMORY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def cached_dsh(cache: Path, dsh: Path, node_version: str) -> Path:
    """What `turn-memory demo` leaves: a DSH with its own Node, and the wrapper that runs them together."""
    from turn_memory.devtools.runtime import Runtime, write_user_wrapper

    node = cache / "runtime" / "node22" / "bin" / "node"
    node.parent.mkdir(parents=True)
    node.write_text(f"#!/bin/sh\necho {node_version}\n")
    node.chmod(0o755)
    runtime = Runtime(node=node, node_modules=cache / "runtime", dsh=dsh, pnpm=None, version="0.1.0-rc.8")
    return write_user_wrapper(runtime, cache / "bin")


def test_node_is_checked_where_dsh_runs_it_and_the_demos_dsh_is_offered(bundle_world, cache, capsys, monkeypatch):
    """Node 20 on PATH fails the one requirement; the DSH the demo cached brings Node 22, and
    the printed fix (doctor with that DSH) works as printed."""
    from turn_memory.doctor.checks import check_node
    from turn_memory.install.fix_commands import Invocation
    from turn_memory.install.node_check import REQUIREMENT
    from turn_memory.install.profile import DshLocation

    w = bundle_world
    old = lambda argv: ProcResult(tuple(argv), 0, "v20.20.2\n", "")  # noqa: E731 - the node on PATH
    inv = Invocation("headless", str(w.home))
    found = check_node(old, DshLocation(w.dsh, "--dsh"), {}, inv)
    assert (found.status, found.detail) == ("fail", f"node v20.20.2 is older than 22.19; DSH needs {REQUIREMENT}")
    assert found.fix == "install Node >= 22.19 and put it first on PATH"

    wrapper = cached_dsh(cache, w.dsh, "v22.23.5")
    offered = check_node(old, DshLocation(w.dsh, "--dsh"), {"0.1.0-rc.8": wrapper}, inv)
    assert offered.fix == f"turn-memory doctor --profile headless --dsh-home {w.home} --dsh {wrapper}"
    with_wrapper = check_node(_run_plain(os.environ), DshLocation(wrapper, "--dsh"), {"0.1.0-rc.8": wrapper}, inv)
    assert (with_wrapper.status, with_wrapper.detail) == (
        "ok", f"node v22.23.5 ({cache / 'runtime' / 'node22' / 'bin' / 'node'}, from the wrapper {wrapper})")

    # no dsh on PATH: the demo's is the fix, and it works as printed
    monkeypatch.setenv("DSH_HOME", "")
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not (Path(p) / "dsh").exists()))
    found = doctor_json(capsys, "--profile", "headless", "--dsh-home", str(w.home), "--no-bridge")
    assert found["dsh"]["fix"] == f"turn-memory doctor --profile headless --dsh-home {w.home} --dsh {wrapper}"
    assert run_printed(found["dsh"]["fix"]) == 1  # turn-memory is not installed in that profile yet
    out = capsys.readouterr().out
    assert f"  OK    node: node v22.23.5 ({cache / 'runtime' / 'node22' / 'bin' / 'node'}, from the wrapper {wrapper})\n" \
        in out, out
    assert f"  OK    dsh: dsh 0.1.0-rc.8 at {wrapper} (found via --dsh); rc8 dialect (tested end to end)\n" in out
    assert "  FAIL  profile headless: live engine: turn-memory is not a live compaction engine" in out


def test_quiet_keeps_the_problems_and_verbose_adds_the_environment(bundle_world, capsys, monkeypatch, tmp_path):
    from turn_memory import __version__
    from turn_memory.cli import main

    node = tmp_path / "node22" / "node"
    node.parent.mkdir()
    node.write_text("#!/bin/sh\necho v22.23.5\n")
    node.chmod(0o755)
    monkeypatch.setenv("PATH", f"{node.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DSH_HOME", "")
    flags = ["--profile", "headless", "--dsh-home", str(bundle_world.home), "--dsh", str(bundle_world.dsh), "--no-bridge"]
    assert main(["doctor", *flags, "--quiet"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["  FAIL  profile headless", "        fix", "verdict"], lines
    assert lines[-1] == "verdict: 1 problem(s), 0 warning(s); run the fixes above"
    assert main(["doctor", *flags, "--verbose"]) == 1
    out = capsys.readouterr().out
    assert f"  turn-memory {__version__} on Python " in out and "  OK    node: node v22.23.5\n" in out
