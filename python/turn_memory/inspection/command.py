"""`turn-memory inspect PATH|SESSION_ID`: argparse wiring, log lookup, exit status."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson

from turn_memory.inspection.progress import ProgressBar, wants_bar
from turn_memory.inspection.report import inspect_log, print_report
from turn_memory.logs.reader import LOG_NAMES, SessionLogError, find_session_logs, read_session_header, session_log_for
from turn_memory.paths import expand_path

EXIT_WHOLE = 0
EXIT_ERROR = 1  # nothing to inspect: no such log, not a session log
EXIT_DAMAGED = 3  # the report covers what could be read; damage or inconsistencies are listed

DESCRIPTION = """\
Show what turn-memory did to a DSH session, read-only, straight from the session log on disk
(session.jsonl, session.jsonl.zstd or session.v4.jsonl.zstd; zstd logs are read frame by
frame, in bounded memory, whatever their size).

Per turn: surface nodes and estimated tokens before turn-memory (what the agent appended)
and after (the turn's nodes once compressed, or just before a checkpoint folded them), its
markers (pending, compression, no-op) and state; then every checkpoint with the range it
shadows, the current surface size and the total savings. A corrupted or truncated frame is
reported with its byte offset and everything readable is still reported.

exit status: 0 the log is whole; 3 part of it is damaged or inconsistent (listed in the
report); 1 nothing to inspect (no such log, or not a session log)."""


def newest_user_session(home: Path) -> Path | None:
    """The most recent session that is not a subagent's (workers write sessions too)."""
    for path in reversed(find_session_logs(home)):
        try:
            if read_session_header(path).get("origin") != "subagent":
                return path
        except SessionLogError:
            continue
    return None


def resolve_log(target: str | None, home: Path) -> Path:
    """A log file, a session directory, or a session id under the DSH home (FileNotFoundError)."""
    if target is None:
        found = newest_user_session(home)
        if found is None:
            raise FileNotFoundError(f"no session log under {home}")
        return found
    path = expand_path(target)
    if path.is_file():
        return path
    if path.is_dir():
        for name in LOG_NAMES:
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(f"{path} holds no session log ({', '.join(LOG_NAMES)})")
    return session_log_for(home, target)


def run(args: argparse.Namespace) -> int:
    home = expand_path(args.dsh_home or os.environ.get("DSH_HOME") or Path.home() / ".dsh")
    target = args.target or args.session
    try:
        path = resolve_log(target, home)
    except FileNotFoundError as exc:
        print(f"turn-memory inspect: {exc}", file=sys.stderr)
        return EXIT_ERROR
    bar = None
    if not args.no_progress and wants_bar(path.stat().st_size, sys.stderr, args.json):
        bar = ProgressBar(path.stat().st_size, sys.stderr)
    try:
        report = inspect_log(path, on_progress=bar)
    except OSError as exc:
        print(f"turn-memory inspect: cannot read {path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if bar is not None:
            bar.close()
    if report["session"] is None and report["log"]["events"] == 0:
        print(f"turn-memory inspect: {path} is not a readable DSH session log", file=sys.stderr)
        for damage in report["damage"]:
            print(f"  {damage['kind']}: {damage['detail']}", file=sys.stderr)
        return EXIT_ERROR
    try:
        if args.json:
            sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
            sys.stdout.flush()
        else:
            print_report(report, sys.stdout)
    except BrokenPipeError:  # `inspect … | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_WHOLE if report["whole"] and not report["inconsistencies"] else EXIT_DAMAGED


def add_inspect_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show what turn-memory did to a session (read-only, any log size)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", metavar="PATH|SESSION_ID",
                   help="a session log file, a session directory, or a session id looked up under the DSH home "
                        "(default: the newest user session there)")
    p.add_argument("--session", help=argparse.SUPPRESS)  # the older spelling of SESSION_ID
    p.add_argument("--dsh-home", help="DSH home for session ids (default: $DSH_HOME, else ~/.dsh)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (schema turn-memory.inspect/1, docs/inspect-json.md)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, even on a large log in a terminal")
    p.set_defaults(func=run)
