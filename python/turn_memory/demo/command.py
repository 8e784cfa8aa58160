"""`turn-memory demo`: a real DSH session with turn-memory, start to finish, in a throwaway home.

Installs (once, cached) a real DSH host — the official 0.2.1-rc.2 runtime by default, or
0.1.0-rc.8 with `--host rc8` — installs turn-memory into a fresh profile with the real
installer, runs a short working chat with `/compact`, and shows what turn-memory did: each
turn before and after, its requests and cost, what the model now sees against the raw log.
The model is an embedded scripted one unless you ask for your own provider (`--model user`,
which uses DSH's default route and DEEPSEEK_API_KEY).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from turn_memory import resources
from turn_memory.cli_output import Output, add_level_flags, render
from turn_memory.config import TurnConfig
from turn_memory.demo import screen
from turn_memory.demo.requests import Costs, costs
from turn_memory.demo.script import READS_HISTORY, TASKS, TURN_OF_TASK, scripted_model
from turn_memory.demo.turn_view import turn_nodes
from turn_memory.devtools.dsh_home import DshHome
from turn_memory.devtools.fake_model import FakeModel
from turn_memory.devtools.runtime import HOSTS, WRAPPER_DIR, ensure_runtime, wrapper_path
from turn_memory.inspection.report import inspect_log, with_journal
from turn_memory.logs.reader import session_log_for
from turn_memory.turns.results import ResultStore

SCHEMA = "turn-memory.demo/1"
EPILOG = """\
exit status: 0 the session ran and the report is printed; 1 DSH failed or no checkpoint was
written (the error says where its log is); 2 bad usage, or --model user without
DEEPSEEK_API_KEY; 130 Ctrl-C (the throwaway home is removed)."""


def _history_read(fake: FakeModel) -> str | None:
    """What read_session_history returned to the agent, as the next model request carried it."""
    for request in reversed(fake.requests_of("turn")):
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "tool" and "replace_turn_nodes" not in request.tool_names:
            content = last.get("content")
            text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
            if "original nodes" in text:
                return text
    return None


def _du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _showcase(home: DshHome, events: list[dict[str, Any]], report: dict[str, Any]) -> screen.Showcase | None:
    """The first compressed turn: the raw log before its first marker, the surface after its landing."""
    turn = next((t for t in report["turns"] if t["state"] == "compressed"), None)
    if turn is None:
        return None
    first_marker = turn["markers"][0]["seq"]
    end = turn["shadowed_by"] if turn["shadowed_by"] is not None else len(events)
    width = screen.SHOWCASE_WIDTH
    return screen.Showcase(turn["turn"], turn_nodes(events, home.dialect, turn["turn"], first_marker, width),
                           turn_nodes(events, home.dialect, turn["turn"], end, width))


def path_setup(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The command that puts `turn-memory` on PATH (None: it is there): from a clone, the checkout
    installed as Python users install a tool (pipx, else pip into the Python on PATH); from an
    environment someone installed it into, that environment activated."""
    if which("turn-memory"):
        return None
    checkout = resources.editable_checkout()
    if checkout is not None:
        installer = ["pipx", "install"] if which("pipx") else ["python3", "-m", "pip", "install"]
        return render([*installer, str(checkout)])
    if os.name == "nt":
        return str(Path(sys.prefix) / "Scripts" / "activate")
    return render([".", str(Path(sys.prefix) / "bin" / "activate")])


#: the exit status of a run stopped with Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED = 130


def run_demo(args: argparse.Namespace) -> int:
    out = Output.from_args("demo", args)
    made: list[Path] = []  # the throwaway home once there is one (and whether it was there before)
    existed: list[bool] = []
    try:
        return _demo(args, out, made, existed)
    except KeyboardInterrupt:  # Ctrl-C: no traceback, and nothing left behind
        for root, was_there in zip(made, existed):
            shutil.rmtree(root, ignore_errors=True)
            if was_there:  # an empty folder the user named: left as it was given
                root.mkdir(exist_ok=True)
        where = f"; removed the throwaway home {made[0]}" if made else ""
        print(f"turn-memory demo: interrupted{where}", file=out.stderr, flush=True)
        return EXIT_INTERRUPTED


def _demo(args: argparse.Namespace, out: Output, made: list[Path], existed: list[bool]) -> int:
    use_user = args.model == "user"
    if use_user and not os.environ.get("DEEPSEEK_API_KEY"):
        return out.fail("--model user needs DEEPSEEK_API_KEY (DSH's default deepseek-official route)",
                        "export DEEPSEEK_API_KEY=…, or run the demo on the scripted model (drop --model user)", 2)
    runtime = ensure_runtime(host=args.host)
    wrapper = wrapper_path(runtime.root.parent / WRAPPER_DIR, runtime.version) if runtime.root else runtime.dsh
    root = Path(args.dsh_home).expanduser() if args.dsh_home else Path(tempfile.mkdtemp(prefix="turn-memory-demo-"))
    if args.dsh_home and root.exists() and any(root.iterdir()):
        return out.fail(f"{root} is not empty; the demo needs a throwaway DSH home",
                        render(["turn-memory", "demo", "--dsh-home", str(root) + "-2"]), 2)
    existed.append(bool(args.dsh_home) and root.exists())
    made.append(root)
    model = "your provider (DSH's default route)" if use_user else "a scripted model (no API key, no network)"
    out.say(f"turn-memory demo: a real DSH {runtime.version} session on {model}, in a throwaway DSH home")
    out.say(f"  home: {root}")
    fake = None if use_user else scripted_model().start()
    try:
        home = DshHome(root, runtime, None if fake is None else fake.base_url)
        home.create()
        installed = home.install_turn_memory("--verbose" if args.verbose else "--quiet")
        out.say(f"[1/3] installed turn-memory into profile '{home.profile}' with `turn-memory install` "
                + ("" if args.verbose else "(--verbose shows its report)"))
        for line in installed.stdout.splitlines():
            out.detail("      " + line)
        engine_log = root / "turn-memory" / "engine.log"
        turns = sum(1 for t in TASKS if not t.startswith("/"))
        out.say(f"[2/3] ran a {turns}-turn chat with /compact in one DSH session; after each turn a worker may rewrite "
                "it. The demo sets")
        out.say("      turns.policy=size: by default a session this short runs no worker, since a rewrite would not "
                "pay for itself")
        out.say("      in so few requests (README \"What it costs\"); and turns.landingBarrier, so each turn's first "
                "request waits")
        out.say("      for the previous turn's compression (by default nothing waits)")
        run = home.run(TASKS, timeout=args.timeout,
                       engine_overrides={"engine": {"logFile": str(engine_log)},
                                         "turns": {"landingBarrier": True, "policy": "size"}})
        for line in screen.answers_lines(run.records):
            out.detail(line)
        if run.returncode != 0:
            return out.fail(f"DSH exited with {run.returncode}: {run.stderr[-2000:].strip()}",
                            f"read {engine_log}" if engine_log.exists() else None)
        log_path = session_log_for(root / "sessions", run.session_id)
        report = with_journal(inspect_log(log_path), ResultStore(root).owed(run.session_id))  # as `inspect` reads it
        _, events = home.session_log(run.session_id)
        compact = next((r for r in run.records if r.get("command") == "/compact"), None)
        priced = costs(fake.requests, TURN_OF_TASK) if fake is not None else Costs()
        facts = screen.DemoFacts(
            report=report, asked={n: task for task, n in TURN_OF_TASK.items()},
            compact_at=TASKS.index("/compact"), compact_text=str(((compact or {}).get("result") or {}).get("text", "")),
            costs=priced, min_turn_tokens=TurnConfig().minTurnTokens,
            showcase=_showcase(home, events, report), read_back=_history_read(fake) if fake is not None else None,
            read_back_by=TURN_OF_TASK[READS_HISTORY])
        for line in screen.screen(facts, verbose=args.verbose):
            out.say(line)
        if not report["checkpoints"]:
            return out.fail(f"/compact wrote no checkpoint; see {engine_log}")
        out.say("")
        for line in screen.next_lines(inspect=render(["turn-memory", "inspect", "--dsh-home", str(root)]),
                                      engine_log=str(engine_log), on_path=path_setup(),
                                      own=render(["turn-memory", "install", "--profile", "headless", "--dsh",
                                                  str(wrapper)])):
            out.say(line)
        out.result(f"  the throwaway home takes {_du(root) / 1e6:.0f} MB; remove it with:  "
                   + (f'rmdir /s /q "{root}"' if os.name == "nt" else render(["rm", "-rf", str(root)])))
        if args.json:
            out.write(json.dumps({"schema": SCHEMA, "home": str(root), "session": run.session_id,
                                  "host": {"version": runtime.version, "dialect": home.dialect.name},
                                  "inspect": report, "requests": _costs_json(priced), "read_back": facts.read_back})
                      + "\n")
        return 0
    finally:
        if fake is not None:
            fake.stop()


def _costs_json(priced: Costs) -> dict[str, Any]:
    return {"total_usd": priced.total_usd, "requests": priced.requests,
            "by_turn": {str(k): {"agent_requests": c.agent_requests, "worker_requests": c.worker_requests,
                                 "usd": c.usd} for k, c in priced.by_turn.items()}}


def add_demo_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a real DSH session with turn-memory in a throwaway home",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["scripted", "user"], default="scripted",
                   help="scripted: embedded deterministic model (default); user: your DSH default provider")
    p.add_argument("--host", choices=HOSTS, default="v021",
                   help="which real DSH to run: v021 = the official 0.2.1-rc.2 runtime (default), rc8 = 0.1.0-rc.8")
    p.add_argument("--dsh-home", "--home", dest="dsh_home",
                   help="an empty directory to use as the DSH home (default: a new temporary one)")
    p.add_argument("--timeout", type=float, default=300, help="seconds the DSH session may take")
    p.add_argument("--json", action="store_true",
                   help=f"also print a machine-readable summary (schema {SCHEMA}; its `inspect` is inspect's report)")
    add_level_flags(p)
    p.set_defaults(func=run_demo)
