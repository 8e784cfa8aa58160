"""The engine's entry point (`turn-memory serve`) on every OS: its event loop, its standard
streams, and how it stops without a signal. The Windows branch is driven by the platform
argument, on the interpreter at hand (issue 19)."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from turn_memory.serve import _watch_stdin, default_endpoint, loop_factory, run_loop, utf8_stdio

#: the interpreter versions whose branch of `run_loop` this Python can run (3.12's needs
#: `asyncio.run(loop_factory=)`, so it runs only on 3.12+; the others run anywhere >= 3.11)
VERSIONS = [v for v in [(3, 10), (3, 11), (3, 12)] if v <= sys.version_info[:2]]


def test_windows_gets_the_selector_loop_and_other_platforms_the_default():
    assert loop_factory("win32") is asyncio.SelectorEventLoop
    assert loop_factory("linux") is None
    assert loop_factory("darwin") is None


def test_windows_defaults_to_tcp_on_localhost_and_posix_to_a_private_ipc_socket():
    assert default_endpoint("auto", "win32") == "tcp://127.0.0.1:*"
    assert default_endpoint("tcp", "linux") == "tcp://127.0.0.1:*"
    assert default_endpoint("auto", "linux").startswith("ipc://") and default_endpoint("auto", "linux").endswith(
        "/engine.sock")


async def _zmq_round_trip() -> tuple[type, bytes]:
    """What the engine does first: a ROUTER awaits a DEALER's message and answers it."""
    ctx = zmq.asyncio.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        await dealer.send(b"ping")
        identity, body = await asyncio.wait_for(router.recv_multipart(), 10)
        await router.send_multipart([identity, body + b"-pong"])
        answer = await asyncio.wait_for(dealer.recv(), 10)
        return type(asyncio.get_running_loop()), answer
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"py{v[0]}.{v[1]}")
def test_the_windows_loop_serves_zmq_without_a_policy_or_any_warning(monkeypatch, version):
    def forbidden(*args: object) -> None:
        raise AssertionError("set_event_loop_policy is deprecated in Python 3.14; the entry point must not call it")

    monkeypatch.setattr(asyncio, "set_event_loop_policy", forbidden)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pyzmq's Proactor RuntimeWarning, 3.14's DeprecationWarning
        loop_class, answer = run_loop(_zmq_round_trip(), loop_factory("win32"), version)
    assert issubclass(loop_class, asyncio.SelectorEventLoop)
    assert answer == b"ping-pong"


def test_run_loop_closes_its_loop_and_cancels_what_is_left_on_python_3_10():
    made: list[asyncio.AbstractEventLoop] = []
    left: list[asyncio.Task[None]] = []

    def factory() -> asyncio.AbstractEventLoop:
        made.append(asyncio.SelectorEventLoop())
        return made[-1]

    async def main() -> str:
        left.append(asyncio.create_task(asyncio.sleep(3600)))
        return "done"

    assert run_loop(main(), factory, (3, 10)) == "done"
    assert made[0].is_closed()
    assert left[0].cancelled()


def test_the_log_reaches_the_shim_as_utf8_whatever_the_console_code_page():
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="cp1252", errors="strict")  # a Western Windows pipe
    with pytest.raises(UnicodeEncodeError):
        stream.write("session s1 turn 3: could not keep C:\\Users\\张伟\\.dsh\\x.json\n")
        stream.flush()
    raw.seek(0)
    raw.truncate()
    utf8_stdio(stream)
    stream.write("session s1 turn 3: could not keep C:\\Users\\张伟\\.dsh\\x.json\n")
    stream.flush()
    assert raw.getvalue().decode("utf-8") == "session s1 turn 3: could not keep C:\\Users\\张伟\\.dsh\\x.json\n"


def test_closed_stdin_stops_the_engine_and_a_hung_one_exits_after_the_grace_period(caplog):
    exits: list[int] = []
    exited = threading.Event()

    def exit_now(code: int) -> None:
        exits.append(code)
        exited.set()

    async def engine() -> bool:
        stop = asyncio.Event()
        _watch_stdin(asyncio.get_running_loop(), stop, io.BytesIO(b"bytes the shim never sends"), 0.05, exit_now)
        await asyncio.wait_for(stop.wait(), 5)  # stdin reached EOF: the engine is asked to stop
        # ... and hangs instead of stopping (a blocked loop, or a Python behind a killed launcher)
        return await asyncio.to_thread(exited.wait, 5)

    with caplog.at_level(logging.WARNING, logger="turn_memory.serve"):
        assert asyncio.run(engine()) is True
    assert exits == [0]
    assert caplog.messages == ["engine still running 0.05 s after its stdin closed (DSH is gone or replaced it); "
                               "exiting now"]


def _serve(tmp_path: Path, *args: str) -> tuple[str, str]:
    """`turn-memory serve ARGS` as the shim runs it (no shell); stopped by closing its stdin."""
    env = {**os.environ, "TURN_MEMORY_SECRET": "s", "HOME": str(tmp_path), "USERPROFILE": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "turn_memory", "serve", "--transport", "tcp", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=tmp_path / "cwd", encoding="utf-8")
    assert proc.stdout is not None and proc.stdin is not None
    ready = proc.stdout.readline()
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    return ready, proc.stderr.read() if proc.stderr else ""


def test_a_log_file_under_the_users_home_is_written_there_not_in_a_folder_named_tilde(tmp_path):
    (tmp_path / "cwd").mkdir()
    ready, _ = _serve(tmp_path, "--log-file", "~/.dsh/turn-memory-engine.log")
    assert ready.startswith("TURN_MEMORY_READY tcp://127.0.0.1:")
    log = (tmp_path / ".dsh" / "turn-memory-engine.log").read_text(encoding="utf-8")
    assert f"engine listening on {ready.split()[1]} (pid " in log and "SelectorEventLoop)" in log
    assert not (tmp_path / "cwd" / "~").exists()


def test_a_log_file_that_cannot_be_written_leaves_the_engine_running(tmp_path):
    (tmp_path / "cwd").mkdir()
    (tmp_path / "taken").write_text("a file where the log's folder would be")
    ready, err = _serve(tmp_path, "--log-file", str(tmp_path / "taken" / "engine.log"))
    assert ready.startswith("TURN_MEMORY_READY tcp://127.0.0.1:")
    assert err.startswith(f"turn-memory serve: cannot write the engine log to {tmp_path / 'taken' / 'engine.log'} (")
    assert "logging to DSH's log only\n" in err
