"""`turn-memory inspect PATH|SESSION_ID`: argparse wiring, log lookup, exit status."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path

import orjson

from turn_memory.cli_output import Output, add_level_flags, render
from turn_memory.inspection.progress import ProgressBar, wants_bar
from turn_memory.inspection.report import inspect_log, print_report, with_journal
from turn_memory.inspection.sessions import SCHEMA as SESSIONS_SCHEMA
from turn_memory.inspection.sessions import NoSuchSession, Session, by_id_or_prefix, list_sessions
from turn_memory.logs.reader import LOG_NAMES, SessionLogError, UnknownDialect, session_log_for
from turn_memory.paths import expand_path
from turn_memory.turns.results import ResultStore

EXIT_WHOLE = 0
EXIT_ERROR = 1  # nothing to inspect: no such log, not a session log
EXIT_DAMAGED = 3  # the report covers what could be read; damage or inconsistencies are listed
EXIT_UNKNOWN_DIALECT = 4  # a session log, but its content does not say which known DSH version wrote it

DESCRIPTION = """\
Show what turn-memory did to a DSH session, read-only, straight from the session log on disk
(session.jsonl, session.jsonl.zstd or session.v4.jsonl.zstd, or a copy under any name: which
DSH version wrote it is read from its content; zstd logs are read frame by frame, in bounded
memory, whatever their size).

Per turn: surface nodes and estimated tokens before turn-memory (what the agent appended)
and after (the turn's nodes once compressed, or just before a checkpoint folded them), its
markers (pending, compression, no-op) and state; then every checkpoint with the range it
shadows, the current surface size and the total savings. A corrupted or truncated frame is
reported with its byte offset and everything readable is still reported.

`--list` lists the sessions under the DSH home (newest first); a session is named by its
id or by the start of it."""

EPILOG = """\
exit status: 0 the log is whole; 3 part of it is damaged or inconsistent (listed in the
report); 4 the log's content does not say which known DSH version wrote it (its header names
a session format turn-memory does not read, or is lost and the records do not tell); 1
nothing to inspect (no such log or session, an ambiguous id prefix, not a session log);
2 bad usage."""


def newest_user_session(home: Path) -> Path | None:
    """The most recent session that is not a subagent's (workers write sessions too)."""
    sessions, _ = list_sessions(home)
    return next((s.path for s in sessions if s.is_user), None)


def resolve_log(target: str | None, home: Path) -> Path:
    """A log file, a session directory, or a session id (or its start) under the DSH home.

    FileNotFoundError / NoSuchSession with a message that says what was looked for where.
    """
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
    try:
        return session_log_for(home, target)
    except FileNotFoundError:
        return by_id_or_prefix(home, target)


def _home(args: argparse.Namespace) -> Path:
    return expand_path(args.dsh_home or os.environ.get("DSH_HOME") or Path.home() / ".dsh")


def _home_flag(args: argparse.Namespace) -> list[str]:
    return ["--dsh-home", args.dsh_home] if args.dsh_home else []


def _list_command(args: argparse.Namespace) -> str:
    return render(["turn-memory", "inspect", "--list", *_home_flag(args)])


def run_list(args: argparse.Namespace, out: Output) -> int:
    home = _home(args)
    sessions, unreadable = list_sessions(home)
    shown = sessions if args.all else [s for s in sessions if s.is_user]
    if args.json:
        out.write(orjson.dumps({"schema": SESSIONS_SCHEMA, "home": str(home),
                                "sessions": [s.to_json() for s in shown],
                                "unreadable": [str(p) for p in unreadable]}).decode() + "\n")
        return EXIT_WHOLE
    hidden = len(sessions) - len(shown)
    out.result(f"{len(shown)} session(s) under {home}, newest first"
               + (f"; {hidden} subagent session(s) (turn-memory's workers) not shown: --all lists them" if hidden else ""))
    for s in shown:
        out.result(_session_line(s, args.all))
    for path in unreadable:
        out.say(f"  (unreadable: {path})")
    if shown:
        example = render(["turn-memory", "inspect", shown[0].short_id[:8], *_home_flag(args)])
        out.say(f"inspect one by its id or the start of it: {example}")
    return EXIT_WHOLE


def _session_line(s: Session, with_origin: bool) -> str:
    when = datetime.fromtimestamp(s.modified).strftime("%Y-%m-%d %H:%M")
    size = f"{s.bytes / 1e6:.1f} MB" if s.bytes >= 100_000 else f"{s.bytes / 1e3:.0f} kB"
    origin = f"  {s.origin or 'user':<9}" if with_origin else ""
    return f"  {s.id}{origin}  {when}  {size:>8}  {s.cwd or ''}"


def run(args: argparse.Namespace) -> int:
    out = Output.from_args("inspect", args)
    if args.list:
        return run_list(args, out)
    home = _home(args)
    target = args.target or args.session
    try:
        path = resolve_log(target, home)
    except (FileNotFoundError, NoSuchSession) as exc:
        return out.fail(str(exc), _list_command(args), EXIT_ERROR)
    bar = None
    if not args.no_progress and wants_bar(path.stat().st_size, sys.stderr, args.json):
        bar = ProgressBar(path.stat().st_size, sys.stderr)
    try:
        report = inspect_log(path, on_progress=bar)
    except OSError as exc:
        return out.fail(f"cannot read {path}: {exc}", code=EXIT_ERROR)
    except UnknownDialect as exc:  # said as it is: reading it as some dialect would misreport every turn
        return out.fail(str(exc), code=EXIT_UNKNOWN_DIALECT)
    except SessionLogError as exc:
        return out.fail(str(exc), code=EXIT_ERROR)
    finally:
        if bar is not None:
            bar.close()
    if report["session"] is None and report["log"]["events"] == 0:
        damage = "; ".join(f"{d['kind']}: {d['detail']}" for d in report["damage"])
        return out.fail(f"{path} is not a readable DSH session log" + (f" ({damage})" if damage else ""),
                        code=EXIT_ERROR)
    if report["session"] is not None and report["session"].get("id"):  # what the engine still owes the log
        report = with_journal(report, ResultStore(home).owed(report["session"]["id"]))
    if args.json:
        out.write((orjson.dumps(report) + b"\n").decode())
    else:
        print_report(report, out)
    return EXIT_WHOLE if report["whole"] and not report["inconsistencies"] else EXIT_DAMAGED


def add_inspect_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show what turn-memory did to a session (read-only, any log size)",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", metavar="PATH|SESSION_ID",
                   help="a session log file, a session directory, or a session id (or its start) looked up under "
                        "the DSH home (default: the newest user session there)")
    p.add_argument("--session", help=argparse.SUPPRESS)  # the older spelling of SESSION_ID
    p.add_argument("--dsh-home", help="DSH home for session ids (default: $DSH_HOME, else ~/.dsh)")
    p.add_argument("--list", action="store_true", help="list the sessions under the DSH home, newest first")
    p.add_argument("--all", action="store_true", help="with --list: also the subagent sessions (turn-memory's workers)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (schema turn-memory.inspect/1, docs/inspect-json.md; with --list "
                        "turn-memory.sessions/1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, even on a large log in a terminal")
    add_level_flags(p)
    p.set_defaults(func=run)
