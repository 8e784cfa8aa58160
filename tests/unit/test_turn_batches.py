"""A backlog of completed turns is compressed by one worker (turns.batchTurns), as the user
sees it: one model request for the backlog instead of one per turn, and every turn still
lands compressed on its own, with its own marker."""

from __future__ import annotations

import asyncio
import json
from typing import Callable

import pytest

from engine_harness import EngineHarness
from fake_host import SESSION, FakeHost, WorkerScript, attach_workers
from turn_memory.turns.service import TurnService
from surface_builders import LogBuilder
from test_turn_jobs import FINISH, marks, next_turn_prestep, reopen
from turn_builders import Shape, add_turn
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns.recovery import turn_nodes
from turn_memory.turns.results import ResultStore

TURNS = 3


def config(**turns) -> EngineConfig:
    # the builders' turns are a few hundred tokens: compress them (the policy has its own tests)
    # one worker per job: gated workers would read as slow ones and split turns (tests/unit/test_turn_split.py)
    return EngineConfig.model_validate({"turns": {"minTurnTokens": 0, "maxParts": 1, **turns}})


def backlog_host(dialect=RC8, shapes: list[Shape] | None = None) -> FakeHost:
    """TURNS completed turns the engine has not seen end yet (as after fast turns, or a restart)."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    for shape in shapes or [Shape()] * TURNS:
        add_turn(b, shape)
    return FakeHost(dialect, b.events)


def fold(turn: int, prefix: bool = True) -> tuple[str, dict]:
    p = f"t{turn}." if prefix else ""
    return ("replace_turn_nodes", {"from": f"{p}n1", "to": f"{p}n5", "nodes": [
        {"role": "user", "content": f"COMPRESSED-USER {turn}"}, {"role": "assistant", "content": f"COMPRESSED-ASSISTANT {turn}"}]})


def run_backlog(host: FakeHost, cfg: EngineConfig, scripts: list[WorkerScript], store: ResultStore | None = None,
                service: TurnService | None = None, check_ready: Callable[[TurnService], None] | None = None) -> list[dict]:
    """The engine sees every turn/end at once (one queue), then turn TURNS+1 opens and lands them
    (`check_ready`: called once the queue drained, before that turn opens)."""
    service = service or EngineHarness().turns
    started = attach_workers(host, service, scripts)

    async def scenario():
        ends = [e for e in host.log.events if e["type"] == "turn/end"]
        service.on_events(host.session, ends, False, lambda: host, cfg, store)
        await service.drained(SESSION, 5)
        if check_ready is not None:
            check_ready(service)
        await next_turn_prestep(host, service, cfg, TURNS + 1)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    return started


def landed(host: FakeHost) -> list[tuple[int, int]]:
    return [(m[1], e["data"]["source"]["workers"]) for e in host.log.events
            if (m := marker_of(e)) is not None and m[0] == "compression"]


def in_place(turn: int) -> list[tuple[str, dict]]:
    """The same turn with its assistant nodes kept (0.2's default): user nodes and the tool result rewritten."""
    return [("replace_turn_nodes", {"from": f"t{turn}.n1", "to": f"t{turn}.n2", "nodes": [
                {"role": "user", "content": f"COMPRESSED-USER {turn}"}]}),
            ("replace_turn_nodes", {"from": f"t{turn}.n4", "nodes": [{"role": "tool", "content": f"COMPRESSED-TOOL {turn}"}]})]


@pytest.mark.parametrize("dialect, assistants", [(RC8, "auto"), (V02, "rewrite"), (V02, "auto")],
                         ids=["rc8", "v02-rewrite", "v02-kept"])
def test_one_worker_compresses_the_backlog_and_every_turn_lands_on_its_own(dialect, assistants):
    host = backlog_host(dialect)
    kept = dialect is V02 and assistants == "auto"
    edits = [c for t in (1, 2, 3) for c in in_place(t)] if kept else [fold(1), fold(2), fold(3)]
    script = WorkerScript([*edits, FINISH])
    started = run_backlog(host, config(assistantNodes=assistants), [script])
    assert len(started) == 1, [s["label"] for s in started]  # one model conversation, not three
    spec = started[0]
    assert spec["label"] == "turn-memory turns 1-3"
    assert "memory editor for turns 1, 2 and 3 of" in spec["prompt"]
    for turn in (1, 2, 3):
        assert f"- t{turn}.n1 · user" in spec["prompt"]
    assert all(not a.is_error for a in script.answers), [a.text for a in script.answers]
    assert sorted(landed(host)) == [(1, 1), (2, 1), (3, 1)]  # each turn its own marker, oldest first
    for turn in (1, 2, 3):
        text = json.dumps([host.log.message_of(s) for s in turn_nodes(host.log, turn)])
        if kept:
            assert f"COMPRESSED-TOOL {turn}" in text and "step 1 answer" in text  # the assistant stayed
        else:
            assert f"COMPRESSED-ASSISTANT {turn}" in text and "step 1 answer" not in text
    SessionLog(dialect, host.log.events)  # still reloads


def test_a_call_works_on_one_turn_and_the_finish_waits_for_every_turn():
    host = backlog_host()
    across = ("replace_turn_nodes", {"from": "t1.n1", "to": "t2.n5", "nodes": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})
    script = WorkerScript([fold(1, prefix=False), across, ("read_turn_nodes", {"ids": ["t1.n1", "t3.n1"]}),
                           fold(1), FINISH, fold(2), fold(3), FINISH])
    run_backlog(host, config(), [script])
    unprefixed, spanning, mixed_read, ok1, early_finish, ok2, ok3, finish = script.answers
    assert unprefixed.is_error and "carry their turn" in unprefixed.text
    assert spanning.is_error and "one turn" in spanning.text
    assert mixed_read.is_error and "one turn" in mixed_read.text
    assert not ok1.is_error and "t1.r1" in ok1.text
    # turns 2 and 3 are still raw: every turn must be done before the batch finishes
    assert early_finish.is_error and "turn 2:" in early_finish.text and "turn 3:" in early_finish.text \
        and "turn 1:" not in early_finish.text
    assert not ok2.is_error and not ok3.is_error and finish.conclude and not finish.is_error
    assert sorted(landed(host)) == [(1, 1), (2, 1), (3, 1)]


def test_the_batch_is_bounded_and_one_turn_per_worker_when_off():
    host = backlog_host()
    started = run_backlog(host, config(batchTurns=2), [WorkerScript([fold(1), fold(2), FINISH]),
                                                        WorkerScript([fold(3, prefix=False), FINISH])])
    assert [s["label"] for s in started] == ["turn-memory turns 1-2", "turn-memory turn 3"]
    assert "memory editor for turn 3 of" in started[1]["prompt"] and "- n1 · user" in started[1]["prompt"]
    assert sorted(landed(host)) == [(1, 1), (2, 1), (3, 1)]

    host = backlog_host()
    started = run_backlog(host, config(batchTurns=1), [WorkerScript([fold(t, prefix=False), FINISH]) for t in (1, 2, 3)])
    assert [s["label"] for s in started] == ["turn-memory turn 1", "turn-memory turn 2", "turn-memory turn 3"]


def test_a_small_turn_in_a_backlog_is_compressed_with_it_not_left_raw_behind_a_no_op():
    """Issue 22: a small turn's raw reasoning never stays on the surface under a landed marker."""
    big = Shape(steps=[(5, True, False), (5, False, False), (0, False, False)])
    small = Shape(steps=[(0, True, False)])
    host = backlog_host(shapes=[big, small, big])
    assert host.log.tokens(turn_nodes(host.log, 2)) < 600 <= host.log.tokens(turn_nodes(host.log, 1))
    nodes = {t: len(turn_nodes(host.log, t)) for t in (1, 2, 3)}
    folds = [("replace_turn_nodes", {"from": f"t{t}.n1", "to": f"t{t}.n{nodes[t]}", "nodes": [
        {"role": "user", "content": f"COMPRESSED-USER {t}"}, {"role": "assistant", "content": f"C {t}"}]}) for t in (1, 2, 3)]
    started = run_backlog(host, config(minTurnTokens=600, policy="size"), [WorkerScript([*folds, FINISH])])
    assert [s["label"] for s in started] == ["turn-memory turns 1-3"]
    assert "- t2.n1 · user" in started[0]["prompt"]
    assert sorted(landed(host)) == [(1, 1), (2, 1), (3, 1)]
    assert not any(host.log.index.has_raw_reasoning(t) for t in (1, 2, 3))


def test_a_batch_that_never_finishes_leaves_every_turn_pending_for_the_next_start():
    host = backlog_host()
    started = run_backlog(host, config(workerAttempts=1), [WorkerScript([fold(1)], stop="completed"),
                                                           WorkerScript([], stop="completed")])
    assert len(started) == 2  # the fork made progress, the spawn did not: the budget is spent
    phases = sorted(marker_of(e) for e in host.log.events if marker_of(e))
    assert phases == [("pending", 1), ("pending", 2), ("pending", 3)]


# -- a batch and the job's reliability (issue 12a): every turn is still its own -------------
def test_every_batched_turn_is_journaled_at_turn_end_kept_in_its_own_sidecar_and_reported(tmp_path, caplog):
    host, store = backlog_host(), ResultStore(tmp_path / "dsh-home")
    kept: list[list[int]] = []

    def while_ready(service: TurnService) -> None:
        # finished, not landed yet: each turn's compression is kept on its own, and every
        # batched job left the queue's bookkeeping; the ready ones wait in `jobs`
        kept.append(store.turns(SESSION))
        assert store.owed(SESSION) == {1: "pending", 2: "pending", 3: "pending"}
        queue = service.sessions[SESSION].queue
        assert queue.pending == queue.running == [] and sorted(service.sessions[SESSION].jobs) == [1, 2, 3]
        assert all(service.job(SESSION, t).compressed for t in (1, 2, 3))

    with caplog.at_level("INFO", logger="turn_memory.turns"):
        started = run_backlog(host, config(), [WorkerScript([fold(1), fold(2), fold(3), FINISH])], store,
                              check_ready=while_ready)
    assert len(started) == 1 and kept == [[1, 2, 3]]
    assert [m for m in marks(host) if m[0] == "pending"] == []  # each landing came before any marker was due
    assert sorted(landed(host)) == [(1, 1), (2, 1), (3, 1)]
    assert store.turns(SESSION) == [] and store.owed(SESSION) == {}  # each deleted once its turn landed
    for turn in (1, 2, 3):  # one report line per turn, naming its session, turn and batch
        assert f"session {SESSION} turn {turn}: job finished; landing at the next landing point: 1 worker(s) (spawn), " \
               f"4 model request(s)" in caplog.text
    assert caplog.text.count("one worker run for turns 1, 2, 3") == 3


def test_a_batch_shares_one_request_budget_and_gives_up_as_a_whole(caplog):
    host = backlog_host()
    cfg = config(maxJobRequests=10, maxWorkerRequests=4)
    # every worker keeps changing turn 1 (progress each time) and never finishes
    scripts = [WorkerScript([("replace_turn_nodes", {"from": "t1.n5" if k == 0 else f"t1.r{k}", "nodes": [
        {"role": "assistant", "content": f"version {k}"}]}), *[("list_turn_nodes", {})] * 10]) for k in range(10)]
    service = EngineHarness().turns
    with caplog.at_level("INFO", logger="turn_memory.turns"):
        started = run_backlog(host, cfg, scripts, service=service)
    assert [s["label"] for s in started] == ["turn-memory turns 1-3"] * 3
    assert [s["maxRequests"] for s in started] == [4, 4, 2]  # 10 for the batch, not 10 per turn
    assert caplog.text.count("gave up: 10 model requests, the job's budget (turns.maxJobRequests)") >= 3
    assert marks(host) == [("pending", 1), ("pending", 2), ("pending", 3)]  # all raw, recoverable
    assert service.sessions[SESSION].jobs == {} and service.sessions[SESSION].queue.pending == []
    assert all(t not in service.sessions[SESSION].queue._seen for t in (1, 2, 3))  # a later recovery may retry each


def test_a_batch_progresses_only_when_the_combined_shape_is_new_and_not_refused():
    """The first worker compresses turn 1 and asks to finish, refused (turns 2 and 3 are raw): the
    batch's shape is one a finish was refused on, so it made no progress and, with
    workerAttempts=1, the job gives up. Workers that each change another turn progress."""
    host = backlog_host()
    first = WorkerScript([fold(1), FINISH])
    started = run_backlog(host, config(workerAttempts=1), [first, WorkerScript([("list_turn_nodes", {})])])
    assert len(started) == 1  # the first worker's edit ended on a refused shape: no progress, budget spent
    assert first.answers[1].is_error and "turn 2:" in first.answers[1].text
    assert marks(host) == [("pending", 1), ("pending", 2), ("pending", 3)]

    host = backlog_host()
    scripts = [WorkerScript([fold(2)]), WorkerScript([fold(3)]), WorkerScript([fold(1), FINISH])]
    started = run_backlog(host, config(workerAttempts=1), scripts)
    # each worker changed another turn: the combined shape is new every time
    assert [s["mode"] for s in started] == ["spawn", "spawn", "spawn"]
    assert sorted(landed(host)) == [(1, 3), (2, 3), (3, 3)]


def before_a_restart(host: FakeHost, store: ResultStore, scripts: list[WorkerScript]) -> list[dict]:
    """A first process: one worker per turn, one attempt each (`scripts`), then it stops
    (its queues cancelled) with whatever it finished kept in `store`."""
    first, cfg = EngineHarness().turns, config(batchTurns=1, workerAttempts=1)
    started = attach_workers(host, first, scripts)

    async def until_the_stop():
        ends = [e for e in host.log.events if e["type"] == "turn/end"]
        first.on_events(host.session, ends, False, lambda: host, cfg, store)
        await first.drained(SESSION, 5)
        for queue in [t.queue for t in first.sessions.values()]:
            queue.cancel()

    asyncio.run(asyncio.wait_for(until_the_stop(), 10))
    return started


def test_a_turn_restored_from_its_sidecar_never_joins_the_batchs_worker(tmp_path, caplog):
    """A previous process finished turn 2 (kept in its sidecar) and gave up on turns 1 and 3;
    after the restart turn 1's job claims 2 and 3: turn 2 lands from its sidecar, and only
    turns 1 and 3 go to the worker."""
    host, store = backlog_host(), ResultStore(tmp_path / "dsh-home")
    started = before_a_restart(host, store, [WorkerScript([]), WorkerScript([fold(2, prefix=False), FINISH]),
                                             WorkerScript([])])
    run_ = lambda coro: asyncio.run(asyncio.wait_for(coro, 10))  # noqa: E731
    assert len(started) == 3 and store.turns(SESSION) == [2]
    assert marks(host) == [] and store.owed(SESSION) == {1: "pending", 2: "pending", 3: "pending"}

    second, cfg = EngineHarness().turns, config()
    again = attach_workers(host, second, [WorkerScript([fold(1), fold(3), FINISH])])

    async def after_the_restart():
        reopen(host, second, cfg, store)
        await second.drained(SESSION, 5)
        assert second.sessions[SESSION].queue.pending == second.sessions[SESSION].queue.running == []
        await next_turn_prestep(host, second, cfg, TURNS + 1)

    with caplog.at_level("INFO", logger="turn_memory.turns"):
        run_(after_the_restart())
    assert len(again) == 1
    assert "- t1.n1 · user" in again[0]["prompt"] and "- t3.n1 · user" in again[0]["prompt"]
    assert "t2." not in again[0]["prompt"]
    assert sorted(landed(host)) == [(1, 1), (2, 1), (3, 1)]
    assert "turn 2: job restored its finished compression" in caplog.text
    assert "one worker run for turns 1, 3" in caplog.text
    assert store.turns(SESSION) == [] and second.sessions[SESSION].jobs == {}
    SessionLog(RC8, host.log.events)  # still reloads


def test_a_batch_led_by_a_restored_turn_runs_one_worker_and_the_restored_turn_keeps_its_provenance(tmp_path):
    """A previous process finished turn 1 (kept in its sidecar) and gave up on turns 2 and 3;
    after the restart turn 1's job leads the batch: turns 2 and 3 get one worker (a fork
    where `turns.workerStart=fork`), and turn 1 lands with the one worker that compressed it,
    not the batch's."""
    host, store = backlog_host(), ResultStore(tmp_path / "dsh-home")
    before_a_restart(host, store, [WorkerScript([fold(1, prefix=False), FINISH]), WorkerScript([]), WorkerScript([])])
    assert store.turns(SESSION) == [1]

    second, cfg = EngineHarness().turns, config(workerStart="fork")
    again = attach_workers(host, second, [WorkerScript([fold(2), fold(3), FINISH])])

    async def after_the_restart():
        reopen(host, second, cfg, store)
        await second.drained(SESSION, 5)
        await next_turn_prestep(host, second, cfg, TURNS + 1)

    asyncio.run(asyncio.wait_for(after_the_restart(), 10))
    assert [w["mode"] for w in again] == ["fork"]
    provenance = {m[1]: e["data"]["source"]["workerModes"] for e in host.log.events
                  if (m := marker_of(e)) is not None and m[0] == "compression"}
    assert provenance[1] == ["spawn"], provenance  # its own run, in the previous process
    assert provenance[2] == provenance[3] and provenance[2][0] == "fork", provenance
