"""`turn-memory demo`: a real DSH session with turn-memory, start to finish, in a throwaway home.

Installs (once, cached) a real DSH host — the official 0.2.1-rc.2 runtime by default, or
0.1.0-rc.8 with `--host rc8` — installs turn-memory into a fresh profile with the real installer, runs a few turns and `/compact`, and shows what changed
in the context the model sees. The model is an embedded scripted one unless you ask for
your own provider (`--model user`, which uses DSH's default route and DEEPSEEK_API_KEY).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from turn_memory.devtools.dsh_home import DshHome
from turn_memory.devtools.fake_model import FakeModel
from turn_memory.devtools.runtime import HOSTS, ensure_runtime
from turn_memory.devtools.scripted_workers import worker_responder
from turn_memory.host.surface import SessionLog

TASKS = [
    "Create a file notes.md with three short facts about the zstd compression format.",
    "Add a fourth fact about zstd frames to notes.md, then show me the whole file.",
    "Which of these facts matters most for append-only log files, and why?",
    "Count the words in notes.md and tell me the number.",
    "Add a title line '# zstd notes' at the top of notes.md and show the first two lines.",
    "/compact",
    "Remind me: which file did we create, and how many facts does it hold now?",
]

FACTS = "# zstd\\n- Fast compression and very fast decompression.\\n- Tunable levels from 1 to 22.\\n- Optional dictionaries help with small inputs.\\n"


def scripted_model() -> FakeModel:
    fake = FakeModel(responder=worker_responder)  # it also plays turn-memory's workers
    fake.push("turn",
              {"text": "I'll write the notes file.", "tool_calls": [{"name": "bash", "arguments": {
                  "command": f"printf '{FACTS}' > notes.md && wc -l notes.md", "description": "write notes.md"}}]},
              "Created notes.md with three facts: speed, tunable levels, and dictionaries for small inputs.",
              {"text": "Appending the fourth fact and printing the file.", "tool_calls": [{"name": "bash", "arguments": {
                  "command": "printf -- '- Output is a sequence of independent frames.\\n' >> notes.md && cat notes.md",
                  "description": "append and show notes.md"}}]},
              "notes.md now holds four facts; the last one says zstd output is a sequence of independent frames.",
              "Independent frames matter most: an append-only log can add one frame per write and a reader "
              "can decode across frames without rewriting the file.",
              {"text": "Counting words.", "tool_calls": [{"name": "bash", "arguments": {
                  "command": "wc -w notes.md", "description": "count words"}}]},
              "notes.md contains the word count shown above (about 35 words).",
              {"text": "Adding the title.", "tool_calls": [{"name": "bash", "arguments": {
                  "command": "sed -i '1s/.*/# zstd notes/' notes.md && head -2 notes.md", "description": "title"}}]},
              "The first line is now '# zstd notes', followed by the first fact.",
              {"text": "Turn 1 was compressed and folded; reading its original back.",
               "tool_calls": [{"name": "read_session_history", "arguments": {"turn": 1}}]},
              "We created notes.md in the workspace (turn 1's original shows the exact printf command); "
              "it holds four facts about zstd.")
    return fake


def _history_read(fake: FakeModel) -> str | None:
    """What read_session_history returned to the agent, as the next model request carried it."""
    for request in reversed(fake.requests_of("turn")):
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "tool" and "replace_turn_nodes" not in request.tool_names:
            content = last.get("content")
            return content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
    return None


def _surface_tokens(log: SessionLog) -> tuple[int, int]:
    """The conversation's messages (0.2's system-prompt node is the host's, not history)."""
    nodes = [seq for seq in log.nodes if (m := log.message_of(seq)) is not None
             and m.get("role") in ("user", "assistant", "tool")]
    return log.tokens(nodes), len(nodes)


def _report(home: DshHome, session_id: str) -> dict[str, Any]:
    _, events = home.session_log(session_id)
    dialect = home.dialect
    checkpoint = next((e for e in events if e["type"] == "user/message" and dialect.is_checkpoint_source(e["data"].get("source"))), None)
    if checkpoint is None:
        return {"events": len(events)}
    raw = [e for e in events if e.get("surfaceOp") == "append" and e["type"] in ("user/message", "assistant/message", "tool/result")]
    final = SessionLog(dialect, events)
    raw_tokens = final.tokens(e["seq"] for e in raw)
    before = SessionLog(dialect, events[: checkpoint["seq"]])
    after = SessionLog(dialect, events[: checkpoint["seq"] + 2])  # + compaction/end
    return {
        "events": len(events),
        "before": _surface_tokens(before),
        "after": _surface_tokens(after),
        "checkpoint": checkpoint["data"]["content"][0]["text"],
        "checkpoint_seq": checkpoint["seq"],
        "shadowed": len(before.nodes) - len(after.nodes) + 1,
        "raw": (raw_tokens, len(raw)),
        "final": _surface_tokens(final),
    }


def run_demo(args: argparse.Namespace) -> int:
    use_user = args.model == "user"
    if use_user and not os.environ.get("DEEPSEEK_API_KEY"):
        print("turn-memory demo: --model user needs DEEPSEEK_API_KEY (DSH's default deepseek-official route)")
        return 2
    runtime = ensure_runtime(host=args.host)
    print(f"[1/4] DSH {runtime.version} ({'official runtime from PyPI' if runtime.host == 'v021' else 'npm'}; "
          "downloaded once, then cached)")
    root = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="turn-memory-demo-"))
    if root.exists() and any(root.iterdir()) and not args.home:
        shutil.rmtree(root)
    fake = None if use_user else scripted_model().start()
    try:
        home = DshHome(root, runtime, None if fake is None else fake.base_url)
        print(f"[2/4] throwaway DSH home {root}; installing turn-memory into profile '{home.profile}'")
        home.create()
        # the scripted turns are a few hundred tokens, below turns.minTurnTokens: compress them anyway
        installed = home.install_turn_memory(*(() if use_user else ("--set", "turns.minTurnTokens=0")))
        for line in installed.stdout.splitlines():
            if line.strip():
                print("      " + line)
        model = "your provider (DSH default route)" if use_user else "the embedded scripted model"
        print(f"[3/4] running a real DSH session on {model}: 5 turns, /compact, 1 more turn;")
        print("      after each turn a forked worker rewrites it; the demo turns the landing barrier on, so each")
        print("      turn's first request waits for the previous turn (by default nothing waits: it lands once ready)")
        run = home.run(TASKS, timeout=args.timeout,
                       engine_overrides={"engine": {"logFile": str(root / "turn-memory-engine.log")},
                                         "turns": {"landingBarrier": True}})
        for record in run.records:
            if "task" in record:
                print(f"      > {record['task']}\n        {record['text'][:300]}")
            elif "command" in record:
                print(f"      > {record['command']}\n        {record['result'].get('text')}")
        if run.returncode != 0:
            print(f"DSH exited with {run.returncode}\n{run.stderr[-3000:]}")
            return 1
        print("[4/4] what turn-memory did")
        engine_log = root / "turn-memory-engine.log"
        for line in engine_log.read_text().splitlines() if engine_log.exists() else []:
            if ": landed (" in line or "no-op marker" in line:
                print("      " + line.split(" turn ", 1)[-1].join(["turn ", ""]))
        report = _report(home, run.session_id)
        if "checkpoint" not in report:
            print("      no checkpoint was written (see the engine log)")
            return 1
        (tb, nb), (ta, na) = report["before"], report["after"]
        print(f"      context before /compact: ~{tb} tokens in {nb} messages")
        print(f"      context after  /compact: ~{ta} tokens in {na} messages "
              f"({100 * (tb - ta) // max(tb, 1)}% smaller; {report['shadowed']} messages folded into one checkpoint)")
        (tr, nr), (tf, nf) = report["raw"], report["final"]
        print(f"      whole session: the raw history is ~{tr} tokens in {nr} messages (all still in the log); "
              f"the model now sees ~{tf} tokens in {nf} ({100 * (tr - tf) // max(tr, 1)}% smaller)")
        print("      the checkpoint the model now sees first:")
        for line in report["checkpoint"].splitlines():
            print("        | " + line)
        read_back = _history_read(fake) if fake is not None else None
        if read_back:
            print("      and nothing was lost: the model read turn 1 back with read_session_history:")
            for line in read_back.splitlines()[:14]:
                print("        | " + line[:110])
        print(f"      session log (nothing deleted, {report['events']} events): {home.root / 'sessions'}")
        print(f"      host: DSH {runtime.version} ({home.dialect.name} dialect)")
        print(f"      engine log: {root / 'turn-memory-engine.log'}; per-turn view: turn-memory inspect --dsh-home {root}")
        if args.json:
            print(json.dumps({"session": run.session_id, **report}))
        return 0
    finally:
        if fake is not None:
            fake.stop()


def add_demo_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a real DSH session with turn-memory in a throwaway home",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["scripted", "user"], default="scripted",
                   help="scripted: embedded deterministic model (default); user: your DSH default provider")
    p.add_argument("--host", choices=HOSTS, default="v021",
                   help="which real DSH to run: v021 = the official 0.2.1-rc.2 runtime (default), rc8 = 0.1.0-rc.8")
    p.add_argument("--home", help="use this directory as the DSH home instead of a temporary one")
    p.add_argument("--timeout", type=float, default=300, help="seconds the DSH session may take")
    p.add_argument("--json", action="store_true", help="also print a machine-readable summary")
    p.set_defaults(func=run_demo)
