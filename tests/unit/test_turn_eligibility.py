"""Which completed turns get a worker (turns/eligibility.py), as the user sees it: a small turn
costs no model request and its context stays byte-for-byte what it was; a big one is compressed."""

from __future__ import annotations

import asyncio

import pytest

from engine_harness import EngineHarness
from fake_host import SESSION, WorkerScript, attach_workers
from test_turn_jobs import FINISH, complete_turn, next_turn_prestep, one_turn_host
from turn_builders import Shape
from turn_memory.config import EngineConfig, TurnConfig
from turn_memory.host.markers import marker_of
from turn_memory.host.tokens import estimate_message
from turn_memory.turns import eligibility
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turn_nodes

#: ten tool calls over two steps: about a thousand tokens, as DSH's meter counts them
BIG = Shape(steps=[(5, True, False), (5, False, False), (0, False, False)])


def fold_all(host) -> tuple[str, dict]:
    nodes = turn_nodes(host.log, 1)
    return ("replace_turn_nodes", {"from": "n1", "to": f"n{len(nodes)}", "nodes": [
        {"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "Fixed parse()."}]})


def surface_messages(host) -> list:
    """What the model is sent of the session: the surface nodes' roles and contents."""
    return [(m["role"], m["content"]) for s in host.log.nodes if (m := host.log.message_of(s)) is not None]


def run_turn(host, cfg: EngineConfig, scripts: list[WorkerScript]):
    service = EngineHarness().turns
    started = attach_workers(host, service, scripts)

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)
        await service.drained(SESSION, 5)  # ready (or nothing to do); a ready turn lands at the next pre-step
        await next_turn_prestep(host, service, cfg)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    return started


def test_a_small_turn_gets_the_no_op_marker_and_no_worker_and_the_context_is_unchanged():
    host = one_turn_host()
    tokens = host.log.tokens(turn_nodes(host.log, 1))
    assert 0 < tokens < TurnConfig().minTurnTokens  # the default skips it
    before = surface_messages(host)
    started = run_turn(host, EngineConfig(), [WorkerScript([FINISH])])
    assert started == []  # no model request at all
    markers = [(marker_of(e), e["data"]["source"].get("workers")) for e in host.log.events if marker_of(e)]
    assert markers == [(("compression", 1), 0)]  # seen and recorded, never pending, never retried
    assert surface_messages(host)[:len(before)] == before


def test_a_big_turn_is_compressed_with_the_default_policy():
    host = one_turn_host(shape=BIG)
    tokens = host.log.tokens(turn_nodes(host.log, 1))
    assert tokens >= TurnConfig().minTurnTokens
    started = run_turn(host, EngineConfig(), [WorkerScript([fold_all(host), FINISH])])
    assert [s["mode"] for s in started] == ["fork"]
    nodes = turn_nodes(host.log, 1)
    assert [host.log.message_of(s)["role"] for s in nodes] == ["user", "assistant"]
    assert marker_of(host.log.events[nodes[0]]) == ("compression", 1)


@pytest.mark.parametrize("minimum,workers", [(0, 1), (10**6, 0)])
def test_the_threshold_is_configurable(minimum, workers):
    host = one_turn_host(shape=BIG)
    cfg = EngineConfig.model_validate({"turns": {"minTurnTokens": minimum}})
    started = run_turn(host, cfg, [WorkerScript([fold_all(host), FINISH])])
    assert len(started) == workers


def test_decide_counts_dshs_token_estimate_and_never_rewrites_a_turn_the_model_said_nothing_in():
    host = one_turn_host(shape=BIG)
    positions = turn_nodes(host.log, 1)
    originals = original_nodes(host.log, positions)
    messages = [host.log.message_of(s) for s in positions]
    expected = sum(estimate_message(m) for m in messages)
    verdict = eligibility.decide(originals, host.log.tokens(positions), TurnConfig(minTurnTokens=expected))
    assert verdict.eligible and verdict.tokens == expected
    below = eligibility.decide(originals, expected, TurnConfig(minTurnTokens=expected + 1))
    assert not below.eligible and "minTurnTokens" in below.reason
    silent = [o for o in originals if o.role != "assistant"]
    assert eligibility.decide(silent, expected, TurnConfig(minTurnTokens=0)).reason == "no assistant transcript"


def test_a_handoff_turn_gets_a_worker_whatever_its_size_but_never_one_the_model_said_nothing_in():
    """A hand-off asked for its turn's compression, and its follow-up only runs on the compressed turn."""
    host = one_turn_host()
    positions = turn_nodes(host.log, 1)
    originals = original_nodes(host.log, positions)
    tokens = host.log.tokens(positions)
    assert not eligibility.decide(originals, tokens, TurnConfig()).eligible  # small: no worker
    assert eligibility.decide(originals, tokens, TurnConfig(), handoff=True).eligible
    silent = [o for o in originals if o.role != "assistant"]
    assert eligibility.decide(silent, tokens, TurnConfig(), handoff=True).reason == "no assistant transcript"
