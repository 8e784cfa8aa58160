"""The fault-injection suite's scenarios and their accounting (issue 12, Deliver 4-5).

A scenario is one or more real DSH runs on one throwaway home with a fault injected (the
engine killed or hung through its pid file or a `turn_memory.faults` point, DSH SIGKILLed by
the driver, a worker that misbehaves, inputs that are large or not ASCII). Each scenario runs
once per host and module; several tests then assert on its `Outcome`. The accounting is what
a user would notice, read from the logs and the scripted model's request log:

- turns completed: every turn the driver asked for ended `completed`;
- logs reloaded: every session's log folds through the surface model with the host's reload
  checks;
- landings lost / doubled: a turn that ended (and had a later turn to land in) without a
  `compression` marker (landed or no-op) by the end / with two or more;
- requests spent: agent and worker model requests; "paid twice": a turn whose workers
  finished (answered `finish_turn_compression`) more than once.

With `TURN_MEMORY_FAULTS_REPORT=<file>` every outcome is also appended there as one JSON line
(`bench/faults.py` runs the suite and prints the table).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from helpers import text_of, turn_rewrite
from turn_memory.devtools.dsh_home import DshHome, RunResult
from turn_memory.devtools.fake_model import FakeModel, FakeRequest
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns.recovery import turn_nodes

WORKER_TOOLS = {"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression"}
SEGMENT_TOOLS = {"replace_session_memory", "finish_session_segment"}
_IDS = re.compile(r"^- ([nr]\d+) · ", re.M)


def is_worker(request: FakeRequest) -> bool:
    return bool(WORKER_TOOLS & set(request.tool_names))


def is_segment_worker(request: FakeRequest) -> bool:
    return bool(SEGMENT_TOOLS & set(request.tool_names))


def worker_turn(request: FakeRequest) -> int:
    return int(re.search(r"memory editor for turn (\d+)", request.all_text()).group(1))


def current_catalog(request: FakeRequest) -> str:
    """The newest catalog the worker was shown (an accepted replacement's answer, else its task prompt)."""
    for message in reversed(request.messages):
        text = text_of(message)
        if _IDS.search(text):
            return text
    return ""


def current_ids(request: FakeRequest) -> list[str]:
    """The worker's current node ids, from its newest catalog."""
    return _IDS.findall(current_catalog(request))


def fold(request: FakeRequest, label: str = "") -> dict[str, Any]:
    """Compress the whole current turn (helpers.turn_rewrite: either form), then finish."""
    calls = turn_rewrite(current_catalog(request), worker_turn(request), label)
    return {"tool_calls": [*calls, {"name": "finish_turn_compression", "arguments": {}}]}


def tool_turn(fake: FakeModel, k: int | str) -> str:
    """Script one short tool turn (a call, its result, an answer); returns its task."""
    fake.add_rule({"last_user_contains": f"Task {k}:", "tools_exclude": "replace_turn_nodes"}, replies=[
        {"text": f"Probing {k}.", "tool_calls": [{"name": "bash", "arguments": {
            "command": f"echo probe-{k}", "description": "probe"}}]},
        f"Turn {k} done. DONE-{k}"])
    return f"Task {k}: look at module {k} and report."


@dataclass
class Case:
    """One scenario's home, model and scratch folder."""
    name: str
    home: DshHome
    fake: FakeModel
    tmp: Path
    runs: list[RunResult] = field(default_factory=list)

    @property
    def pid_file(self) -> Path:
        return self.tmp / "engine.pid"

    @property
    def engine_log(self) -> Path:
        return self.tmp / "engine.log"

    def kill_engine(self, sig: int) -> None:
        os.kill(int(self.pid_file.read_text()), sig)

    def run(self, tasks: list[Any], **kw: Any) -> RunResult:
        overrides = kw.pop("engine_overrides", {})
        engine = {"logFile": str(self.engine_log), **overrides.pop("engine", {})}
        run = self.home.run(tasks, engine_overrides={"engine": engine, **overrides}, **kw)
        self.runs.append(run)
        assert run.returncode == 0 or run.killed, (self.name, run.returncode, run.records[-5:], run.stderr[-3000:])
        return run


@dataclass
class Outcome:
    case: str
    host: str
    #: the cases of the issue this scenario covers
    covers: list[str]
    runs: int
    turns_asked: int
    turns_completed: int
    logs_reloaded: bool
    #: session -> turn -> compression markers in its log
    markers: dict[str, dict[int, int]]
    #: session -> turns without a marker whose nodes a session checkpoint took (settled)
    folded: dict[str, list[int]]
    #: session -> the turns that must have landed by the end
    must_land: dict[str, list[int]]
    agent_requests: int
    worker_requests: int
    #: turn -> worker requests (turn workers name their turn); session workers under 0
    worker_requests_by_turn: dict[int, int]
    #: turn -> workers that answered finish_turn_compression
    finished_by_turn: dict[int, int]
    #: sidecar turns whose workers finished more than once (None: no restart in this case)
    redone: dict[int, int] | None = None
    reload_problems: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    #: what the tests assert on, not reported
    sessions: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    results: list[RunResult] = field(default_factory=list, repr=False)
    requests: list[FakeRequest] = field(default_factory=list, repr=False)

    @property
    def dialect(self):
        return V02 if self.host == "v021" else RC8

    def lost(self, skip: dict[str, set[int]] | None = None) -> list[tuple[str, int]]:
        skip = skip or {}
        return [(s, t) for s, turns in self.must_land.items() for t in turns
                if t not in skip.get(s, set()) and self.markers[s].get(t, 0) == 0 and t not in self.folded[s]]

    def doubled(self) -> list[tuple[str, int]]:
        return [(s, t) for s, marks in self.markers.items() for t, n in marks.items() if n > 1]

    def paid_twice(self, turns: list[int]) -> dict[int, int]:
        return {t: self.finished_by_turn.get(t, 0) for t in turns if self.finished_by_turn.get(t, 0) > 1}

    def row(self) -> dict[str, Any]:
        skip = {"sessions", "results", "requests"}
        out = {k: v for k, v in asdict(self).items() if k not in skip}
        out["landings_lost"] = len(self.lost())
        out["landings_doubled"] = len(self.doubled())
        out["markers"] = {s: {str(t): n for t, n in m.items()} for s, m in self.markers.items()}
        return out


def _reload_problems(home: DshHome, events: list[dict[str, Any]]) -> list[str]:
    log = SessionLog(home.dialect)
    out = []
    for event in events:
        problems = log.append(event)
        if problems:
            out.append(f"seq {event['seq']}: {problems}")
    return out


def account(case: Case, covers: list[str], sessions: dict[str, str] | None = None,
            must_land: dict[str, list[int]] | None = None, turns_asked: int | None = None,
            notes: dict[str, Any] | None = None, sidecar_turns: list[int] | None = None) -> Outcome:
    """Read the outcome from the logs and the model's request log. `sessions`: label -> id
    (default: the main session of the first run); `must_land`: label -> turns (default every
    turn that ended except the session's last); `sidecar_turns`: the turns whose finished
    compression a sidecar could have kept across the fault (reported as redone when their
    workers finished more than once; None: not a restart case)."""
    home, first = case.home, case.runs[0]
    sessions = sessions or {"main": first.session_id}
    events_of = {label: home.session_log(sid)[1] for label, sid in sessions.items()}
    markers: dict[str, dict[int, int]] = {}
    folded: dict[str, list[int]] = {}
    land: dict[str, list[int]] = {}
    problems: list[str] = []
    for label, events in events_of.items():
        ended = sorted({e["data"]["turn"] for e in events if e["type"] == "turn/end"})
        counts: dict[int, int] = {t: 0 for t in ended}
        for e in events:
            mark = marker_of(e)
            if mark and mark[0] == "compression":
                counts[mark[1]] = counts.get(mark[1], 0) + 1
        markers[label] = counts
        surface = SessionLog(home.dialect, events)
        # a turn a session checkpoint took before its compression landed is settled too: its
        # landing is refused (a checkpoint took its turn), the checkpoint carries it
        folded[label] = [t for t in ended if counts.get(t, 0) == 0 and not turn_nodes(surface, t)]
        land[label] = (must_land or {}).get(label, ended[:-1])
        problems += [f"{label} {p}" for p in _reload_problems(home, events)]
    spent = case.tmp / "faults-spent"
    notes = {**(notes or {}), "fired": sorted(p.name for p in spent.iterdir()) if spent.exists() else [],
             "engine_starts": case.engine_log.read_text().count("shim connected") if case.engine_log.exists() else 0}
    tasks = [t for run in case.runs for t in run.records if "task" in t]
    requests = case.fake.requests
    agent = [r for r in requests if r.kind == "turn" and not is_worker(r) and not is_segment_worker(r)]
    workers = [r for r in requests if r.kind == "turn" and (is_worker(r) or is_segment_worker(r))]
    by_turn: dict[int, int] = {}
    finished: dict[int, int] = {}
    for r in workers:
        turn = worker_turn(r) if is_worker(r) else 0
        by_turn[turn] = by_turn.get(turn, 0) + 1
        calls = {c.get("name") for c in (r.reply or {}).get("tool_calls") or []}
        if "finish_turn_compression" in calls:
            finished[turn] = finished.get(turn, 0) + 1
    outcome = Outcome(
        case=case.name, host=home.host, covers=covers, runs=len(case.runs),
        turns_asked=turns_asked if turns_asked is not None else len(tasks),
        turns_completed=sum(1 for t in tasks if (t.get("reason") or {}).get("kind") == "completed"),
        logs_reloaded=not problems, markers=markers, folded=folded, must_land=land,
        agent_requests=len(agent), worker_requests=len(workers), worker_requests_by_turn=dict(sorted(by_turn.items())),
        finished_by_turn=dict(sorted(finished.items())),
        redone={t: finished[t] for t in (sidecar_turns or []) if finished.get(t, 0) > 1} if sidecar_turns is not None
        else None, reload_problems=problems[:5], notes=notes,
        sessions=events_of, results=list(case.runs), requests=requests)
    if path := os.environ.get("TURN_MEMORY_FAULTS_REPORT"):
        with open(path, "a") as fh:
            fh.write(json.dumps(outcome.row()) + "\n")
    return outcome


def make_case(name: str, template: Path, runtime: Any, tmp: Path) -> tuple[Case, FakeModel]:
    fake = FakeModel().start()
    root = tmp / "home"
    shutil.copytree(template, root, symlinks=True)
    home = DshHome(root, runtime, fake.base_url)
    case = Case(name, home, fake, tmp)
    home.extra_env["TURN_MEMORY_PID_FILE"] = str(case.pid_file)
    home.extra_env["TURN_MEMORY_FAULTS_SPENT"] = str(tmp / "faults-spent")
    return case, fake


Scenario = Callable[[Case], Outcome]
