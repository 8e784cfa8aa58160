"""A turn one worker cannot keep up with: how it is cut into parts, how many workers it gets,
and a split job end to end against the in-memory host (docs/decisions.md#a-turn-one-worker-cannot-keep-up-with-is-split-between-workers)."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from engine_harness import EngineHarness
from fake_host import SESSION, WorkerScript, attach_workers
from test_turn_jobs import complete_turn, config, next_turn_prestep, one_turn_host, play_turn
from turn_builders import Shape, completed_turn_log
from turn_memory.host.dialects import V02
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns import split
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turn_nodes
from turn_memory.turns.service import SessionTurns

#: four tool steps and the answer: n1 user, n2 snapshot, then (assistant + call, result) x 4, n11 answer
FOUR_STEPS = Shape(steps=[(1, False, False)] * 4 + [(0, False, False)])


def test_a_turn_is_cut_only_before_an_assistant_whose_earlier_calls_are_answered():
    log, positions = completed_turn_log(V02, FOUR_STEPS)
    originals = original_nodes(log, positions)
    assert [o.role for o in originals] == ["user", "user"] + ["assistant", "tool"] * 4 + ["assistant"]
    assert split.cut_points(originals) == [4, 6, 8, 10]  # never before the first step, nor inside one
    # equal sizes: two parts meet at the cut nearest the middle, four parts take one step each
    assert split.split(originals, [10] * 11, 2) == [(0, 5), (6, 10)]
    assert split.split(originals, [10] * 11, 4) == [(0, 3), (4, 5), (6, 7), (8, 10)]
    # a big result early pulls the cut forward; a part under half an equal share is not worth its own
    # worker (here the 50 tokens after a 230-token first part); asking for more parts than cuts
    # gives one part per cut + 1
    assert split.split(originals, [10, 10, 10, 200, 10, 10, 10, 10, 10, 60, 10], 2) == [(0, 3), (4, 10)]
    assert split.split(originals, [10, 10, 10, 200, 10, 10, 10, 10, 10, 10, 10], 2) == [(0, 10)]
    assert split.split(originals, [10] * 11, 9) == [(0, 3), (4, 5), (6, 7), (8, 10)]  # the answer alone: too small
    one_step, nodes = completed_turn_log(V02, Shape())
    # one step: the only cut leaves the kept answer alone, with nothing to rewrite
    assert split.split(original_nodes(one_step, nodes), [10, 10, 0, 10, 0], 3) == [(0, 4)]


def test_a_big_result_between_small_steps_gets_a_part_of_its_own():
    """The turn is ready when its slowest part is: the cuts make the biggest part as small as they
    can, not each cut the closest to an equal share (that gave 20 / 80 / 40 here, ready at 80)."""
    log, positions = completed_turn_log(V02, FOUR_STEPS)
    originals = original_nodes(log, positions)
    sizes = [0, 0, 0, 20, 0, 60, 0, 20, 0, 40, 0]
    assert split.split(originals, sizes, 3) == [(0, 3), (4, 5), (6, 10)]  # 20 / 60 / 60


def test_the_biggest_part_is_the_smallest_any_cut_gives():
    """Against every choice of cuts, over sizes that put the big results anywhere."""
    log, positions = completed_turn_log(V02, FOUR_STEPS)
    originals = original_nodes(log, positions)
    points = split.cut_points(originals)
    for results in itertools.product([0, 10, 40, 90], repeat=4):
        sizes = [5, 5, 0, results[0], 0, results[1], 0, results[2], 0, results[3], 0]
        for parts in (2, 3):
            best = min(max(sum(sizes[a:b]) for a, b in zip((0, *cuts), (*cuts, len(sizes))))
                       for cuts in itertools.combinations(points, parts - 1))
            got = split._balanced(points, sizes, parts)
            assert max(sum(sizes[a:b]) for a, b in zip(got, (*got[1:], len(sizes)))) == best, (sizes, parts, got)


@pytest.mark.parametrize("rewritable, share, speed, gap, cap, expected", [
    (8000, 0.3, 60.0, 27.0, 4, split.Budget(4, 5400.0)),  # 40 s of writing, 27 s turns: each part ~27 s
    (8000, 0.3, 60.0, 60.0, 4, None),    # it fits in one turn
    (8000, 0.3, None, 27.0, 4, None),    # no worker measured yet
    (8000, 0.3, 60.0, None, 4, None),    # no turn interval measured yet
    (8000, 0.3, 60.0, 9.0, 2, split.Budget(2, 1800.0)),  # turns.maxParts
    # a small rewrite measured slow (its workers' time is mostly the host starting them): more
    # workers would not shorten it, so each part writes at least split.MIN_PART_TOKENS (bench/soak.py)
    (390, 0.3, 6.0, 4.0, 4, None),
    (4000, 0.3, 6.0, 4.0, 4, split.Budget(2, 80.0)),
])
def test_what_each_worker_may_take_follows_the_measured_speed_and_pace(rewritable, share, speed, gap, cap, expected):
    assert split.budget(rewritable, share, speed, gap, cap) == expected


def test_a_turn_gets_the_fewest_workers_whose_biggest_part_is_ready_in_time():
    log, positions = completed_turn_log(V02, FOUR_STEPS)
    originals = original_nodes(log, positions)
    sizes = [10] * 11
    assert split.plan(originals, sizes, split.Budget(4, 60)) == [(0, 5), (6, 10)]  # 60 / 50
    assert split.plan(originals, sizes, split.Budget(4, 45)) == [(0, 3), (4, 7), (8, 10)]  # 40 / 40 / 30
    assert split.plan(originals, sizes, split.Budget(4, 10)) == [(0, 3), (4, 5), (6, 7), (8, 10)]  # none fits: all 4
    assert split.plan(originals, sizes, split.Budget(2, 10)) == [(0, 5), (6, 10)]


def test_the_pace_is_the_median_of_the_recent_gaps_between_turn_ends():
    assert split.turn_seconds([]) is None and split.turn_seconds([5.0]) is None
    assert split.turn_seconds([0.0, 20.0, 50.0, 70.0]) == 20.0
    assert split.turn_seconds([0.0, 100.0] + [100.0 + 10 * k for k in range(1, 6)]) == 10.0  # the last five


def part(prefix_ids: tuple[str, str], tool_ids: list[str], text: str) -> list[tuple[str, dict]]:
    calls: list[tuple[str, dict]] = []
    if prefix_ids:
        calls.append(("replace_turn_nodes", {"from": prefix_ids[0], "to": prefix_ids[1], "nodes": [
            {"role": "user", "content": "Fix the parser in four steps."}]}))
    calls += [("replace_turn_nodes", {"from": t, "nodes": [{"role": "tool", "content": f"{text} {t}"}]})
              for t in tool_ids]
    return calls + [("finish_turn_compression", {})]


def test_a_slow_session_splits_a_long_turn_between_parallel_workers_that_land_it_as_one(monkeypatch):
    """The session measured its workers at 1 token/s and its turns 20 s apart; this turn's
    rewrite (~30% of what a worker may rewrite) needs more than one turn's time, so it gets two
    workers at once, each on whole steps, each refused outside its part; both finish and the
    turn lands as one, in place, shape and assistants kept (0.2's default)."""
    host, harness = one_turn_host(V02, FOUR_STEPS), EngineHarness()
    service, cfg = harness.turns, config(maxParts=2, batchTokens=100)  # this small turn counts as big
    monkeypatch.setattr(split, "MIN_PART_TOKENS", 1)  # and its small rewrite as worth two workers
    turns = service.sessions[SESSION] = SessionTurns(SESSION, cfg, service.workers, service.hints, service.window_of)
    turns.pace, turns.turn_ends = (100, 100.0), [0.0, 20.0, 40.0, 60.0, 80.0]
    release = asyncio.Event()
    first = WorkerScript([("replace_turn_nodes", {"from": "n6", "nodes": [{"role": "tool", "content": "x"}]}),
                          *part(("n1", "n2"), ["n4"], "LISTED")], gate=release)
    second = WorkerScript(part((), ["n8", "n10"], "LISTED"))
    started = attach_workers(host, service, [first, second])

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)
        assert len(started) == 2  # both parts run at once: the first waits, the second already ran
        release.set()
        await service.drained(SESSION, 5)
        play_turn(host, 2, started=False)
        await complete_turn(host, service, cfg, turn=2)
        await next_turn_prestep(host, service, cfg, turn=3)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert [s["label"] for s in started][:2] == ["turn-memory turn 1 (1/2)", "turn-memory turn 1 (2/2)"]
    assert "Yours\nis part 1 of 2: nodes n1..n4," in started[0]["prompt"], started[0]["prompt"][:900]
    assert "- n6 ·" not in started[0]["prompt"] and "- n6 ·" in started[1]["prompt"]
    assert first.answers[0].is_error and "n6 belongs to another part of this turn" in first.answers[0].text
    assert all(not a.is_error for a in first.answers[1:] + second.answers)
    log = SessionLog(V02, host.log.events)
    nodes = turn_nodes(log, 1)
    assert [log.message_of(s)["role"] for s in nodes] == ["user"] + ["assistant", "tool"] * 4 + ["assistant"]
    assert [marker_of(e) for e in host.log.events if marker_of(e) == ("compression", 1)] == [("compression", 1)]
    results = json.dumps([log.message_of(s) for s in nodes])
    assert results.count("LISTED") == 3 and '"x"' not in results  # n6's result is left as it was
    assert log.reload_problems == []
    written, seconds = turns.pace
    assert written > 100 and seconds > 100.0  # this job's writing and worker time joined the measure


def test_before_a_worker_ran_the_speed_is_the_sessions_own_model_over_its_recent_steps():
    events = [
        {"seq": 0, "type": "turn/start", "time": 0, "data": {"turn": 1}},
        {"seq": 1, "type": "step/start", "time": 1000, "data": {"turn": 1, "step": 1}},
        {"seq": 2, "type": "assistant/message", "time": 3000, "surfaceOp": "append", "data": {"turn": 1, "step": 1}},
        {"seq": 3, "type": "step/start", "time": 4000, "data": {"turn": 1, "step": 2}},
        # a landing's appended copy in no step of its own is not the model's work
        {"seq": 4, "type": "assistant/message", "time": 4500, "surfaceOp": "append", "data": {"turn": 9, "step": 9}},
        {"seq": 5, "type": "assistant/message", "time": 6000, "surfaceOp": "append", "data": {"turn": 1, "step": 2}},
        {"seq": 6, "type": "turn/end", "time": 6500, "data": {"turn": 1}},
    ]
    price = {2: 100, 4: 5000, 5: 200}.get
    assert split.model_speed(events, price) == pytest.approx(300 / 4)  # 300 tokens over 2 s + 2 s
    assert split.model_speed(events, price, recent=1) == pytest.approx(200 / 2)  # the newest step only
    assert split.model_speed(events[:2], price) is None
    assert split.turn_duration(events, 1) == 6.5 and split.turn_duration(events, 2) is None


def test_a_turn_smaller_than_batch_tokens_gets_one_worker_however_slow_the_session():
    host, harness = one_turn_host(V02, FOUR_STEPS), EngineHarness()
    service, cfg = harness.turns, config(maxParts=4)  # the default turns.batchTokens, 4000: this turn is small
    turns = service.sessions[SESSION] = SessionTurns(SESSION, cfg, service.workers, service.hints, service.window_of)
    turns.pace, turns.turn_ends = (100, 100.0), [0.0, 20.0, 40.0, 60.0, 80.0]
    started = attach_workers(host, service, [WorkerScript([("finish_turn_compression", {})])])

    async def scenario():
        await complete_turn(host, service, cfg)
        await service.drained(SESSION, 5)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert [s["label"] for s in started] == ["turn-memory turn 1"]
