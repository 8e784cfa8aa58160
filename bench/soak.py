"""Soak benchmark (issue 30, Deliver 3): several hundred turns of one session on each real DSH
host, with turn-memory installed by the real installer and faults injected along the way.

    .venv/bin/python bench/soak.py                      # 300 turns on rc8 and v021 (~3 and ~8 min on 2 cores)
    .venv/bin/python bench/soak.py --turns 200 --hosts v021
    .venv/bin/python bench/soak.py --save soak.json     # keep every number (and --from soak.json to reprint)
    .venv/bin/python bench/soak.py --keep               # keep the DSH homes, session logs and engine logs
    .venv/bin/python bench/soak.py --stock --engine-timing   # + stock DSH's step timings; the engine's share

One session runs across three DSH processes (`--turns N`; the fault turns scale with N):

1. turns 1..0.2N: the engine is SIGKILLed while a worker waits for the model (0.07N); a worker
   request gets HTTP 503 twice (0.13N); DSH is SIGKILLed right after turn 0.2N ends;
2. resumed: turns ..0.4N: the agent's first request of turn 0.3N overflows the context window
   (turn-memory compacts on overflow and DSH replays it); DSH exits normally;
3. resumed: turns ..N: a worker hangs (0.6N: its request is answered after 40 s, the worker
   is bounded by `turns.workerTimeoutS` = 15 s); the sidecar directory is a full tmpfs for turns
   0.7N..0.75N (ENOSPC on every sidecar write); an agent request gets HTTP 503 (0.85N); then
   three short closing turns let the last turns land.

The turns (`plan`): seeded, 88% tool turns of 1-3 `sed -n` reads / `grep -rn` searches over a
generated source tree, each result 1-3 K tokens (the coding shape of bench/session_scenarios.py,
narrowed to the reads and greps of issue 30), then a 60-200 token answer; 12% chat turns (a
150-500 token answer). The model answers instantly (`--ttfb-ms` to slow it); the workers are
python/turn_memory/devtools/scripted_workers.py (fold a turn to its request and last answer; on 0.2 each
tool result to its first words). turn-memory runs with its installed defaults, except
`turns.workerTimeoutS` (15 s, so the hung worker resolves within the bench).

What is printed, per host:
- turns completed / asked: every driver task (the closing turns included) ended `completed`;
- landings lost / doubled: a turn 1..N with no `compression` marker in the log at the end (and
  not taken by a session checkpoint) / with two or more (tests/e2e/faults_lib.py's rule);
- work redone: turns whose workers finished (`finish_turn_compression`) more than once, and
  turns whose workers started more than once;
- engine RSS: VmRSS of the live `turn-memory serve` process (its pid file; a new pid after each
  kill or DSH restart), sampled every 0.5 s; start = at the end of turn 5, middle = at the end
  of turn N/2, end = at the end of turn N; the engine generation (1 = first process) is printed
  beside each; growth is middle -> end (the same process by construction: no restart after 0.4N);
- worst step stall by turn-memory: the longest pre-step held by the hooks (the driver times the
  whole pre-step chain) and the longest gap between two agent requests of a turn beyond the
  model's own answer (request to request, minus the scripted reply's delay; it also holds
  DSH's own step and the tool run); the overflow turn's replay is reported on its own;
- worker requests per compressed turn (turn workers; segment workers of the overflow compaction
  apart), and the log size (session log on disk, its events, the engine log).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(CHECKOUT / "python"), str(CHECKOUT / "tests" / "e2e")]

from faults_lib import is_segment_worker, is_worker  # noqa: E402
from turn_memory.devtools.dsh_home import DshHome  # noqa: E402
from turn_memory.devtools.fake_model import FakeModel, FakeRequest, is_runtime_context  # noqa: E402
from turn_memory.devtools.runtime import HOSTS, ensure_runtime  # noqa: E402
from turn_memory.devtools.scripted_workers import worker_responder  # noqa: E402
from turn_memory.host.markers import marker_of  # noqa: E402
from turn_memory.host.surface import SessionLog  # noqa: E402
from turn_memory.logs.reader import session_log_for  # noqa: E402
from turn_memory.turns.recovery import turn_nodes  # noqa: E402

CHARS_PER_TOKEN = 4
WORKER_TOOLS = ("replace_turn_nodes", "replace_session_memory")
_TURNS_OF = re.compile(r"memory editor for turns? (\d+)")
_BATCH = re.compile(r"^- t(\d+)\.n1 ", re.M)
_TASK = re.compile(r"^Task (\d+):")
#: a worker on a part of a split turn (prompts/turn-compression.md)
_PART = re.compile(r"Yours\s+is part (\d+) of \d+")


# --------------------------------------------------------------------------- the session

@dataclass(frozen=True)
class Call:
    kind: str  # "read" | "grep"
    command: str
    tokens: int


@dataclass(frozen=True)
class Turn:
    k: int
    calls: tuple[Call, ...]
    answer_tokens: int

    @property
    def chat(self) -> bool:
        return not self.calls


MODULES = 24
LINE = "    value_{i:04d} = parse_field(buffer, offset + {i}, kind='{kind}')  # {word}\n"
WORDS = ("lexer", "token", "offset", "buffer", "empty", "header", "record", "stream", "cursor", "frame")


def write_sources(workspace: Path) -> None:
    """A generated source tree the reads and greps run over: 24 modules of 600 lines (~44 chars each)."""
    src = workspace / "src"
    src.mkdir(parents=True, exist_ok=True)
    for m in range(MODULES):
        lines = [f"# module {m}: the parser's part {m}\n", f"def parse_part_{m}(buffer, offset):\n"]
        lines += [LINE.format(i=i, kind=WORDS[(i + m) % 10], word=WORDS[(i * 7 + m) % 10]) for i in range(600)]
        (src / f"mod{m:02d}.py").write_text("".join(lines))


def plan(n: int, seed: int = 30) -> list[Turn]:
    rng = random.Random(f"soak:{seed}")
    out = []
    for k in range(1, n + 1):
        if rng.random() < 0.12:
            out.append(Turn(k, (), rng.randint(150, 500)))
            continue
        calls = []
        for _ in range(rng.randint(1, 3)):
            tokens = rng.randint(1000, 3000)
            lines = max(20, tokens * CHARS_PER_TOKEN // 78)  # a listed line: "NNN\t" + ~74 chars
            module = rng.randrange(MODULES)
            if rng.random() < 0.6:
                first = rng.randint(1, 600 - lines) if lines < 600 else 1
                calls.append(Call("read", f"sed -n '{first},{first + lines - 1}p' src/mod{module:02d}.py | cat -n",
                                  tokens))
            else:
                word = rng.choice(WORDS)
                calls.append(Call("grep", f"grep -rn \"kind='{word}'\" src | head -n {lines}", tokens))
        out.append(Turn(k, tuple(calls), rng.randint(60, 200)))
    return out


def filler(tag: str, tokens: int, words: str) -> str:
    size, out, n = tokens * CHARS_PER_TOKEN, [tag], 0
    while sum(map(len, out)) < size:
        n += 1
        out.append(f" {words} ({n})")
    return "".join(out)[:size]


def task_text(turn: Turn) -> str:
    if turn.chat:
        return f"Task {turn.k}: explain how the parser treats empty input in case {turn.k}, and why."
    return f"Task {turn.k}: check how part {turn.k} of the parser handles empty input; read what you need."


def agent_replies(turn: Turn) -> list[Any]:
    if turn.chat:
        return [filler(f"A{turn.k}: ", turn.answer_tokens, f"case {turn.k}: parse() returns [] because the lexer ends")]
    steps: list[Any] = [{"text": f"Step {j}: {'reading' if c.kind == 'read' else 'searching'} for part {turn.k}.",
                         "tool_calls": [{"name": "bash", "arguments": {"command": c.command,
                                                                       "description": f"{c.kind} {turn.k}.{j}"}}]}
                        for j, c in enumerate(turn.calls, start=1)]
    steps.append(filler(f"Part {turn.k} done: parse() returns [] on empty input; ", turn.answer_tokens,
                        "the listing shows every case handled"))
    return steps


# --------------------------------------------------------------------------- the model

class SoakModel(FakeModel):
    """The scripted model, keeping only what the accounting reads of each request (a long session's
    bodies would hold gigabytes): its tool names, worker task, last message and the reply."""

    def _dispatch(self, path: str, headers: Any, body: dict[str, Any],
                  protocol: str = "openai") -> tuple[FakeRequest, dict[str, Any]]:
        req, reply = super()._dispatch(path, headers, body, protocol)
        reply = dict(reply)
        reply.setdefault("prompt_tokens", max(1, len(json.dumps(req.messages)) // 4))
        messages = req.messages
        task = next((m for m in reversed(messages) if m.get("role") == "user" and _TURNS_OF.search(_text(m))), None)
        # from the last message that is not host scaffolding on: what last_role and last_user_text read
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") != "system" and not (
            messages[i].get("role") == "user" and is_runtime_context(_text(messages[i])))), len(messages))
        head = [{"role": "user", "content": req.last_user_text}, *([task] if task is not None else [])]
        req.view = {"messages": [*head, *messages[last:]],
                    "tools": [{"type": "function", "function": {"name": n}} for n in req.tool_names]}
        req.body = {"model": body.get("model", "fake-model"), "bytes": len(json.dumps(body))}
        return req, reply


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def worker_turns(req: FakeRequest) -> list[int]:
    text = req.all_text()
    batch = sorted({int(t) for t in _BATCH.findall(text)})
    found = _TURNS_OF.search(text)
    return batch or ([int(found.group(1))] if found else [])


def agent_turn(req: FakeRequest) -> int | None:
    found = _TASK.match(req.last_user_text)
    return int(found.group(1)) if found else None


# --------------------------------------------------------------------------- faults

@dataclass
class Schedule:
    n: int
    phase1: int
    phase2: int
    engine_kill: int
    worker_5xx: int
    overflow: int
    hang: int
    disk_from: int
    disk_to: int
    agent_5xx: int
    closing: int = 3

    @classmethod
    def of(cls, n: int) -> "Schedule":
        at = lambda share: max(2, round(n * share))  # noqa: E731
        return cls(n, at(0.2), at(0.4), at(0.07), at(0.13), at(0.3), at(0.6), at(0.7), at(0.75), at(0.85))


@dataclass
class Faults:
    """Which fault fired when (wall clock), filled in by the responder."""
    fired: dict[str, float] = field(default_factory=dict)
    hung: list[int] = field(default_factory=list)
    disk_full: bool = False


class Soak:
    def __init__(self, home: DshHome, fake: SoakModel, tmp: Path, sched: Schedule, turns: list[Turn],
                 engine_timing: bool = False, stock: bool = False) -> None:
        self.home, self.fake, self.tmp, self.sched, self.turns = home, fake, tmp, sched, turns
        self.engine_timing, self.stock = engine_timing, stock
        self.faults = Faults()
        self.pid_file = tmp / "engine.pid"
        self.engine_log = tmp / "engine.log"
        self.results_dir = home.root / "turn-memory" / "results"
        self.rss: list[tuple[float, int, int]] = []  # (time, pid, kB)
        self._stop = threading.Event()
        self.lock = threading.Lock()

    # -- the responder: faults first, then the scripted workers; agent turns come from rules
    def respond(self, req: FakeRequest) -> dict[str, Any] | None:
        s, f = self.sched, self.faults
        if req.kind != "turn":
            return None
        if is_worker(req) or is_segment_worker(req):
            turns = worker_turns(req) if is_worker(req) else []
            first = turns[0] if turns else 0
            if is_worker(req) and first >= s.engine_kill and "engine_kill" not in f.fired:
                f.fired["engine_kill"] = time.time()
                threading.Timer(0.2, self.kill_engine).start()
                return {"text": "the answer never arrives", "delay_ms": 6000}
            if is_worker(req) and first >= s.worker_5xx and f.fired.get("worker_5xx_n", 0) < 2:
                f.fired["worker_5xx_n"] = f.fired.get("worker_5xx_n", 0) + 1
                f.fired.setdefault("worker_5xx", time.time())
                return {"status": 503, "error": {"message": "overloaded", "type": "server_error"}}
            if is_worker(req) and first >= s.hang and "hang" not in f.fired:
                f.fired["hang"] = time.time()
                f.hung = turns
                return {"text": "a worker that hangs", "delay_ms": 40000}
            return worker_responder(req)
        k = agent_turn(req)
        if k is None:
            return None
        if k == s.overflow and "overflow" not in f.fired and req.last_role == "user":
            f.fired["overflow"] = time.time()
            return {"context_overflow": True}
        if k == s.agent_5xx and "agent_5xx" not in f.fired and req.last_role == "user":
            f.fired["agent_5xx"] = time.time()
            return {"status": 503, "error": {"message": "overloaded", "type": "server_error"}}
        if k == s.disk_from and not f.disk_full and "disk_full" not in f.fired:
            f.fired["disk_full"] = time.time()
            self.fill_disk()
        if k == s.disk_to and f.disk_full:
            f.fired["disk_freed"] = time.time()
            self.free_disk()
        return None

    def kill_engine(self) -> None:
        try:
            os.kill(int(self.pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass

    # -- the full disk: a tiny tmpfs, filled, mounted over the sidecar directory
    def fill_disk(self) -> None:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k,nr_inodes=2", "tmpfs", str(self.results_dir)],
                       check=True)
        try:
            (self.results_dir / "fill").write_bytes(b"x" * 8192)
        except OSError:
            pass  # full: what we want
        self.faults.disk_full = True

    def free_disk(self) -> None:
        if self.faults.disk_full:
            subprocess.run(["umount", "-l", str(self.results_dir)], check=False)
            self.faults.disk_full = False

    # -- engine RSS
    def sample(self) -> None:
        while not self._stop.wait(0.5):
            try:
                pid = int(self.pid_file.read_text())
                status = Path(f"/proc/{pid}/status").read_text()
            except (OSError, ValueError):
                continue
            found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
            if found:
                with self.lock:
                    self.rss.append((time.time(), pid, int(found.group(1))))

    # -- the runs
    def script(self) -> None:
        for turn in self.turns:
            self.fake.add_rule({"last_user_contains": f"Task {turn.k}:", "tools_exclude": list(WORKER_TOOLS)},
                               replies=agent_replies(turn), name=f"agent{turn.k}")
        for c in range(1, self.sched.closing + 1):
            self.fake.add_rule({"last_user_contains": f"Closing {c}:", "tools_exclude": list(WORKER_TOOLS)},
                               reply=f"Closing {c} noted.", name=f"closing{c}")
        self.fake.responder = self.respond

    def run(self, progress: bool = True) -> list[Any]:
        s = self.sched
        self.script()
        sampler = threading.Thread(target=self.sample, daemon=True)
        sampler.start()
        engine: dict[str, Any] = {"logFile": str(self.engine_log), "restartDelayMs": 1000}
        if self.engine_timing:
            engine["command"] = [sys.executable, str(CHECKOUT / "bench" / "soak_engine.py"), "serve"]
        overrides = None if self.stock else {"engine": engine, "turns": {"workerTimeoutS": 15}}
        tasks = {t.k: task_text(t) for t in self.turns}
        closing: list[Any] = []
        for c in range(1, s.closing + 1):
            closing += [{"sleepMs": 2000}, f"Closing {c}: noted?"]
        phases: list[tuple[list[int], list[Any]]] = [
            (list(range(1, s.phase1 + 1)), [{"sleepMs": 300}, {"killSelf": True}]),
            (list(range(s.phase1 + 1, s.phase2 + 1)), [{"sleepMs": 1000}]),
            (list(range(s.phase2 + 1, s.n + 1)), closing),
        ]
        runs = []
        sid: str | None = None
        try:
            for i, (ks, tail) in enumerate(phases):
                head = [{"waitFile": str(self.engine_log), "contains": "shim connected", "timeoutMs": 30000}] \
                    if i == 0 and not self.stock else [{"sleepMs": 1500}]
                started = time.monotonic()
                run = self.home.run([*head, *(tasks[k] for k in ks), *tail], resume=sid, timeout=3600,
                                    engine_overrides=overrides)
                runs.append(run)
                sid = sid or run.session_id
                done = sum(1 for r in run.records if "task" in r)
                if progress:
                    print(f"  [{self.home.host}] process {i + 1}: turns {ks[0]}..{ks[-1]} ({done} tasks) in "
                          f"{time.monotonic() - started:.0f}s, exit {run.returncode}{' (killed itself)' if run.killed else ''}",
                          file=sys.stderr, flush=True)
                if run.returncode != 0 and not run.killed:
                    print(run.stderr[-3000:], file=sys.stderr)
                    break
        finally:
            self.free_disk()
            self._stop.set()
            sampler.join()
        return runs


# --------------------------------------------------------------------------- accounting

def _median(values: Any) -> float | None:
    got = list(values)
    return statistics.median(got) if got else None


def nearest_rss(rss: list[tuple[float, int, int]], at: float | None) -> tuple[int, int] | None:
    """(pid, kB) of the first sample at or after `at` (the last one before it if none)."""
    if at is None or not rss:
        return None
    after = [r for r in rss if r[0] >= at]
    pick = after[0] if after else rss[-1]
    return pick[1], pick[2]


def account(soak: Soak, runs: list[Any], seconds: float) -> dict[str, Any]:
    home, s = soak.home, soak.sched
    sid = runs[0].session_id
    _, events = home.session_log(sid)
    log_path = session_log_for(home.root / "sessions", sid)
    ended = sorted({e["data"]["turn"] for e in events if e["type"] == "turn/end"})
    # landings per turn: a landing's head marker names its workers; the other user nodes a rewrite
    # wrote (a part of a split turn may open with one) carry the bare marker
    counts: dict[int, int] = {}
    marked: set[int] = set()
    for e in events:
        mark = marker_of(e)
        if mark and mark[0] == "compression":
            marked.add(mark[1])
            if "workers" in (e["data"].get("source") or {}):
                counts[mark[1]] = counts.get(mark[1], 0) + 1
    for t in marked:
        counts.setdefault(t, 1)
    surface = SessionLog(home.dialect, events)
    reload = SessionLog(home.dialect)
    problems = [f"seq {e['seq']}: {p}" for e in events if (p := reload.append(e))]
    # DSH's log turn numbers: the session's turns in order; the driver's tasks 1..N are log turns 1..N
    # (every task is one user turn), the closing turns after them
    must = [t for t in ended if t <= s.n]
    # settled without a landing: a session checkpoint took the turn, or its request (an overflow's
    # compaction folds the open turn's request too): what is left of it does not open with a user
    # node, and the engine skips it as such
    folded = [t for t in must if counts.get(t, 0) == 0 and (
        not (nodes := turn_nodes(surface, t)) or (surface.message_of(nodes[0]) or {}).get("role") != "user")]
    lost = [t for t in must if counts.get(t, 0) == 0 and t not in folded]
    doubled = [t for t, c in counts.items() if c > 1]
    records = [r for run in runs for r in run.records]
    tasks = [r for r in records if "task" in r]
    completed = sum(1 for r in tasks if (r.get("reason") or {}).get("kind") == "completed")
    asked = s.n + s.closing
    requests = soak.fake.requests
    workers = [r for r in requests if r.kind == "turn" and is_worker(r)]
    segments = [r for r in requests if r.kind == "turn" and is_segment_worker(r)]
    agent = [r for r in requests if r.kind == "turn" and not is_worker(r) and not is_segment_worker(r)]
    # per (turn, part of a split turn): the workers that started, and those that finished
    finished: dict[tuple[int, int], int] = {}
    started: dict[tuple[int, int], int] = {}
    for r in workers:
        part = int(found.group(1)) if (found := _PART.search(r.all_text())) else 1
        keys = [(t, part) for t in worker_turns(r)]
        if r.last_role == "user":  # a worker's first request ends with its task
            for key in keys:
                started[key] = started.get(key, 0) + 1
        if any(c.get("name") == "finish_turn_compression" for c in (r.reply or {}).get("tool_calls") or []):
            for key in keys:
                finished[key] = finished.get(key, 0) + 1
    redone = sorted({t for (t, _), n in finished.items() if n > 1})
    restarted = sorted({t for (t, _), n in started.items() if n > 1})
    # turn -> the time it ended (the driver's record)
    end_at: dict[int, float] = {}
    for r in tasks:
        if k := _TASK.match(r["task"]):
            end_at[int(k.group(1))] = r["t"] / 1000
    rss = soak.rss
    pids = list(dict.fromkeys(p for _, p, _ in rss))
    gen = {p: i + 1 for i, p in enumerate(pids)}
    points = {name: nearest_rss(rss, end_at.get(k)) for name, k in
              (("start", min(5, s.n)), ("middle", s.n // 2), ("end", s.n))}
    mid, end = points["middle"], points["end"]
    growth = (end[1] - mid[1]) / mid[1] if mid and end else None
    # stalls: pre-step holds, and agent request gaps within one turn beyond the model's answer
    pre = [dict(p, run=i) for i, run in enumerate(runs) for p in run.pre_steps()]
    worst_pre = max(pre, key=lambda p: p["ms"], default=None)
    gaps: list[tuple[float, int]] = []
    overflow_gap = None
    by_turn: dict[int, list[FakeRequest]] = {}
    for r in agent:
        if (k2 := agent_turn(r)) is not None:
            by_turn.setdefault(k2, []).append(r)
    for k2, reqs in by_turn.items():
        for a, b in zip(reqs, reqs[1:]):
            gap = b.time - a.time - ((a.reply or {}).get("delay_ms") or 0) / 1000
            if k2 == s.overflow and (a.reply or {}).get("context_overflow"):
                continue
            gaps.append((gap, k2))
    # the overflow's replay: from the refused request to the agent's next one (on rc8 the replay's last
    # user message is the checkpoint, which took the turn's request)
    refused = next((i for i, r in enumerate(agent) if (r.reply or {}).get("context_overflow")), None)
    if refused is not None and refused + 1 < len(agent):
        overflow_gap = agent[refused + 1].time - agent[refused].time
    worst_gap = max(gaps, default=(0.0, 0))
    engine_log = soak.engine_log.read_text(errors="replace") if soak.engine_log.exists() else ""
    # --engine-timing: the engine's own share of each hook (bench/soak_engine.py)
    inside: dict[tuple[str, int, int], int] = {}
    for found in re.finditer(r"soak-timing (pre-step|request) turn (\d+) step (\d+): (\d+) ms", engine_log):
        hook = (found.group(1), int(found.group(2)), int(found.group(3)))
        inside[hook] = max(inside.get(hook, 0), int(found.group(4)))
    engine_pre = max(((ms, t, st) for (kind, t, st), ms in inside.items() if kind == "pre-step"), default=None)
    engine_req = max(((ms, t, st) for (kind, t, st), ms in inside.items() if kind == "request"), default=None)
    rest = [(p["ms"] - inside.get(("pre-step", p["turn"], p["step"]), 0), p["turn"], p["step"]) for p in pre] \
        if inside else []
    landed = sorted(t for t, c in counts.items() if c)
    return {
        "host": home.host, "version": home.runtime.version, "turns": s.n, "schedule": s.__dict__,
        "seconds": round(seconds, 1), "processes": len(runs),
        "turns_asked": asked, "turns_completed": completed,
        "not_completed": [(r["task"][:40], (r.get("reason") or {}).get("kind")) for r in tasks
                          if (r.get("reason") or {}).get("kind") != "completed"][:10],
        "logs_reloaded": not problems, "reload_problems": problems[:5],
        "landed": len(landed), "must_land": len(must), "folded": folded, "lost": lost, "doubled": doubled,
        "redone": redone, "restarted": restarted,
        "rss": {k: (None if v is None else {"pid": v[0], "generation": gen[v[0]], "kB": v[1]}) for k, v in points.items()},
        "rss_growth": growth, "rss_peak_kB": max((kb for _, _, kb in rss), default=None), "engines": len(pids),
        "worst_prestep": worst_pre, "prestep_count": len(pre),
        "prestep_median_ms": {"step 1": _median(p["ms"] for p in pre if p["step"] == 1),
                              "later steps": _median(p["ms"] for p in pre if p["step"] > 1)},
        "engine_timing": bool(inside), "worst_engine_prestep": engine_pre, "worst_engine_request": engine_req,
        "engine_prestep_over_1s": sum(1 for (kind, _, _), ms in inside.items() if kind == "pre-step" and ms > 1000),
        "worst_prestep_outside_engine": max(rest, default=None),
        "prestep_over_1s": [p for p in pre if p["ms"] > 1000],
        "worst_gap_s": round(worst_gap[0], 3), "worst_gap_turn": worst_gap[1],
        "median_gap_s": round(statistics.median(g for g, _ in gaps), 3) if gaps else None,
        "gaps_over_1s": sorted([(round(g, 2), k3) for g, k3 in gaps if g > 1], reverse=True)[:10],
        "overflow_replay_s": None if overflow_gap is None else round(overflow_gap, 2),
        "agent_requests": len(agent), "worker_requests": len(workers), "segment_requests": len(segments),
        "worker_requests_per_compressed_turn": round(len(workers) / len(landed), 2) if landed else None,
        "log_bytes": log_path.stat().st_size if log_path.exists() else None, "log_file": log_path.name,
        "log_events": len(events), "engine_log_bytes": len(engine_log.encode()),
        "engine_log_warnings": sum(1 for line in engine_log.splitlines() if " WARNING " in line),
        "engine_log_errors": [line[:300] for line in engine_log.splitlines()
                              if " ERROR " in line or " CRITICAL " in line or "Traceback" in line][:10],
        "faults_fired": sorted(k for k in soak.faults.fired if not k.endswith("_n")),
        "hung_turns": soak.faults.hung,
        "engine_starts": engine_log.count("shim connected"),
    }


# --------------------------------------------------------------------------- report

def kb(v: dict[str, Any] | None) -> str:
    return "n/a" if v is None else f"{v['kB'] / 1024:.0f} MiB (engine {v['generation']})"


def table(row: dict[str, Any]) -> str:
    pre = row["worst_prestep"]
    growth = row["rss_growth"]
    lines = [
        ("turns completed / asked", f"{row['turns_completed']}/{row['turns_asked']} in {row['processes']} DSH processes, "
                                    f"{row['seconds']:.0f} s"),
        ("faults fired", ", ".join(row["faults_fired"]) + f"; engine started {row['engine_starts']}×"),
        ("landings lost / doubled", f"{len(row['lost'])}/{len(row['doubled'])} (landed {row['landed']} of "
                                    f"{row['must_land']}; taken by a checkpoint: {row['folded'] or 'none'})"),
        ("work redone", f"finished twice: {len(row['redone'])} turn(s) {row['redone'] or ''}; workers "
                        f"started again: {len(row['restarted'])} turn(s) {row['restarted'][:12] or ''}"),
        ("engine RSS start / middle / end", f"{kb(row['rss']['start'])} / {kb(row['rss']['middle'])} / "
                                            f"{kb(row['rss']['end'])}; peak {(row['rss_peak_kB'] or 0) / 1024:.0f} MiB"),
        ("engine RSS growth middle -> end", "n/a" if growth is None else f"{growth:+.1%}"),
        ("worst pre-step held by turn-memory", "n/a" if pre is None else
         f"{pre['ms']} ms (turn {pre['turn']} step {pre['step']}); {len(row['prestep_over_1s'])} of "
         f"{row['prestep_count']} over 1 s"),
        ("pre-step median, step 1 / later", f"{row['prestep_median_ms']['step 1']} / "
                                             f"{row['prestep_median_ms']['later steps']} ms"),
        *([("of which in the engine (worst)", _engine_row(row))] if row.get("engine_timing") else []),
        ("worst step gap beyond the model", f"{row['worst_gap_s']:.2f} s (turn {row['worst_gap_turn']}), median "
                                            f"{row['median_gap_s']} s; overflow turn's replay {row['overflow_replay_s']} s"),
        ("worker requests per compressed turn", f"{row['worker_requests_per_compressed_turn']} ({row['worker_requests']} "
                                                f"turn-worker + {row['segment_requests']} segment-worker requests; "
                                                f"{row['agent_requests']} agent)"),
        ("log size", f"{row['log_bytes'] / 1e6:.1f} MB {row['log_file']} ({row['log_events']} events); engine log "
                     f"{row['engine_log_bytes'] / 1e6:.2f} MB, {row['engine_log_warnings']} warnings, "
                     f"{len(row['engine_log_errors'])} errors"),
        ("log reloads (host checks)", "yes" if row["logs_reloaded"] else "NO: " + "; ".join(row["reload_problems"])),
    ]
    width = max(len(a) for a, _ in lines)
    head = f"DSH {row['version']} ({row['host']}), {row['turns']} turns"
    return "\n".join([head, "-" * len(head), *(f"{a.ljust(width)}  {b}" for a, b in lines)])


def _engine_row(row: dict[str, Any]) -> str:
    pre, req, rest = row["worst_engine_prestep"], row["worst_engine_request"], row["worst_prestep_outside_engine"]
    out = "n/a" if pre is None else f"pre-step {pre[0]} ms (turn {pre[1]} step {pre[2]})"
    out += "" if req is None else f", request hook {req[0]} ms (turn {req[1]})"
    return out + ("" if rest is None else f"; outside the engine (shim + DSH) up to {rest[0]} ms (turn {rest[1]} "
                                          f"step {rest[2]})")


def verdict(row: dict[str, Any]) -> list[str]:
    misses = []
    if row["turns_completed"] != row["turns_asked"]:
        misses.append(f"turns completed {row['turns_completed']}/{row['turns_asked']}: {row['not_completed']}")
    if row["lost"] or row["doubled"]:
        misses.append(f"lost {row['lost']} doubled {row['doubled']}")
    if row["rss_growth"] is not None and row["rss_growth"] >= 0.2:
        misses.append(f"engine RSS grew {row['rss_growth']:+.1%} middle -> end")
    if row["prestep_over_1s"]:
        misses.append(f"pre-steps held over 1 s: {row['prestep_over_1s'][:5]}")
    if row["engine_log_errors"]:
        misses.append(f"engine log errors: {row['engine_log_errors'][:3]}")
    if not row["logs_reloaded"]:
        misses.append("the log does not reload")
    return misses


def stock_row(soak: Soak, runs: list[Any], seconds: float) -> dict[str, Any]:
    """The same session on a home without turn-memory (DSH's own compaction-basic): the baseline of
    the step timings."""
    pre = [p for run in runs for p in run.pre_steps()]
    tasks = [r for run in runs for r in run.records if "task" in r]
    worst = max(pre, key=lambda p: p["ms"], default=None)
    return {"host": soak.home.host, "version": soak.home.runtime.version, "turns": soak.sched.n, "stock": True,
            "seconds": round(seconds, 1), "turns_asked": soak.sched.n + soak.sched.closing,
            "turns_completed": sum(1 for r in tasks if (r.get("reason") or {}).get("kind") == "completed"),
            "worst_prestep": worst, "prestep_count": len(pre), "prestep_over_1s": [p for p in pre if p["ms"] > 1000],
            "prestep_median_ms": {"step 1": _median(p["ms"] for p in pre if p["step"] == 1),
                                  "later steps": _median(p["ms"] for p in pre if p["step"] > 1)}}


def stock_table(row: dict[str, Any]) -> str:
    pre = row["worst_prestep"]
    return (f"stock DSH {row['version']} ({row['host']}), the same {row['turns']} turns without turn-memory: "
            f"{row['turns_completed']}/{row['turns_asked']} turns, {row['seconds']:.0f} s; pre-step median step 1 / "
            f"later {row['prestep_median_ms']['step 1']} / {row['prestep_median_ms']['later steps']} ms, worst "
            + ("n/a" if pre is None else f"{pre['ms']} ms (turn {pre['turn']} step {pre['step']})")
            + f", {len(row['prestep_over_1s'])} of {row['prestep_count']} over 1 s")


def soak_host(host: str, n: int, ttfb_ms: float, keep: bool, engine_timing: bool = False,
              stock: bool = False) -> dict[str, Any]:
    runtime = ensure_runtime(host=host)
    tmp = Path(tempfile.mkdtemp(prefix=f"turn-memory-soak-{host}-"))
    fake = SoakModel(ttfb_ms=ttfb_ms)
    fake.start()
    try:
        home = DshHome(tmp / "home", runtime, fake.base_url).create()
        if not stock:
            home.install_turn_memory()
        write_sources(home.workspace)
        home.extra_env["TURN_MEMORY_PID_FILE"] = str(tmp / "engine.pid")
        soak = Soak(home, fake, tmp, Schedule.of(n), plan(n), engine_timing, stock)
        started = time.monotonic()
        runs = soak.run()
        row = (stock_row if stock else account)(soak, runs, time.monotonic() - started)
        row["tmp"] = str(tmp) if keep else None
        return row
    finally:
        fake.stop()
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=300, help=(
        "turns of the session (default 300; below ~100 the hung worker holds the landings of the turns after it "
        "past the session's end, and they count as lost)"))
    ap.add_argument("--hosts", default=",".join(HOSTS), help="comma-separated: rc8, v021")
    ap.add_argument("--ttfb-ms", type=float, default=0.0, help="the model's time to first byte")
    ap.add_argument("--save", type=Path, help="write every number as JSON here")
    ap.add_argument("--from", dest="source", type=Path, help="print the tables of an earlier --save")
    ap.add_argument("--keep", action="store_true", help="keep the homes, logs and engine logs")
    ap.add_argument("--stock", action="store_true",
                    help="also run the same session on a home without turn-memory: the step timings' baseline")
    ap.add_argument("--engine-timing", action="store_true",
                    help="run the engine through bench/soak_engine.py: its own share of each hook, in the table")
    args = ap.parse_args(argv)
    if args.turns < 20:
        ap.error("--turns must be at least 20")
    if args.source:
        rows = json.loads(args.source.read_text())
    else:
        rows = []
        for host in [h.strip() for h in args.hosts.split(",") if h.strip()]:
            print(f"soak: {args.turns} turns on {host} …", file=sys.stderr, flush=True)
            rows.append(soak_host(host, args.turns, args.ttfb_ms, args.keep, args.engine_timing))
            if args.stock:
                print(f"soak: the same {args.turns} turns on stock {host} …", file=sys.stderr, flush=True)
                rows.append(soak_host(host, args.turns, args.ttfb_ms, args.keep, stock=True))
            if args.save:
                args.save.write_text(json.dumps(rows, indent=1, default=str))
    code = 0
    for row in rows:
        if row.get("stock"):
            print(stock_table(row))
            continue
        print("\n" + table(row))
        misses = verdict(row)
        print("targets: " + ("met" if not misses else "MISSED: " + " | ".join(misses)))
        code |= bool(misses)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
