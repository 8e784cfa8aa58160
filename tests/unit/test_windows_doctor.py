"""`turn-memory doctor` on Windows (issue 19): the Desktop home, the wrapper it uses, each
profile's transport and the event loop the engine runs on. The platform is injected; `dsh`
is faked as in test_doctor.py, and the bridge round trip starts the real engine (over tcp,
as on Windows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_doctor import BASIC, ENGINE, fake_dsh, ours
from turn_memory.doctor import windows
from turn_memory.doctor.checks import check_processes, running_engines
from turn_memory.doctor.command import diagnose
from turn_memory.install.profile import DshLocation

WRAPPER_PARTS = ("resources", "runtime", "cli", "bin", "dsh.cmd")


def desktop_install(tmp_path: Path) -> Path:
    install = tmp_path / "DeepSeek Harness"
    (install / "home" / "profiles" / "desktop").mkdir(parents=True)
    (install / "home" / "profiles" / "desktop" / "package.json").write_text("{}")
    install.joinpath(*WRAPPER_PARTS).parent.mkdir(parents=True)
    install.joinpath(*WRAPPER_PARTS).write_text("@echo off\r\n")  # located, never run: the runner answers
    return install


def windows_lines(findings) -> dict:  # type: ignore[no-untyped-def]
    return {f.check: f for f in findings if f.check.startswith("windows:") or f.check == "bridge round trip"}


def test_on_windows_doctor_reports_the_desktop_home_wrapper_transport_and_event_loop(tmp_path):
    install = desktop_install(tmp_path)
    tree = [{**BASIC, "disabled": True}, ours(ENGINE)]
    home, findings = diagnose(profile=None, dsh_home=None, desktop=str(install), dsh_path=None,
                              runner=fake_dsh({"desktop": tree}, "0.2.0-rc.2"), platform="win32")
    wrapper = install.joinpath(*WRAPPER_PARTS)
    found = windows_lines(findings)
    assert list(found) == ["bridge round trip", "windows: DSH home", "windows: dsh",
                           "windows: profile desktop: transport", "windows: event loop"]
    assert found["bridge round trip"].status == "ok" and " on tcp; hello ok" in found["bridge round trip"].detail
    assert found["windows: DSH home"].detail == f"{install / 'home'} (DSH Desktop's: its CLI wrapper is {wrapper})"
    assert found["windows: dsh"].detail == (f"{wrapper} (DSH Desktop's CLI wrapper, found via --desktop; "
                                            "run through cmd.exe /d /s /c)")
    assert found["windows: profile desktop: transport"].detail == (
        "tcp on 127.0.0.1, a random port, the per-run secret in the handshake (engine.transport auto)")
    loop = found["windows: event loop"]
    # this engine runs here, on Linux; on Windows the same line names _WindowsSelectorEventLoop
    assert loop.status == "ok" and loop.detail == "_UnixSelectorEventLoop (pyzmq's asyncio sockets need a selector " \
                                                  "loop on Windows)"
    assert all(f.status == "ok" for f in found.values())


def test_a_desktop_profile_without_desktops_wrapper_is_a_problem_with_its_fix(tmp_path):
    home = tmp_path / "home"
    (home / "profiles" / "desktop").mkdir(parents=True)
    (home / "profiles" / "desktop" / "package.json").write_text("{}")
    (tmp_path / "dsh.exe").write_text("")
    _, findings = diagnose(profile="desktop", dsh_home=str(home), desktop=None, dsh_path=str(tmp_path / "dsh.exe"),
                           runner=fake_dsh({"desktop": [{**BASIC, "disabled": True}, ours(ENGINE)]}), bridge=False,
                           platform="win32")
    found = windows_lines(findings)
    fix = "turn-memory doctor --desktop <the folder DSH Desktop is installed in>"
    assert (found["windows: DSH home"].status, found["windows: DSH home"].fix) == ("warn", fix)
    assert found["windows: DSH home"].detail == (f"{home} is not a DSH Desktop home (no "
                                                 r"resources\runtime\cli\bin\dsh.cmd beside it); the desktop profile "
                                                 "is DSH Desktop's")
    assert (found["windows: dsh"].status, found["windows: dsh"].fix) == ("fail", fix)
    assert found["windows: dsh"].detail == (f"{tmp_path / 'dsh.exe'} (found via --dsh) is not DSH Desktop's wrapper: "
                                            "only that wrapper may manage the desktop profile")
    assert found["windows: event loop"].detail == "not checked (--no-bridge): the round trip reports it"


def test_an_ipc_transport_and_a_batch_file_engine_command_are_flagged_per_profile(tmp_path):
    home = tmp_path / "home"
    for name in ("work", "cli"):
        (home / "profiles" / name).mkdir(parents=True)
        (home / "profiles" / name / "package.json").write_text("{}")
    (tmp_path / "dsh.exe").write_text("")
    batch = tmp_path / "turn memory.cmd"
    batch.write_text("@python -m turn_memory %*\r\n")
    trees = {"work": [{**BASIC, "disabled": True}, ours(ENGINE, transport="ipc")],
             "cli": [{**BASIC, "disabled": True}, ours([str(batch), "serve"])]}
    _, findings = diagnose(profile=None, dsh_home=str(home), desktop=None, dsh_path=str(tmp_path / "dsh.exe"),
                           runner=fake_dsh(trees), bridge=False, platform="win32")
    found = windows_lines(findings)
    ipc = found["windows: profile work: transport"]
    given = f"--dsh-home {home} --dsh {tmp_path / 'dsh.exe'}"  # every fix repeats the flags the user gave
    assert (ipc.status, ipc.fix) == ("warn", f"turn-memory install --profile work {given} --set engine.transport=auto")
    assert "windows: profile work: engine command" not in found
    cmd = found["windows: profile cli: engine command"]
    assert cmd.status == "fail" and cmd.detail == (f"{batch} is a batch file: Node refuses to start one without a "
                                                   "shell (spawn EINVAL), so DSH would run without turn-memory")
    assert cmd.fix == f"turn-memory install --profile cli {given}  (records the python.exe you run it with)"
    assert found["windows: profile cli: transport"].status == "ok"


@pytest.mark.parametrize("name, bridge, status", [
    ("_WindowsSelectorEventLoop", True, "ok"),
    ("ProactorEventLoop", True, "fail"),
    (None, True, "warn"),
    (None, False, "ok"),
])
def test_the_event_loop_line_judges_what_the_engine_reported(name, bridge, status):
    assert windows.event_loop(name, bridge).status == status


def test_the_dsh_line_accepts_another_dsh_for_other_profiles():
    plain = DshLocation(Path("C:/nodejs/dsh.cmd"), "PATH")
    assert windows.dsh_wrapper(plain, ["headless"]).status == "ok"


def test_other_platforms_get_no_windows_lines(tmp_path):
    home = tmp_path / "home"
    (home / "profiles" / "tui").mkdir(parents=True)
    (home / "profiles" / "tui" / "package.json").write_text("{}")
    (tmp_path / "dsh").write_text("")
    _, findings = diagnose(profile=None, dsh_home=str(home), desktop=None, dsh_path=str(tmp_path / "dsh"),
                           runner=fake_dsh({"tui": [{**BASIC, "disabled": True}, ours(ENGINE)]}), bridge=False,
                           platform="linux")
    assert not [f for f in findings if f.check.startswith("windows:")]


def test_engine_processes_are_not_claimed_absent_where_there_is_no_proc(tmp_path):
    assert running_engines(tmp_path / "no-proc") is None
    finding = check_processes(None, tmp_path / "home")
    assert (finding.status, finding.detail) == ("ok", "not listed on this OS (doctor reads Linux's /proc)")


def test_a_windows_engine_command_seen_from_linux_is_not_called_missing():
    """A Windows DSH's profile read from Linux (Wine, a shared drive; issue 31): the recorded
    `C:\\...\\python.exe` or `D:\\...` cannot be looked up here, and is not "removed"."""
    from turn_memory.doctor.checks import check_engine_command
    from turn_memory.install.fix_commands import Invocation

    command = ["D:\\Envs\\My Envs\\tm\\Scripts\\python.exe", "-m", "turn_memory", "serve"]
    found = check_engine_command({"engine": {"command": command}}, "tm", Invocation(), platform="linux")
    assert (found.status, found.detail) == ("warn", " ".join(command) + ": a Windows path, which DSH starts on "
                                            "Windows; this doctor runs on linux and cannot check it (run turn-memory "
                                            "doctor on that Windows machine)")
    missing = check_engine_command({"engine": {"command": command}}, "tm", Invocation(), platform="win32")
    assert missing.status == "fail" and missing.detail.startswith("D:\\Envs\\My Envs\\tm\\Scripts\\python.exe does not exist")


# ---- the node check for a Windows DSH (issue 31) ------------------------------------------------

NODE_20 = "v20.20.2\n"


def never_run(argv):  # type: ignore[no-untyped-def]
    raise AssertionError(f"the node check ran {argv} for a Windows DSH")


def old_node(argv):  # type: ignore[no-untyped-def]
    from turn_memory.install.profile import ProcResult

    return ProcResult(tuple(argv), 0, NODE_20, "")


@pytest.mark.parametrize("name, tag", [("dsh.exe", ""), ("dsh.cmd", ""), ("dsh-wine", "# turn-memory-dsh-platform: win32\n")],
                         ids=["exe (WSL)", "cmd (a shared drive)", "a wrapper that runs one (Wine)"])
def test_a_windows_dsh_seen_from_linux_does_not_judge_linuxs_node(tmp_path, name, tag):
    """The Node a Windows DSH and its pnpm run on is the Windows side's: Linux's node 20 is not
    run, not blamed, and no Linux `--dsh` is offered (the cached DSH 0.1.0 would be one)."""
    from turn_memory.doctor.checks import check_node
    from turn_memory.install.fix_commands import Invocation

    dsh = tmp_path / name
    dsh.write_text(f"#!/bin/sh\n{tag}exit 0\n")
    found = check_node(never_run, DshLocation(dsh, "--dsh"), {"0.1.0-rc.8": tmp_path / "cached-dsh"}, Invocation(),
                       platform="linux")
    assert (found.status, found.fix) == ("warn", None)
    assert found.detail == (f"not checked: {dsh} is a Windows DSH; it and the pnpm its `dsh plugin add` runs use "
                            "the Windows side's Node and PATH, not this linux machine's node (run turn-memory doctor "
                            "on that Windows machine)")


def test_on_windows_the_dsh_exe_needs_pnpm_on_path_not_node():
    """The runtime exe brings its own JavaScript runtime; its `dsh plugin add` runs pnpm through
    cmd.exe: that is what is checked (found, or missing with its fix)."""
    from turn_memory.doctor.checks import check_node
    from turn_memory.install.fix_commands import Invocation
    from turn_memory.install.node_check import PNPM_FIX

    exe = DshLocation(Path("C:/Users/me/tm/Scripts/dsh.exe"), "PATH")
    pnpm = r"C:\Users\me\AppData\Roaming\npm\pnpm.CMD"
    found = check_node(never_run, exe, {}, Invocation(), platform="win32", which=lambda name: pnpm)
    assert (found.status, found.detail) == ("ok", "not used by the DSH exe, which brings its own JavaScript runtime; "
                                                  f"its `dsh plugin add` runs the pnpm on PATH through cmd.exe: {pnpm}")
    missing = check_node(never_run, exe, {}, Invocation(), platform="win32", which=lambda name: None)
    assert (missing.status, missing.fix) == ("warn", PNPM_FIX)
    assert missing.detail == ("the DSH exe brings its own JavaScript runtime, but its `dsh plugin add` runs `pnpm` "
                              "through cmd.exe, and there is no pnpm on PATH")


def test_on_windows_npms_dsh_cmd_runs_on_the_node_on_path_and_is_checked_as_on_linux():
    from turn_memory.doctor.checks import check_node
    from turn_memory.install.fix_commands import Invocation
    from turn_memory.install.node_check import REQUIREMENT

    npm_cmd = DshLocation(Path("C:/Users/me/AppData/Roaming/npm/dsh.cmd"), "PATH")
    found = check_node(old_node, npm_cmd, {}, Invocation(), platform="win32", which=lambda name: None)
    assert (found.status, found.detail) == ("fail", f"node v20.20.2 is older than 22.19; DSH needs {REQUIREMENT}")


def test_doctor_on_linux_for_a_windows_dsh_gives_its_verdict_without_a_node_problem(tmp_path):
    """What `turn-memory doctor --dsh <a Windows DSH>` prints end to end (the Windows e2e test
    asserts the same against the real exe): the node line is a warning, not a problem."""
    from turn_memory.doctor.command import diagnose

    home = tmp_path / "home"
    (home / "profiles" / "tm").mkdir(parents=True)
    (home / "profiles" / "tm" / "package.json").write_text("{}")
    (tmp_path / "dsh.exe").write_text("")
    _, findings = diagnose(profile="tm", dsh_home=str(home), desktop=None, dsh_path=str(tmp_path / "dsh.exe"),
                           runner=fake_dsh({"tm": [{**BASIC, "disabled": True}, ours(ENGINE)]}), bridge=False,
                           platform="linux", env={"PATH": ""})
    node = next(f for f in findings if f.check == "node")
    assert node.status == "warn" and node.detail.startswith(f"not checked: {tmp_path / 'dsh.exe'} is a Windows DSH")
    assert not [f for f in findings if f.status == "fail"], findings
