"""Checkpoints folded in the background (issue 29): the value rule, the span, and the service
against the in-memory host — the step never waits for a fold unless the threshold comes
first, the checkpoint lands at a later step, and a fold whose history moved appends nothing."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Awaitable

import pytest

from engine_harness import EngineHarness
from fake_host import FakeHost, WorkerScript, attach_workers
from session_builders import work_session
from test_compaction_service import AGENT, FOLD, Meter, grow, next_turn, starts
from turn_memory.compaction.fold_value import (FoldFacts, background_span, carrying, checkpoint_estimate, fold_price,
                                               judge, shared_tail)
from turn_memory.compaction.policy import surface_prices
from turn_memory.compaction.scope import CompactionScope
from turn_memory.compaction.service import CompactionService
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8

TURNS = 12
OPEN = TURNS + 1
WINDOW = 100_000  # threshold 80,000: far above the session's ~23,000 tokens
CFG = EngineConfig.model_validate({"compaction": {"retainRatio": 0.3, "backgroundRetainRatio": 0.02}})  # background folds keep a 2,000-token tail, pressure 30,000


def test_a_fold_pays_when_the_requests_still_expected_outweigh_its_workers_and_its_cache_break():
    facts = FoldFacts(span=20_000, tail=4_000, requests=36, segments=1, framing=93)
    assert checkpoint_estimate(facts) == 5_000  # FOLD_PRIOR of the span before one landed
    # saving 15,000 x 36; cost 10 x (20,000 + 400) + 15 x 5,000 + 9 x 9,000 (a spawn reads no session)
    assert fold_price(facts) == (540_000.0, 360_000.0)
    early = FoldFacts(span=20_000, tail=4_000, requests=18, segments=1, framing=93)
    assert fold_price(early)[0] < fold_price(early)[1]  # half the horizon: not yet
    measured = FoldFacts(span=20_000, tail=4_000, requests=18, segments=1, framing=93, fold_ratio=0.05)
    assert checkpoint_estimate(measured) == 1_000 and fold_price(measured) == (342_000.0, 264_000.0)
    tiny = FoldFacts(span=300, tail=4_000, requests=100, segments=1, framing=93, fold_ratio=0.01)
    assert checkpoint_estimate(tiny) == 93  # never under the checkpoint's framing


def test_a_fold_that_pays_waits_until_its_turns_have_been_carried_for_as_much_as_a_fold_s_fixed_part():
    """Every fold pays its cache break and re-reads and rewrites the earlier checkpoint, however
    much it adds: folding each time it pays would fold every turn or two."""
    facts = FoldFacts(span=20_000, tail=4_000, requests=36, segments=1, framing=93, carried=2_000)
    # the cost of 360,000 less reading the 18,000 tokens never folded
    assert judge(facts).fixed == 180_000.0
    # the checkpoint drops 75% of the span: carried for 240,000 pays the fixed part
    assert not judge(FoldFacts(**{**vars(facts), "held": 239_999})).starts
    assert judge(FoldFacts(**{**vars(facts), "held": 240_000})).starts
    # carried long enough, but it does not pay over the horizon
    assert not judge(FoldFacts(**{**vars(facts), "held": 10**9, "requests": 18})).starts
    # 3,000 tokens of the tail a landing re-reads anyway: 9 x 3,000 less, 204,000 carried suffice
    shared = FoldFacts(**{**vars(facts), "shared": 3_000})
    assert judge(shared).fixed == 153_000.0
    assert judge(FoldFacts(**{**vars(shared), "held": 204_000})).starts
    assert not judge(FoldFacts(**{**vars(shared), "held": 203_999})).starts


def test_a_span_s_turns_are_carried_for_their_tokens_times_the_requests_since_they_ended():
    host = host_with_turns()  # 3 steps a turn, the open turn 13 at its 1st
    prices = surface_prices(host.log)
    turn1 = [s for s in host.log.nodes if host.log.index.origins[s] == ("turn", 1)]
    assert sum(prices[s] for s in turn1) == 2_001
    assert carrying(host.log, prices, turn1) == (2_001 * (11 * 3 + 1), 0)
    # the tail from turn 12 on, while its rewrite is still to land: turn 12 and the open turn 13
    later = [s for s in host.log.nodes if host.log.index.origins[s][1] >= 12]
    assert shared_tail(host.log, prices, turn1, {12}) == sum(prices[s] for s in later) > 0
    assert shared_tail(host.log, prices, turn1, set()) == 0


def host_with_turns() -> FakeHost:
    b = work_session(RC8, TURNS, open_turn=True)
    host = FakeHost(RC8, b.events)
    host.host_append("request/context", {"contextWindow": WINDOW})
    host._forward()
    return host


def test_the_span_stops_before_the_first_turn_whose_compression_may_still_land():
    host = host_with_turns()
    prices = surface_prices(host.log)
    whole = background_span(host.log, prices, 2_000, set())
    cut = background_span(host.log, prices, 2_000, {5, 9})
    assert whole is not None and cut is not None
    turns = {host.log.index.origins[s][1] for s in cut.shadowed}
    assert turns == {1, 2, 3, 4} and cut.shadowed == whole.shadowed[:len(cut.shadowed)]
    assert background_span(host.log, prices, 2_000, {1}) is None


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


def scope_of(host: FakeHost, service: CompactionService) -> CompactionScope:
    return CompactionScope(host.session, host, CFG, AGENT, service.workers)


def test_a_fold_that_pays_runs_while_the_step_goes_on_and_lands_at_a_later_step():
    host = host_with_turns()
    service, meter = EngineHarness().compaction, Meter(host)
    gate = asyncio.Event()
    started = attach_workers(host, service, [WorkerScript(FOLD, gate=gate)])
    nodes, before = list(host.log.nodes), len(host.log)

    async def scenario() -> None:
        await asyncio.wait_for(service.pre_step(scope_of(host, service), OPEN, meter), 1)  # does not wait for it
        assert len(host.log) == before and [s["mode"] for s in started] == ["spawn"]
        assert "folding in the background" not in "".join(s["prompt"] for s in started)
        await service.pre_step(scope_of(host, service), OPEN, meter)  # still running: nothing lands
        assert len(host.log) == before
        gate.set()
        assert await service.folds.wait(host.session.id, 5)
        await service.pre_step(scope_of(host, service), OPEN, meter)

    run(scenario())
    (start,) = starts(host)
    tx = host.log.events[start["seq"]:]
    assert [e["type"] for e in tx] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    assert start["data"]["turn"] == OPEN and "error" not in tx[-1]["data"]
    assert host.log.nodes[0] == tx[2]["seq"] and "CKPT-ASSISTANT" in tx[2]["data"]["content"][0]["text"]
    kept = host.log.nodes[1:]
    assert kept == nodes[len(nodes) - len(kept):] and len(started) == 1
    assert {host.log.index.origins[s][1] for s in tx[1]["data"]["shadowedSeqs"]} == set(range(1, TURNS - 1))  # a 2,000-token tail keeps turns 11 and 12
    # a later fold re-reads the checkpoint whole: carried, not held
    prices = surface_prices(host.log)
    assert carrying(host.log, prices, host.log.nodes[:1]) == (0, prices[tx[2]["seq"]])


class InFlight:
    """The turn rewrites the service sees in flight (a test lands them by clearing the set)."""

    def __init__(self, turns: set[int]) -> None:
        self.turns = turns

    def busy_turns(self, session: Any) -> set[int]:
        return set(self.turns)

    def ready_within(self, session: Any, seqs: Any) -> dict[int, Any]:
        return {}

    def folded(self, session: Any, turns: Any, checkpoint_seq: int) -> None:
        pass


@pytest.mark.parametrize("lands", [True, False], ids=["it-lands", "it-never-lands"])
def test_a_ready_fold_commits_with_the_turn_rewrite_in_flight_or_at_the_latest_in_the_next_turn(lands):
    """One cache break instead of two: the checkpoint waits for the pre-step where the rewrite
    of turn 12 lands; a rewrite that never lands holds it only until the next turn."""
    host = host_with_turns()
    service, meter = EngineHarness().compaction, Meter(host)
    attach_workers(host, service, [WorkerScript(FOLD)])
    rewrites = InFlight({TURNS})
    scope = CompactionScope(host.session, host, CFG, AGENT, service.workers, turns=rewrites)  # type: ignore[arg-type]

    async def scenario() -> None:
        await service.pre_step(scope, OPEN, meter)
        assert await service.folds.wait(host.session.id, 5)
        await service.pre_step(scope, OPEN, meter)  # ready, but turn 12's rewrite is in flight
        assert starts(host) == []
        if lands:
            rewrites.turns.clear()  # it landed at this pre-step, before the compaction's turn
            await service.pre_step(scope, OPEN, meter)
        else:
            next_turn(host, OPEN)
            await service.pre_step(scope, OPEN + 1, meter)

    run(scenario())
    (start,) = starts(host)
    assert start["data"]["turn"] == (OPEN if lands else OPEN + 1)


def test_a_step_that_reaches_the_threshold_first_waits_for_the_fold_in_flight_and_starts_no_other():
    host = host_with_turns()
    service, meter = EngineHarness().compaction, Meter(host)
    gate = asyncio.Event()
    started = attach_workers(host, service, [WorkerScript(FOLD, gate=gate), WorkerScript(FOLD)])

    async def scenario() -> float:
        await service.pre_step(scope_of(host, service), OPEN, meter)
        grow(host, 4 * 60_000, OPEN)  # the open turn takes the session past 80,000 tokens
        asyncio.get_running_loop().call_later(0.3, gate.set)
        t0 = asyncio.get_running_loop().time()
        await service.pre_step(scope_of(host, service), OPEN, meter)
        return asyncio.get_running_loop().time() - t0

    waited = run(scenario())
    assert 0.25 < waited < 5
    assert len(starts(host)) == 1 and len(started) == 1  # the background fold's, and no pressure fold after it
    assert sum(surface_prices(host.log).values()) < 80_000


def test_a_fold_whose_history_changed_meanwhile_is_dropped_and_appends_nothing():
    host = host_with_turns()
    service, meter = EngineHarness().compaction, Meter(host)
    gate = asyncio.Event()
    attach_workers(host, service, [WorkerScript(FOLD, gate=gate)])

    async def scenario() -> None:
        await service.pre_step(scope_of(host, service), OPEN, meter)
        first_user = host.log.nodes[0]
        data = copy.deepcopy(host.log.events[first_user]["data"])
        data["id"] = "edited"
        host.host_append("user/message", data, surfaceOp=RC8.replace_op(first_user, first_user),
                         sourceEventSeqs=[first_user])
        host._forward()
        gate.set()
        await service.folds.wait(host.session.id, 5)
        before = len(host.log)
        await service.pre_step(scope_of(host, service), OPEN, meter)
        assert len(host.log) == before

    run(scenario())
    assert starts(host) == []
