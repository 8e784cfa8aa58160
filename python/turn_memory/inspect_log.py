"""`turn-memory inspect`: what turn-memory did to a session, read from DSH's log on disk.

For each completed turn: raw size vs what the model sees now, and its marker state
(pending / landed / shadowed by a checkpoint); then the session checkpoints and the
totals. Read-only: it never writes to a log.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from turn_memory.host.dialect import RC8, V02, Dialect
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import estimate_message
from turn_memory.host.turns import node_origins
from turn_memory.logs.reader import find_session_logs, read_session_header, read_session_log, session_log_for
from turn_memory.turns.recovery import scan_marks

SURFACE_TYPES = ("user/message", "assistant/message", "tool/result")


def _dialect(path: Path) -> Dialect:
    return V02 if path.name.startswith("session.v4") else RC8


def summarize_log(path: Path) -> dict[str, Any]:
    _, events = read_session_log(path)
    log = SessionLog(_dialect(path), events)
    origins = node_origins(events, log.dialect)
    marks = scan_marks(events)
    current = set(log.nodes)

    def tokens(seqs: list[int]) -> int:
        return sum(estimate_message(m) for s in seqs if (m := log.message_of(s)) is not None)

    turns = []
    for turn in sorted(marks.completed):
        raw = [e["seq"] for e in events if e.get("surfaceOp") == "append" and e["type"] in SURFACE_TYPES
               and origins.get(e["seq"]) == ("turn", turn)]
        now = [s for s in log.nodes if origins.get(s) == ("turn", turn)]
        state = ("landed" if turn in marks.landed else "pending" if turn in marks.pending else "untouched")
        if not now and raw:
            state += ", shadowed by a checkpoint"
        turns.append({"turn": turn, "state": state, "raw_nodes": len(raw), "raw_tokens": tokens(raw),
                      "nodes": len(now), "tokens": tokens(now)})
    checkpoints = [
        {"seq": e["seq"], "current": e["seq"] in current, "shadowed": len(e.get("sourceEventSeqs", [])) - 2}
        for e in events if e["type"] == "user/message" and log.dialect.is_checkpoint_source(e["data"].get("source"))
    ]
    raw_all = [e["seq"] for e in events if e.get("surfaceOp") == "append" and e["type"] in SURFACE_TYPES]
    return {"log": str(path), "events": len(events), "turns": turns, "checkpoints": checkpoints,
            "raw": {"nodes": len(raw_all), "tokens": tokens(raw_all)},
            "surface": {"nodes": len(log.nodes), "tokens": tokens(list(log.nodes))},
            "reload_problems": log.reload_problems}


def _print(summary: dict[str, Any]) -> None:
    print(f"{summary['log']}  ({summary['events']} events)")
    for t in summary["turns"]:
        print(f"  turn {t['turn']:>4}: {t['raw_nodes']:>3} nodes ~{t['raw_tokens']:>6} tokens raw -> "
              f"{t['nodes']:>3} nodes ~{t['tokens']:>6} tokens now  [{t['state']}]")
    for c in summary["checkpoints"]:
        print(f"  checkpoint at seq {c['seq']}: folds {c['shadowed']} nodes{'' if c['current'] else ' (itself folded later)'}")
    raw, now = summary["raw"], summary["surface"]
    saved = 100 * (raw["tokens"] - now["tokens"]) // max(raw["tokens"], 1)
    print(f"  raw history ~{raw['tokens']} tokens in {raw['nodes']} messages; the model sees ~{now['tokens']} "
          f"tokens in {now['nodes']} ({saved}% smaller); nothing was deleted")
    for problem in summary["reload_problems"]:
        print(f"  WOULD NOT RELOAD: {problem}")


def newest_user_session(home: Path) -> list[Path]:
    """The most recent session that is not a subagent's (workers write sessions too)."""
    for path in reversed(find_session_logs(home)):
        if read_session_header(path).get("origin") != "subagent":
            return [path]
    return []


def run(args: argparse.Namespace) -> int:
    home = Path(args.dsh_home or os.environ.get("DSH_HOME") or Path.home() / ".dsh")
    if args.session:
        paths = [session_log_for(home / "sessions", args.session)]
    else:
        paths = [Path(p) for p in args.logs] or newest_user_session(home)
    if not paths:
        print("turn-memory inspect: no session log found")
        return 1
    for path in paths:
        summary = summarize_log(path)
        print(json.dumps(summary)) if args.json else _print(summary)
    return 0


def add_inspect_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show what turn-memory did to a session (read-only)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="*", help="session log files (default: the newest user session under the DSH home)")
    p.add_argument("--session", help="a session id to find under the DSH home")
    p.add_argument("--dsh-home", help="DSH home (default: $DSH_HOME, else ~/.dsh)")
    p.add_argument("--json", action="store_true", help="print one JSON object per log")
    p.set_defaults(func=run)
