"""`turn-memory serve`: run the engine behind a ZeroMQ ROUTER for one DSH process.

The shim starts it with a per-run secret in TURN_MEMORY_SECRET and reads the bound
endpoint from the READY line on stdout. The engine exits when its stdin closes, so it
never outlives the DSH process that started it, on any OS.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
import tempfile
import threading
from pathlib import Path

from turn_memory.bridge.server import BridgeServer
from turn_memory.cli_output import error_text
from turn_memory.engine import Engine
from turn_memory.paths import expand_path

READY = "TURN_MEMORY_READY"


def default_endpoint(transport: str) -> str:
    if transport == "tcp" or (transport == "auto" and sys.platform == "win32"):
        return "tcp://127.0.0.1:*"
    return "ipc://" + str(Path(tempfile.mkdtemp(prefix="tm-")) / "engine.sock")  # mkdtemp: 0700


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    def read() -> None:
        try:
            while sys.stdin.buffer.read(65536):
                pass
        except (OSError, ValueError):
            pass
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=read, name="stdin-watch", daemon=True).start()


async def _serve(endpoint: str, secret: str, watch_stdin: bool) -> None:
    engine = Engine()
    server = BridgeServer(endpoint, secret, engine)
    engine.server = server
    bound = server.bind()
    if pid_file := os.environ.get("TURN_MEMORY_PID_FILE"):  # lets tests kill the engine on purpose
        Path(pid_file).write_text(str(os.getpid()))
    print(f"{READY} {bound}", flush=True)
    logging.getLogger("turn_memory").info("engine listening on %s (pid %d)", bound, os.getpid())
    stop = asyncio.Event()
    if watch_stdin:
        _watch_stdin(asyncio.get_running_loop(), stop)
    serving = asyncio.create_task(server.serve())
    await stop.wait()
    await engine.close()
    serving.cancel()
    server.close()


def run(args: argparse.Namespace) -> int:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if args.log_file:
        # the shim passes engine.logFile as an argument: no shell has expanded `~` or $VARS
        log_file = expand_path(args.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(file_handler)
    handlers[0].setFormatter(logging.Formatter("turn-memory %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), handlers=handlers)
    secret = os.environ.get("TURN_MEMORY_SECRET")
    if not secret:
        if not args.print_secret:
            print(error_text("serve", "TURN_MEMORY_SECRET is not set (DSH's shim sets it when it starts the engine)",
                             "turn-memory serve --print-secret"), file=sys.stderr)
            return 2
        secret = secrets.token_hex(24)
        print(f"TURN_MEMORY_SECRET {secret}", flush=True)
    endpoint = args.endpoint or default_endpoint(args.transport)
    try:
        asyncio.run(_serve(endpoint, secret, not args.no_stdin_watch))
    except KeyboardInterrupt:
        pass
    return 0


def add_serve_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the engine for one DSH process (the shim starts this)",
                       description="Run the turn-memory engine behind a ZeroMQ ROUTER. Normally started by the "
                                   "DSH shim, which passes --endpoint and TURN_MEMORY_SECRET.",
                       epilog="exit status: 0 stopped (its stdin closed, or Ctrl-C); 2 no TURN_MEMORY_SECRET (and "
                              "no --print-secret), or bad usage.")
    p.add_argument("--endpoint", help="ZeroMQ endpoint to bind (ipc://PATH or tcp://127.0.0.1:*)")
    p.add_argument("--transport", choices=["auto", "ipc", "tcp"], default="auto",
                   help="transport when --endpoint is not given (auto: ipc, tcp on Windows)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-file", help="also append the engine log to this file (`~` and $VARS are expanded)")
    p.add_argument("--no-stdin-watch", action="store_true", help="do not exit when stdin closes")
    p.add_argument("--print-secret", action="store_true", help="generate a secret and print it (manual testing)")
    p.set_defaults(func=run)
