"""A session whose workers never finish spends a small, fixed number of requests, says so
once, and keeps its turns raw (docs/decisions.md#a-session-stops-compressing-when-its-workers-keep-failing)."""

from __future__ import annotations

import asyncio

import pytest

from engine_harness import EngineHarness
from fake_host import SESSION, WorkerScript, attach_workers
from test_turn_jobs import complete_turn, config, next_turn_prestep, one_turn_host, play_turn
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns.breaker import Breaker
from turn_memory.turns.recovery import turns_to_recover


def test_until_a_job_finished_running_workers_share_the_allowance_and_it_opens_once_spent():
    b = Breaker(max_requests=40, max_failed_jobs=3)
    assert [b.grant(24) for _ in range(4)] == [10, 10, 10, 10]  # a quarter each: four workers at once
    assert b.grant(24) is None and not b.open  # a fifth waits for one of them to end
    b.used(10, 2)
    assert b.grant(24) == 8  # the first used 2 of its 10: 40 - 2 spent - 30 held
    for _ in range(3):
        b.used(10, 10)
    b.used(8, 8)
    assert (b.spent, b.held) == (40, 0)
    assert b.grant(24) == 0 and b.open and "turns.failingRequests: 40" in (b.reason or "")
    notice = b.notice()
    assert notice is not None and notice.startswith("turn-memory stopped compressing this session's turns: ")
    assert b.notice() is None  # said once
    b.close()
    assert not b.open and b.grant(24) == 10 and b.notice() is None


def test_once_a_job_finished_workers_run_in_parallel_within_the_same_bound_since_it():
    b = Breaker(max_requests=40, max_failed_jobs=3)
    b.finished()
    assert [b.grant(24) for _ in range(4)] == [24, 24, 24, 24]  # the model works: no wait
    for _ in range(4):
        b.used(24, 10)
    assert b.grant(24) == 0 and b.open  # 40 spent since the last finished job


def test_a_finished_job_resets_the_count_and_three_that_gave_up_in_a_row_open_it():
    b = Breaker(max_requests=40, max_failed_jobs=3)
    b.gave_up("gave up: 3 consecutive workers made no progress")
    b.gave_up("gave up: 3 consecutive workers made no progress")
    b.used(b.grant(10), 10)
    b.finished()
    assert (b.failed_jobs, b.spent, b.open) == (0, 0, False)
    for _ in range(3):
        b.gave_up("gave up: x")
    assert b.open and b.reason == "3 compressions in a row gave up (turns.failingJobs), the last: gave up: x"


def never_finishes(reads: int = 30) -> WorkerScript:
    """A model that cannot do the protocol: it reads and reads (each read new, so none repeats)."""
    return WorkerScript([("read_turn_nodes", {"from": "n1", "offset": k}) for k in range(reads)])


def repeats() -> WorkerScript:
    """A model that calls the same tool with the same arguments over and over."""
    return WorkerScript([("list_turn_nodes", {})] * 30)


@pytest.mark.parametrize("turns", [10, 30])
@pytest.mark.parametrize("script", [never_finishes, repeats], ids=["new-reads", "same-call"])
def test_a_session_whose_workers_never_finish_spends_at_most_40_requests_and_says_so_once(turns, script):
    host, service, cfg = one_turn_host(V02), EngineHarness().turns, config()
    scripts = [script() for _ in range(200)]
    attach_workers(host, service, scripts)
    notices = []

    async def scenario():
        await complete_turn(host, service, cfg)
        for turn in range(2, turns + 1):
            await service.drained(SESSION, 5)
            await next_turn_prestep(host, service, cfg, turn=turn)
            notices.append(service.notice(SESSION))
            play_turn(host, turn, started=True)
            await complete_turn(host, service, cfg, turn=turn)
        await service.drained(SESSION, 5)
        notices.append(service.notice(SESSION))

    asyncio.run(asyncio.wait_for(scenario(), 30))
    requests = sum(len(s.answers) for s in scripts)
    assert requests <= 40, requests
    said = [n for n in notices if n]
    assert len(said) == 1 and said[0].startswith("turn-memory stopped compressing this session's turns: ")
    # nothing landed, nothing lost: every completed turn stays raw and pending for a later process
    assert [m for e in host.log.events if (m := marker_of(e)) and m[0] == "compression"] == []
    # the last turn's marker is owed (no later turn): the journal holds it
    assert turns_to_recover(SessionLog(V02, host.log.events), owed=service.sessions[SESSION].owed) == \
        list(range(1, turns + 1))
    assert service.sessions[SESSION].owed == {turns: "pending"}


def test_a_worker_repeating_one_call_is_stopped_at_the_third_identical_answer():
    host, service, cfg = one_turn_host(RC8), EngineHarness().turns, config(workerAttempts=1)
    script = repeats()
    attach_workers(host, service, [script])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    # concluding, and not an error: the host ends a worker's turn only on an answer it accepts
    assert len(script.answers) == 3 and script.answers[-1].conclude and not script.answers[-1].is_error
    assert script.answers[-1].text.startswith("You made this same call 3 times and got the same answer")


def test_compact_or_a_config_change_lets_the_workers_try_again():
    host, service, cfg = one_turn_host(RC8), EngineHarness().turns, config(failingJobs=1, workerAttempts=1)
    attach_workers(host, service, [repeats()])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    turns = service.sessions[SESSION]
    assert turns.breaker.open
    service.resume(SESSION, "/compact")
    assert not turns.breaker.open
    turns.breaker.gave_up("gave up: x")
    turns.reconfigure(config(failingJobs=1, workerAttempts=2))
    assert not turns.breaker.open and turns.breaker.max_failed_jobs == 1
