"""Issue 15 acceptance: no agent step stalls behind the turn-rewrite queue, and a backlog of
turns clears at worker speed.

Host-neutral on purpose (markers, model requests and the driver's pre-step timings only),
so the same tests run unchanged on every host the e2e suite boots.
"""

from __future__ import annotations

import os
import re
import signal
import threading

import pytest

from helpers import engine_connected, reload, text_of, turn_rewrite
from turn_memory.host.markers import marker_of

pytestmark = pytest.mark.e2e

WORKER_TOOLS = {"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression"}
#: the longest any agent step may be held by turn-memory with an instant model
STEP_WAIT_MS = 1000


def is_worker(request) -> bool:
    return bool(WORKER_TOOLS & set(request.tool_names))


def worker_turn(request) -> int:
    """The (first) turn a worker compresses: a backlog may be one worker's batch (turns.batchTurns)."""
    return int(re.search(r"memory editor for turns? (\d+)", request.all_text()).group(1))


def fold(request) -> dict:
    """One worker request: compress each turn of its catalog (helpers.turn_rewrite: either
    form), then finish."""
    by_turn: dict[int, list[str]] = {}
    for line in request.last_user_text.splitlines():
        found = re.match(r"^- (?:t(\d+)\.)?n\d+ · ", line)
        if found:
            by_turn.setdefault(int(found.group(1) or worker_turn(request)), []).append(line)
    calls = [c for turn, lines in by_turn.items() for c in turn_rewrite("\n".join(lines), turn)]
    return {"tool_calls": [*calls, {"name": "finish_turn_compression", "arguments": {}}]}


def tool_turn(fake, k: int) -> str:
    """Script one short tool turn (a call, its result, an answer); returns its task."""
    fake.add_rule({"last_user_contains": f"Task {k}:", "tools_exclude": "replace_turn_nodes"}, replies=[
        {"text": f"Probing {k}.", "tool_calls": [{"name": "bash", "arguments": {
            "command": f"echo probe-{k}", "description": "probe"}}]},
        f"Turn {k} done. DONE-{k}"])
    return f"Task {k}: look at module {k} and report."


def agent_requests(fake):
    return [r for r in fake.requests if r.kind == "turn" and not is_worker(r)]


def compression_marks(events, turn: int) -> list[int]:
    return [e["seq"] for e in events if marker_of(e) == ("compression", turn)]


def step_waits(run) -> tuple[int, int, int]:
    """(max, p95, count) of the driven agent's pre-step hold times, in ms."""
    waits = sorted(p["ms"] for p in run.pre_steps())
    assert waits, "the driver recorded no pre-step"
    return waits[-1], waits[min(len(waits) - 1, int(0.95 * len(waits)))], len(waits)


def carries_compressed(request, turns) -> bool:
    """Each turn arrives compressed (either form of `fold`) and its raw tool result is gone."""
    text = "\n".join(text_of(m) for m in request.messages)
    results = "\n".join(text_of(m) for m in request.messages if m["role"] == "tool")
    return all(f"COMPRESSED-USER of turn {k}." in text and f"probe-{k}" not in results for k in turns)


def test_engine_killed_during_a_worker_no_step_stalls_and_every_turn_lands_once(home, fake, tmp_path):
    pid_file = tmp_path / "engine.pid"
    home.extra_env["TURN_MEMORY_PID_FILE"] = str(pid_file)
    killed = threading.Event()

    def respond(request):
        if request.kind != "turn" or not is_worker(request):
            return None
        if worker_turn(request) == 1 and not killed.is_set():
            # turn 1's first worker is mid-request: the engine dies under it (a crash, an OOM kill)
            killed.set()
            pid = int(pid_file.read_text())
            threading.Timer(0.2, os.kill, (pid, signal.SIGKILL)).start()
            return {"text": "the answer never arrives", "delay_ms": 8000}
        return fold(request)

    fake.responder = respond
    tasks = [tool_turn(fake, k) for k in range(1, 6)]
    fake.add_rule({"last_user_contains": "Last task:", "tools_exclude": "replace_turn_nodes"}, reply="All done. LAST")
    engine_log = tmp_path / "engine.log"
    # the engine is up before turn 1; turns 2 and 3 run while it is down (the shim restarts
    # it after 1.5 s); the pause lets the new engine boot and find its backlog (turns 1-3);
    # turns 4 and 5 run while it clears; the last pause is the user reading before the last turn
    run = home.run([engine_connected(engine_log), *tasks[:3], {"sleepMs": 4000}, *tasks[3:], {"sleepMs": 3000},
                    "Last task: sum up.", {"measure": True}],
                   timeout=240, engine_overrides={"engine": {"restartDelayMs": 1500, "logFile": str(engine_log)}})
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    assert killed.is_set()
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 6
    log = engine_log.read_text()
    # the new engine redid the turn its predecessor died in, and the two that ended meanwhile
    for k in (1, 2, 3):
        assert f"turn {k}: recovering" in log, log

    worst, p95, count = step_waits(run)
    print(f"\nstep waits (engine killed during turn 1's worker): max {worst} ms, p95 {p95} ms, {count} pre-steps")
    print("tasks ms:", [t["ms"] for t in run.tasks()])
    print("per step:", " ".join(f"{p['turn']}.{p['step']}={p['ms']}" for p in run.pre_steps()))
    assert worst <= STEP_WAIT_MS, run.pre_steps()

    _, events = home.session_log(run.session_id)
    for k in range(1, 6):
        assert len(compression_marks(events, k)) == 1, (k, [marker_of(e) for e in events if marker_of(e)])
    # landed before the session's last turn: its first request carries all five compressed
    last = next(r for r in agent_requests(fake) if "Last task:" in r.last_user_text)
    assert carries_compressed(last, range(1, 6)), [text_of(m)[:80] for m in last.messages]
    reload(home, events)
    # landings in whichever step was next still leave the host's token meter working
    (measure,) = [r for r in run.records if r.get("measure")]
    assert "error" not in measure and measure["totalTokens"] > 0, measure


WORKER_MS = 1500  # every worker's one request answers after this long (a slow model)


def test_turns_queued_behind_a_slow_worker_clear_at_worker_speed_without_holding_a_step(home, fake):
    def respond(request):
        if request.kind != "turn" or not is_worker(request):
            return None
        return {**fold(request), "delay_ms": WORKER_MS}

    fake.responder = respond
    tasks = [tool_turn(fake, k) for k in range(1, 4)]
    fake.add_rule({"last_user_contains": "Meanwhile:", "tools_exclude": "replace_turn_nodes"}, reply="Sure. MEANWHILE")
    fake.add_rule({"last_user_contains": "Last task:", "tools_exclude": "replace_turn_nodes"}, reply="All done. LAST")
    # three tool turns end faster than one worker; one more turn runs while they compress;
    # then the user pauses for about three worker times plus slack before the last turn
    # one worker per turn (the template's turns.batchTurns), up to turns.concurrentJobs (3) at
    # once: this is the pipeline's own speed (a batched backlog: test_cache_and_cost_e2e)
    run = home.run([*tasks, "Meanwhile: anything else?", {"sleepMs": 3 * WORKER_MS + 4000}, "Last task: sum up."],
                   timeout=120)
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 5

    # no compaction is due: no agent step waited for the queue
    worst, p95, count = step_waits(run)
    print(f"\nstep waits (three turns behind a {WORKER_MS} ms worker): max {worst} ms, p95 {p95} ms, {count} pre-steps")
    assert worst <= STEP_WAIT_MS, run.pre_steps()

    # the queue cleared at worker speed: each turn's worker started as soon as its turn ended,
    # while the workers before it were still running (no landing, which needs a pre-step, in between)
    starts, ends = {}, {}
    for r in fake.requests:
        if r.kind == "turn" and is_worker(r):
            starts.setdefault(worker_turn(r), r.time)
    _, events = home.session_log(run.session_id)
    ends = {e["data"]["turn"]: e["time"] / 1000 for e in events if e["type"] == "turn/end"}
    worker_s = WORKER_MS / 1000
    late = [round(starts[k] - ends[k], 2) for k in (1, 2, 3)]
    print(f"workers started {late} s after their turn ended")
    assert all(g < 1.5 for g in late[1:]), late  # turn 1's may wait for the engine's start
    assert starts[3] < starts[1] + worker_s, (starts, late)  # in parallel, not one after another
    # ... so the backlog (turn 3's worker done) cleared within about one worker time of turn 3's end
    assert starts[3] + worker_s - ends[3] < worker_s + 2.0, late

    # the last turn's first request carries all three compressed, landed oldest first
    landed = [compression_marks(events, k) for k in (1, 2, 3)]
    assert all(len(m) == 1 for m in landed) and landed == sorted(landed), landed
    last = next(r for r in agent_requests(fake) if "Last task:" in r.last_user_text)
    assert carries_compressed(last, (1, 2, 3)), [text_of(m)[:80] for m in last.messages]
    reload(home, events)
