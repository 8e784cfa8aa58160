"""What `turn-memory doctor` adds on Windows: the DSH Desktop home, the `dsh` wrapper it
uses, each profile's bridge transport and engine command, and the event loop the engine
reported in its handshake. Pure: it judges what `diagnose` found."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import PurePath, PureWindowsPath
from typing import Any

from turn_memory.doctor.findings import Finding, fail, ok, warn
from turn_memory.resources import REINSTALL
from turn_memory.install.desktop import DESKTOP_WRAPPER_PARTS
from turn_memory.install.profile import DshLocation

DESKTOP_PROFILE = "desktop"


def desktop_home(home: PurePath, wrapper_exists: bool, profiles: list[str]) -> Finding:
    wrapper = home.parent.joinpath(*DESKTOP_WRAPPER_PARTS)
    if wrapper_exists:
        return ok("windows: DSH home", f"{home} (DSH Desktop's: its CLI wrapper is {wrapper})")
    detail = f"{home} is not a DSH Desktop home (no {PureWindowsPath(*DESKTOP_WRAPPER_PARTS)} beside it)"
    if DESKTOP_PROFILE in profiles:
        return warn("windows: DSH home", detail + "; the desktop profile is DSH Desktop's",
                    "turn-memory doctor --desktop <the folder DSH Desktop is installed in>")
    return ok("windows: DSH home", detail)


def dsh_wrapper(location: DshLocation, profiles: list[str]) -> Finding:
    if location.is_desktop_wrapper:
        return ok("windows: dsh", f"{location.path} (DSH Desktop's CLI wrapper, found via {location.how}; "
                                  "run through cmd.exe /d /s /c)")
    detail = f"{location.path} (found via {location.how}) is not DSH Desktop's wrapper"
    if DESKTOP_PROFILE in profiles:
        return fail("windows: dsh", detail + ": only that wrapper may manage the desktop profile",
                    "turn-memory doctor --desktop <the folder DSH Desktop is installed in>")
    return ok("windows: dsh", detail + " (fine for every profile but desktop)")


def transport(profile: str, config: Mapping[str, Any], install: Callable[..., str]) -> Finding:
    """`install(*options, profile=…)`: the install command with the user's own flags."""
    label = f"windows: profile {profile}: transport"
    chosen = (config.get("engine") or {}).get("transport", "auto")
    if chosen == "ipc":
        return warn(label, "engine.transport is ipc: a socket file in the temp folder (Windows 10 1803+ AF_UNIX), "
                           "not tested on Windows; auto uses tcp there",
                    install("--set", "engine.transport=auto", profile=profile))
    return ok(label, f"tcp on 127.0.0.1, a random port, the per-run secret in the handshake (engine.transport {chosen})")


def engine_command(profile: str, command: list[str] | None, install: Callable[..., str]) -> Finding | None:
    """Node starts the engine command without a shell, which it refuses for .cmd/.bat files."""
    if not command or PureWindowsPath(command[0]).suffix.lower() not in (".cmd", ".bat"):
        return None
    return fail(f"windows: profile {profile}: engine command",
                f"{command[0]} is a batch file: Node refuses to start one without a shell (spawn EINVAL), so DSH "
                "would run without turn-memory",
                install(profile=profile) + "  (records the python.exe you run it with)")


def event_loop(name: str | None, bridge: bool) -> Finding:
    label = "windows: event loop"
    if not bridge:
        return ok(label, "not checked (--no-bridge): the round trip reports it")
    if name is None:
        return warn(label, "the engine did not report its event loop (the round trip failed, or an engine older "
                           "than this turn-memory)", f"reinstall turn-memory {REINSTALL}")
    if "Proactor" in name:
        return fail(label, f"{name}: pyzmq's asyncio sockets cannot wait on it (no add_reader)",
                    f"reinstall turn-memory {REINSTALL}: this version runs the engine on a selector loop")
    return ok(label, f"{name} (pyzmq's asyncio sockets need a selector loop on Windows)")
