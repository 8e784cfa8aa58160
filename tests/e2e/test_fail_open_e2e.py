"""With the engine down the agent keeps working; `/compact` fails cleanly; then recovers."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from helpers import NO_TURNS, reload, transactions, turn_tasks

pytestmark = pytest.mark.e2e

# waits for the engine to be up (it boots in parallel with the first turns), then kills it
KILL = [sys.executable, "-c", (
    "import os, signal, sys, time, pathlib\n"
    "p = pathlib.Path(sys.argv[1])\n"
    "deadline = time.time() + 30\n"
    "while not p.exists() and time.time() < deadline: time.sleep(0.05)\n"
    "time.sleep(0.5)\n"
    "os.kill(int(p.read_text()), signal.SIGKILL)\n")]


def test_engine_killed_then_back(home, fake, tmp_path):
    pid_file = tmp_path / "engine.pid"
    home.extra_env["TURN_MEMORY_PID_FILE"] = str(pid_file)
    for i in range(4):
        fake.push("turn", f"Answer {i}. DONE-{i}")
    fake.push("compaction", "SUMMARY-AFTER-RESTART: the parser was inspected twice.")
    run = home.run(
        [
            *turn_tasks(2),
            {"exec": [*KILL, str(pid_file)]},
            "While the engine is down: keep working.",
            "/compact",  # engine still restarting (restart delay below)
            {"sleepMs": 4000},
            "/compact",
        ],
        engine_overrides={"engine": {"restartDelayMs": 2500}, **NO_TURNS},
    )
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 3
    killed = next(r for r in run.records if "exec" in r)
    assert killed["status"] == 0, killed
    down, back = run.commands()
    assert down["result"]["kind"] == "error" and "unavailable" in down["result"]["text"]
    assert back["result"]["kind"] == "success", back
    _, events = home.session_log(run.session_id)
    # the failed /compact appended nothing of ours: only DSH's own command bookkeeping
    during = events[down["eventsBefore"]:down["eventsAfter"]]
    assert {e["type"] for e in during} <= {"command/run", "command/done"}, during
    (tx,) = transactions(home, events)
    assert tx[0]["seq"] >= down["eventsAfter"]
    reload(home, events)


FREEZE = [sys.executable, "-c", (
    "import os, signal, sys, time, pathlib\n"
    "p = pathlib.Path(sys.argv[1])\n"
    "deadline = time.time() + 30\n"
    "while not p.exists() and time.time() < deadline: time.sleep(0.05)\n"
    "time.sleep(0.5)\n"
    "os.kill(int(p.read_text()), signal.SIGSTOP)\n")]


def test_a_hung_engine_holds_no_step_for_long(home, fake, tmp_path):
    """A frozen engine (alive, not answering): the next steps and /compact go on within the
    liveness bound (a ping every second here, two to answer it) instead of waiting for their long timeouts."""
    pid_file = tmp_path / "engine.pid"
    home.extra_env["TURN_MEMORY_PID_FILE"] = str(pid_file)
    for i in range(3):
        fake.push("turn", f"Answer {i}.")
    try:
        run = home.run([*turn_tasks(1), {"exec": [*FREEZE, str(pid_file)]}, "Second question while it hangs.",
                        "/compact"], timeout=120, engine_overrides={"engine": {"livenessMs": 1000}})
        assert run.returncode == 0, (run.records, run.stderr[-2000:])
        second = run.tasks()[1]
        assert second["reason"]["kind"] == "completed" and second["ms"] < 8000, second
        (compact,) = run.commands()
        # (on rc8 DSH itself holds this /compact 20 s: its compaction of the frozen step is still active)
        assert compact["result"]["kind"] == "error" and compact["ms"] < {"rc8": 25000, "v021": 8000}[home.host], compact
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGCONT)
