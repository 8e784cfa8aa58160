"""Which memory tools a user agent's requests carry (`catalog.carried_tools`, the engine's
pre-step and request answers): none while nothing can be read back or handed off, all of
them, for good, from the request that first shows a rewrite (or reaches a hand-off milestone).
docs/decisions.md#the-memory-tools-join-the-request-that-first-needs-them."""

from __future__ import annotations

import asyncio

import pytest

from fake_host import SESSION, FakeHost
from surface_builders import base_log, compaction_plan, rewritten_tool_result
from test_rewrite_barrier import AGENT, OPEN, HostEngine, Workers, backlog_host, config, end_turns_and_open_the_next
from test_turn_continuation import open_long_turn, session_of
from turn_memory.bridge.protocol import PreStepParams, PreStepResult, RequestParams, SessionClosedParams
from turn_memory.catalog import carried_tools, public_tools
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.public_tools import PublicTools

ALL = ["read_session_history", "read_memory_image", "continue_after_turn_compression"]
TOOLS = PublicTools(public_tools())


def carried(events, turn: int, config: EngineConfig | None = None, dialect=RC8) -> list[str]:
    return carried_tools(FakeHost(dialect, events).session, turn, config or EngineConfig(), TOOLS)


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_a_session_with_nothing_rewritten_carries_none(dialect):
    events, _ = base_log(dialect, turns=3)
    assert carried(events, 4, dialect=dialect) == []


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_a_checkpoint_makes_the_history_readable_and_every_tool_joins(dialect):
    events, marks = base_log(dialect, turns=3)
    log = SessionLog(dialect, events)
    shadowed = [s for s in log.nodes if marks[0]["user"] <= s <= marks[1]["answer"]]
    events = events + compaction_plan(dialect, len(events), shadowed)
    assert carried(events, 4, dialect=dialect) == ALL


def test_a_rewritten_tool_result_is_a_rewrite_an_exact_copy_is_not():
    events, marks = base_log(RC8, turns=2)
    result = next(e for e in events if e["type"] == "tool/result")
    copy = rewritten_tool_result(result, len(events), RC8, text="")
    copy["data"] = result["data"]  # the same content: a copy, as a pending or no-op marker is
    assert SessionLog(RC8, [*events, copy]).index.rewritten is False
    pruned = rewritten_tool_result(result, len(events), RC8, text="[pruned]")
    assert SessionLog(RC8, [*events, pruned]).index.rewritten is True
    assert carried([*events, pruned], 3) == ALL


def test_a_long_open_turn_carries_them_from_its_first_reminder_milestone():
    # 1 user + "starting" + 2 per step: 28 nodes below the default milestone (30), 30 at it
    assert carried(open_long_turn(13).events, 1) == []
    assert carried(open_long_turn(14).events, 1) == ALL


def test_only_the_tools_this_config_offers():
    events, marks = base_log(RC8, turns=2)
    result = next(e for e in events if e["type"] == "tool/result")
    events = [*events, rewritten_tool_result(result, len(events), RC8)]
    no_continuation = EngineConfig.model_validate({"turnContinuation": {"enabled": False}})
    assert carried(events, 3, no_continuation) == ["read_session_history", "read_memory_image"]
    no_history = EngineConfig.model_validate({"sessionHistory": {"enabled": False}})
    assert carried(events, 3, no_history) == ["read_memory_image", "continue_after_turn_compression"]
    # the hand-off alone: a long turn with the continuation off asks for nothing
    assert carried(open_long_turn(14).events, 1, no_continuation) == []


def _pre_step(engine: HostEngine, turn: int, step: int) -> PreStepResult:
    params = PreStepParams(sessionId=engine.host.session.id, logLength=len(engine.host.log), turn=turn, step=step,
                           agentOptions=AGENT)
    return engine._pre_step(engine.host.session, params, engine.config)  # type: ignore[return-value]


def test_the_engine_names_them_in_the_pre_step_that_lands_the_first_compressed_turn_and_in_every_later_one():
    host = backlog_host(pressure=False)
    engine = HostEngine(host, config())
    Workers(host, engine)

    async def scenario() -> list[list[str]]:
        before = await _pre_step(engine, OPEN, 1)  # nothing compressed, nothing queued yet
        end_turns_and_open_the_next(host, engine)
        assert await engine.turns.drained(host.session.id, 5)
        landing = await _pre_step(engine, OPEN, 2)  # lands turns 1-3 (rc8: in this pre-step)
        later = await _pre_step(engine, OPEN, 3)
        return [before.tools, landing.tools, later.tools]

    before, landing, later = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert before == [] and landing == ALL and later == ALL


def test_once_named_the_engine_keeps_naming_them_and_forgets_only_a_closed_session():
    events = open_long_turn(14).events
    host = session_of(events)
    engine = HostEngine(host, EngineConfig.model_validate({"compaction": {"auto": False}}))

    async def answers() -> tuple[list[str], list[str]]:
        first = await _pre_step(engine, 1, 16)
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        host.host_append("turn/start", {"turn": 2})
        host._forward()
        # the new turn is short and nothing was rewritten: the tools stay all the same
        return first.tools, (await _pre_step(engine, 2, 1)).tools

    assert asyncio.run(asyncio.wait_for(answers(), 10)) == (ALL, ALL)
    engine._session_closed(None, SessionClosedParams(sessionId=SESSION), None)  # type: ignore[arg-type]
    assert SESSION not in engine._carrying


def test_a_landing_deferred_to_the_request_names_them_in_the_request_answer():
    host = backlog_host(pressure=False)
    engine = HostEngine(host, config())
    Workers(host, engine)

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        assert await engine.turns.drained(host.session.id, 5)
        # rc8 lands in the pre-step; the request answer of a step (0.2's deferred landing) says the same
        host.host_append("step/start", {"turn": OPEN, "step": 1})
        host._forward()
        return await engine._at_request(RequestParams(sessionId=host.session.id, logLength=len(host.log),
                                                      turn=OPEN, step=1))

    answer = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert answer.tools == ALL
