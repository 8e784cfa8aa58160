"""Bridge round trip: start the engine command as the shim would, shake hands, ping, stop.

The same steps as the shim's `EngineProcess` + `Bridge`: a private endpoint (ipc in a
0700 temp dir; tcp on 127.0.0.1 on Windows), the per-run secret in TURN_MEMORY_SECRET,
the READY line on stdout, then `hello` and `ping` over a DEALER. Closing stdin stops it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turn_memory.config import config_problems, fix_options
from turn_memory.doctor.findings import Finding, fail, ok
from turn_memory.host.dialects import DIALECTS

if TYPE_CHECKING:  # imported at run time only by check_bridge: the rest of doctor does not need it
    import zmq

READY = "TURN_MEMORY_READY"
PROTOCOL = 1


def _call(sock: zmq.Socket[bytes], call_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    sock.send_multipart([json.dumps({"v": PROTOCOL, "kind": "call", "id": call_id, "method": method,
                                     "params": params}).encode()])
    return json.loads(sock.recv_multipart()[0])


def _read_ready(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The endpoint from the READY line, or None when the engine dies or stays silent."""
    box: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(READY):
                box.append(line.split()[1])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return box[0] if box else None


def check_bridge(command: list[str], label: str, fix: str, *, configs: Mapping[str, Mapping[str, Any]] | None = None,
                 install: Callable[..., str] | None = None, timeout_s: float = 20.0,
                 platform: str = sys.platform,
                 on_hello: Callable[[dict[str, Any]], None] | None = None) -> list[Finding]:
    """Start `command` once; ping it; hand it each profile's row config as the shim would.

    Returns the round-trip finding, then one `profile NAME: config` finding per entry of
    `configs` (profile -> the row's config from `dsh --dump-config`): the engine's own
    verdict on that config, a refusal with the key and its fix (`install(*options, profile=…)`
    renders that fix with the user's own flags). `on_hello` gets the first handshake's result
    (what the engine reports about itself, e.g. its event loop).
    """
    import zmq  # only here: the rest of doctor does not need it

    tmp = Path(tempfile.mkdtemp(prefix="tm-doctor-"))
    endpoint = "tcp://127.0.0.1:*" if platform == "win32" else f"ipc://{tmp / 'engine.sock'}"
    secret = secrets.token_hex(24)
    started = time.monotonic()
    try:
        # the engine writes UTF-8 whatever the console code page (serve.utf8_stdio)
        proc = subprocess.Popen([*command, "--endpoint", endpoint], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                                env={**os.environ, "TURN_MEMORY_SECRET": secret})
    except OSError as exc:
        return [fail(label, f"cannot start {command[0]}: {exc}", fix)]
    sockets: list[zmq.Socket[bytes]] = []
    bound: str  # the endpoint from the READY line: known before the first hello

    def hello(config: Mapping[str, Any]) -> dict[str, Any]:
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sockets.append(sock)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
        sock.connect(bound)
        claimed = DIALECTS[0]  # the handshake checks the config whatever the dialect
        return _call(sock, f"h{len(sockets)}", "hello", {
            "protocol": PROTOCOL, "dshVersion": claimed.tested_versions[0], "dialect": claimed.name, "secret": secret,
            "pid": os.getpid(), "checkpointSource": claimed.checkpoint_source("probe"), "config": dict(config)})

    try:
        ready = _read_ready(proc, timeout_s)
        if ready is None:
            proc.kill()
            _, err = proc.communicate(timeout=5)
            return [fail(label, f"the engine did not report READY within {timeout_s:.0f} s; its stderr: "
                                f"{err.strip()[-400:] or '(empty)'}", fix)]
        bound = ready
        boot = time.monotonic() - started
        first = hello({})
        if "error" in first:
            return [fail(label, f"handshake refused: {first['error'].get('message', first['error'])}", fix)]
        if on_hello is not None:
            on_hello(first.get("result") or {})
        t0 = time.perf_counter()
        pong = _call(sockets[0], "p1", "ping", {"echo": "doctor"})
        rtt_ms = (time.perf_counter() - t0) * 1000
        if pong.get("result") != {"echo": "doctor"}:
            return [fail(label, f"ping answered {pong!r}", fix)]
        version = first.get("result", {}).get("engineVersion", "?")
        findings = [ok(label, f"engine {version} started in {boot:.1f} s on {bound.split(':')[0]}; hello ok; "
                              f"ping round trip {rtt_ms:.1f} ms")]
        for profile, config in (configs or {}).items():
            findings.append(_config_finding(profile, config, hello(config), install))
        return findings
    except zmq.Again:
        return [fail(label, f"the engine did not answer within {timeout_s:.0f} s", fix)]
    finally:
        for sock in sockets:
            sock.close(0)
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()  # the engine exits when its stdin closes
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _config_finding(profile: str, config: Mapping[str, Any], answer: dict,
                    install: Callable[..., str] | None) -> Finding:
    label = f"profile {profile}: config"
    error = answer.get("error")
    if error is None:
        keys = sorted(k for k in config if k != "engine")
        return ok(label, "the engine accepted the row's config (the handshake DSH's shim sends)"
                         + (f"; sections set: {', '.join(keys)}" if keys else "; engine defaults otherwise"))
    # the same model judges it here: the fix names this profile, the user's flags, and each bad key
    options = fix_options(config_problems(dict(config)))
    if install is not None and options:
        fix = install(*options, profile=profile)
    else:
        fix = (error.get("fix") or "fix the turn-memory row's config, then turn-memory install --profile NAME").replace(
            "--profile NAME", f"--profile {profile}")
    return fail(label, f"the engine refuses the handshake ({error.get('code')}): {error.get('message')}; "
                       "DSH runs without turn-memory until it is fixed", fix)
