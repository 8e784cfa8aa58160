"""A job's first worker forks the agent until the session's log makes a fork's start stall the
agent: DSH copies the whole log into the child on the agent's thread (bench/soak.py on 0.2.1:
steps held 1-2.7 s from turn ~130 of 300). The shim times each start; past the budget a job's
first worker spawns, with its turn's text in its task."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

from golden_session import session_log, turn_positions
from turn_memory.bridge.protocol import WorkerRunResult
from turn_memory.runtime.fork_cost import MEASURE_FROM_EVENTS, STALL_BUDGET_MS, ForkCost
from turn_memory.runtime.worker_slots import WorkerSlots
from turn_memory.runtime.worker_run import WorkerRun
from turn_memory.turns import prompt as turn_prompt
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.tools import nodes_text

from dataclasses import replace

from test_worker_run_accounting import Task, spec


def test_a_fork_measured_on_a_long_log_predicts_the_next_from_the_log_as_it_stands():
    forks = ForkCost()
    assert forks.may_fork(10**6)  # nothing measured yet
    forks.observed(100.0, 2000)  # 0.05 ms an event
    assert forks.predicted_ms(3000) == STALL_BUDGET_MS == 150.0
    assert forks.may_fork(3000) and not forks.may_fork(3001)
    # a short log always forks: a slow start there is the host warming up
    assert forks.may_fork(MEASURE_FROM_EVENTS - 1)


def test_a_slow_start_on_a_short_log_or_an_unmeasured_start_changes_nothing():
    forks = ForkCost()
    forks.observed(900.0, MEASURE_FROM_EVENTS - 1)
    forks.observed(None, 5000)
    assert forks.ms_per_event is None and forks.may_fork(50_000)


class TimedPort:
    """Each worker finishes in one request; a fork's start takes `start_ms`."""

    def __init__(self, start_ms: float) -> None:
        self.start_ms = start_ms
        self.modes: list[str] = []
        self.run: WorkerRun | None = None

    async def run_worker(self, params: Any, timeout: float) -> WorkerRunResult:
        self.modes.append(params.mode)
        assert self.run is not None
        self.run.tool_call(params.workerId, "finish", {})
        return WorkerRunResult(stop="concluded", requests=1, startMs=self.start_ms if params.mode == "fork" else 3)


def test_once_a_fork_would_stall_the_agent_the_first_worker_of_each_job_spawns_and_says_so_once(caplog):
    session = SimpleNamespace(id="s", log=[{}] * 4000, forks=ForkCost(), worker_slots=WorkerSlots())
    port = TimedPort(start_ms=400.0)  # 0.1 ms an event: 400 ms at 4,000 events
    modes = []
    with caplog.at_level(logging.INFO, logger="test"):
        for job in range(3):
            run = WorkerRun.start(session, port, f"j{job}", replace(spec(), forks=True))  # type: ignore[arg-type]
            port.run = run
            assert asyncio.run(run.until_finished(Task())) is None
            modes += run.modes
    assert modes == ["fork", "spawn", "spawn"]
    said = [r.getMessage() for r in caplog.records if "start fresh" in r.getMessage()]
    assert said == ["session s: workers now start fresh instead of as forks: a fork's start would hold the agent "
                    "about 400 ms copying the 4000-event log (over 150 ms)"]


def test_a_session_whose_forks_start_fast_keeps_forking():
    session = SimpleNamespace(id="s", log=[{}] * 4000, forks=ForkCost(), worker_slots=WorkerSlots())
    port = TimedPort(start_ms=40.0)
    for job in range(3):
        run = WorkerRun.start(session, port, f"j{job}", replace(spec(), forks=True))  # type: ignore[arg-type]
        port.run = run
        asyncio.run(run.until_finished(Task()))
    assert port.modes == ["fork"] * 3 and session.forks.predicted_ms(4000) == 40.0


def test_a_spawn_gets_its_nodes_text_as_one_read_page_and_where_to_read_on():
    log = session_log()
    editor = TurnNodeEditor(2, original_nodes(log, turn_positions(log, 2)))
    editor.replace("n3", "n4", [Output("assistant", "grep: monthly_totals (dashboards/orders.sql:3).")])
    whole = nodes_text(editor.nodes, 10_000)
    assert whole.startswith("### n1 · user · unchanged\nCurrent runtime context.")
    assert "### r1 · assistant · changed\ngrep: monthly_totals (dashboards/orders.sql:3)." in whole
    assert "truncated" not in whole
    cut = nodes_text(editor.nodes, 100)
    assert cut == (whole[:100] + f"\n\n[truncated at character 100 of {len(whole)}; read the rest with "
                   "read_turn_nodes, from n1 to n5 with offset=100]")


def test_a_spawn_task_carries_its_turns_text_and_a_fork_task_does_not():
    log = session_log()
    editor = TurnNodeEditor(2, original_nodes(log, turn_positions(log, 2)))
    spawn = turn_prompt.task([editor], [], spawn=True, continuing=False)
    fork = turn_prompt.task([editor], [], spawn=False, continuing=False)
    assert spawn.endswith("Their text:\n\n" + nodes_text(editor.nodes, turn_prompt.SPAWN_TEXT_CHARS) + "\n")
    assert "Their text:" not in fork and "### n1 · user · unchanged" not in fork
    assert turn_prompt.SPAWN_TEXT_CHARS == 128_000  # a whole ~32 K-token turn: no read needed

