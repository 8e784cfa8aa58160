"""The Linux side of `data/engine-relay.mjs`, for the Windows tests under Wine.

Wine's Node cannot start a Linux program, so the Windows DSH's shim starts the relay (a
node.exe script) as its engine; the relay connects here and this starts the real
`turn-memory serve` on Linux with the relay's argv and the shim's secret. The engine binds tcp
on 127.0.0.1 (the shim asks for tcp on Windows), the shim connects to it directly; only the
engine's lifetime goes through the relay: its stdin closes when the relay's connection closes,
and its exit code goes back. One JSON object a line each way.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


class _Relay(socketserver.StreamRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        request = json.loads(self.rfile.readline())
        argv = [*self.server.command, *request["args"]]
        engine = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env={**os.environ, "TURN_MEMORY_SECRET": request["secret"]})
        self.server.started.append(argv)
        lock = threading.Lock()

        def send(message: dict[str, Any]) -> None:
            with lock:
                try:
                    self.wfile.write((json.dumps(message) + "\n").encode())
                except OSError:
                    pass  # the relay is gone; the engine's stdin closing stops it

        def pump(stream: IO[bytes], key: str) -> None:
            for raw in stream:
                send({key: raw.decode("utf-8", "replace").rstrip("\r\n")})

        def close_stdin_when_relay_closes() -> None:
            try:
                while self.connection.recv(4096):
                    pass
            except OSError:
                pass
            try:
                assert engine.stdin is not None
                engine.stdin.close()
            except OSError:
                pass

        assert engine.stdout is not None and engine.stderr is not None
        pumps = [threading.Thread(target=pump, args=(engine.stdout, "stdout"), daemon=True),
                 threading.Thread(target=pump, args=(engine.stderr, "stderr"), daemon=True)]
        for thread in [*pumps, threading.Thread(target=close_stdin_when_relay_closes, daemon=True)]:
            thread.start()
        code = engine.wait()
        for thread in pumps:
            thread.join(timeout=2)
        send({"exit": code})
        try:
            self.connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, command: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.command = command
        #: every engine argv started, for a test to assert on
        self.started: list[list[str]] = []


@contextmanager
def engine_launcher(python: Path) -> Iterator[_Server]:
    """A launcher on 127.0.0.1 (`.server_address[1]` is its port: the relay's TM_RELAY_PORT)
    that starts `python -m turn_memory serve ARGS`; stopped on exit."""
    server = _Server([str(python), "-m", "turn_memory", "serve"])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
