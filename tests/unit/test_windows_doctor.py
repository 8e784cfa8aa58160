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
