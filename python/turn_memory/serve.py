"""`turn-memory serve`: run the engine behind a ZeroMQ ROUTER for one DSH process.

The shim starts it with a per-run secret in TURN_MEMORY_SECRET and reads the bound
endpoint from the READY line on stdout. The engine exits when its stdin closes, so it
never outlives the DSH process that started it, on any OS: no POSIX signal is needed to
stop it, and one still running `EXIT_GRACE_S` after its stdin closed (a hung loop, or a
Python behind a launcher the shim killed) exits on its own.

The platform-dependent choices live here, at the entry point: the event loop (a selector
loop on Windows, see `loop_factory`), the transport (`default_endpoint`) and UTF-8 on the
standard streams (`utf8_stdio`).
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
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO, TypeVar

from turn_memory.bridge.server import BridgeServer
from turn_memory.cli_output import error_text
from turn_memory.engine import Engine
from turn_memory.paths import expand_path

READY = "TURN_MEMORY_READY"
#: how long the engine may take to stop once its stdin closed before it exits regardless
EXIT_GRACE_S = 5.0

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
log = logging.getLogger("turn_memory.serve")


def default_endpoint(transport: str, platform: str = sys.platform) -> str:
    if transport == "tcp" or (transport == "auto" and platform == "win32"):
        return "tcp://127.0.0.1:*"
    return "ipc://" + str(Path(tempfile.mkdtemp(prefix="tm-")) / "engine.sock")  # mkdtemp: 0700 (POSIX)


def loop_factory(platform: str = sys.platform) -> LoopFactory | None:
    """The event loop the engine runs on; None: asyncio's default.

    pyzmq's asyncio sockets wait through `add_reader`, which the Proactor loop (the default
    on Windows) does not have: pyzmq then raises at the first receive, or, with tornado
    installed, runs an extra selector thread behind a RuntimeWarning. So on Windows the
    engine runs on the selector loop, chosen here rather than through an event-loop policy
    (deprecated in Python 3.14). It has no subprocess support there; the engine starts none.
    """
    return asyncio.SelectorEventLoop if platform == "win32" else None


def run_loop(main: Coroutine[Any, Any, T], factory: LoopFactory | None,
             version: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)) -> T:
    """`asyncio.run(main)` on a loop from `factory` (any Python >= 3.10)."""
    if factory is None:
        return asyncio.run(main)
    # `version` (a test's choice of branch) is never above the running Python's: the
    # sys.version_info half never changes the outcome, it lets the checker gate these
    # branches to the Pythons whose asyncio has what they call
    if sys.version_info >= (3, 12) and version >= (3, 12):
        return asyncio.run(main, loop_factory=factory)
    if sys.version_info >= (3, 11) and version >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    # 3.10 has neither: what asyncio.run does, on our loop
    loop = factory()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def utf8_stdio(*streams: TextIO) -> None:
    """Write UTF-8 whatever the console code page: the shim reads the READY line and the log as
    UTF-8, and a Windows pipe otherwise gets the ANSI code page, which cannot encode every path
    or session text a log line may name (the logging module then prints a traceback instead)."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(encoding="utf-8", errors="backslashreplace")


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event, stdin: Any = None,
                 grace_s: float = EXIT_GRACE_S, exit_now: Callable[[int], object] = os._exit) -> threading.Thread:
    def read() -> None:
        stream = stdin if stdin is not None else sys.stdin.buffer
        try:
            while stream.read(65536):
                pass
        except (OSError, ValueError):
            pass
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:  # the loop is already closed: the engine is stopping anyway
            return
        # a daemon thread: a normal stop ends the process before this wakes
        time.sleep(grace_s)
        log.warning("engine still running %g s after its stdin closed (DSH is gone or replaced it); exiting now",
                    grace_s)
        exit_now(0)

    thread = threading.Thread(target=read, name="stdin-watch", daemon=True)
    thread.start()
    return thread


async def _serve(endpoint: str, secret: str, watch_stdin: bool) -> None:
    engine = Engine()
    server = BridgeServer(endpoint, secret, engine)
    engine.server = server
    bound = server.bind()
    if pid_file := os.environ.get("TURN_MEMORY_PID_FILE"):  # lets tests kill the engine on purpose
        Path(pid_file).write_text(str(os.getpid()))  # noqa: ASYNC240 - one tiny write before serving starts
    print(f"{READY} {bound}", flush=True)
    logging.getLogger("turn_memory").info("engine listening on %s (pid %d, %s)", bound, os.getpid(),
                                          type(asyncio.get_running_loop()).__name__)
    stop = asyncio.Event()
    if watch_stdin:
        _watch_stdin(asyncio.get_running_loop(), stop)
    serving = asyncio.create_task(server.serve())
    await stop.wait()
    await engine.close()
    serving.cancel()
    server.close()


def run(args: argparse.Namespace) -> int:
    utf8_stdio(sys.stdout, sys.stderr)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if args.log_file:
        # the shim passes engine.logFile as an argument: no shell has expanded `~` or $VARS
        log_file = expand_path(args.log_file)
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            file_handler = logging.FileHandler(log_file, encoding="utf-8")
        except OSError as exc:  # an engine that cannot start would leave DSH without turn-memory
            print(f"turn-memory serve: cannot write the engine log to {log_file} ({exc}); logging to DSH's log only",
                  file=sys.stderr, flush=True)
        else:
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
        run_loop(_serve(endpoint, secret, not args.no_stdin_watch), loop_factory())
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
