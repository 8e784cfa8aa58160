"""Automatic session compaction (CompactionService) against the in-memory host: pressure in the
pre-step, the token meter and its fallback, the retry floor, and one-shot overflow recovery."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest

from engine_harness import EngineHarness
from fake_host import FakeHost, WorkerScript, attach_workers
from session_builders import work_session
from surface_builders import assistant_message
from turn_memory.compaction.scope import CompactionScope
from turn_memory.bridge.protocol import AgentOptions, MeasureResult, MeteredNode
from turn_memory.compaction.policy import RETRY_GROWTH, Pressure, surface_prices
from turn_memory.compaction.service import CompactionService
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8
from turn_memory.host.tokens import estimate_message, estimate_header

AGENT = AgentOptions(provider="deepseek-official", model="deepseek-v4-flash")
TURNS = 6
OPEN = TURNS + 1
FOLD = [("replace_session_memory", {"expected_revision": 0, "from": "P1", "nodes": [
    {"role": "user", "content": "CKPT-USER: fix the modules one by one."},
    {"role": "assistant", "content": "CKPT-ASSISTANT: parser, lexer, codegen fixed; all tests pass."}]}),
    ("finish_session_segment", {})]


class Meter:
    """DSH's token meter as the shim reports it: the host's surface priced node by node."""

    def __init__(self, host: FakeHost, *, extra: int = 0, error: str | None = None, raises: bool = False):
        self.host, self.extra, self.error, self.raises = host, extra, error, raises
        self.calls = 0

    async def __call__(self, session_id: str) -> MeasureResult:
        self.calls += 1
        if self.raises:
            raise RuntimeError("meter crashed")
        if self.error is not None:
            return MeasureResult(error=self.error)
        prices = surface_prices(self.host.log)
        return MeasureResult(totalTokens=sum(prices.values()) + self.extra,
                             nodes=[MeteredNode(seq=s, tokens=t) for s, t in prices.items()])


def config(**compaction: Any) -> EngineConfig:
    return EngineConfig.model_validate({"compaction": compaction})


def window_for(threshold: int, ratio: float = 0.8) -> int:
    """A context window whose threshold is exactly `threshold` tokens."""
    window = math.ceil(threshold / ratio)
    while int(window * ratio) > threshold:
        window -= 1
    assert Pressure(threshold, window, ratio).threshold == threshold
    return window


def open_turn_host(threshold_offset: int = 0, ratio: float = 0.8, **kw: Any) -> tuple[FakeHost, int]:
    """TURNS completed turns and an open one; the window puts the threshold `offset` tokens above the surface."""
    b = work_session(RC8, TURNS, open_turn=True, **kw)
    host = FakeHost(RC8, b.events)
    host.turn_of = b.turn_of  # type: ignore[attr-defined]
    total = sum(surface_prices(host.log).values())
    window = window_for(total + threshold_offset, ratio)
    host.host_append("request/context", {"contextWindow": window})
    host._forward()
    return host, window


def grow(host: FakeHost, chars: int, turn: int = OPEN) -> int:
    """The open turn's agent writes an answer of `chars` characters; returns its price."""
    message = assistant_message("x" * chars)
    host.host_append("assistant/message", RC8.assistant_data(turn, 1, message), surfaceOp="append")
    host._forward()
    return estimate_message(message)


def pre_step(service: CompactionService, host: FakeHost, cfg: EngineConfig, meter: Meter, turn: int = OPEN) -> None:
    asyncio.run(asyncio.wait_for(service.pre_step(CompactionScope(host.session, host, cfg, AGENT, service.workers), turn, meter), 10))


def starts(host: FakeHost) -> list[dict[str, Any]]:
    return [e for e in host.log.events if e["type"] == "compaction/start"]


def test_below_the_threshold_nothing_happens_and_the_cheap_estimate_skips_the_meter():
    host, window = open_turn_host(threshold_offset=4000)
    service, meter, cfg = EngineHarness().compaction, Meter(host), config()
    started = attach_workers(host, service, [])
    before = len(host.log)
    pre_step(service, host, cfg, meter)
    assert meter.calls == 1 and len(host.log) == before
    grow(host, 400)  # ~100 tokens: clearly below 90% of the threshold
    pre_step(service, host, cfg, meter)
    assert meter.calls == 1  # last measure + appended since: no full pass
    grow(host, 4 * 3000)  # now within 10% of the threshold, still below it: measured, not compacted
    pre_step(service, host, cfg, meter)
    assert meter.calls == 2 and starts(host) == [] and started == []


def test_at_the_threshold_the_open_turn_compacts_keeping_the_retained_tail():
    host, window = open_turn_host(threshold_offset=0)
    service, meter, cfg = EngineHarness().compaction, Meter(host), config()
    started = attach_workers(host, service, [WorkerScript(FOLD)])
    nodes = list(host.log.nodes)
    pre_step(service, host, cfg, meter)

    (start,) = starts(host)
    assert start["data"]["turn"] == OPEN  # owned by the open turn
    tx = host.log.events[start["seq"]:]
    assert [e["type"] for e in tx] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    assert "error" not in tx[-1]["data"] and [s["mode"] for s in started] == ["spawn"]
    checkpoint = tx[2]["seq"]
    assert host.log.nodes[0] == checkpoint
    kept = host.log.nodes[1:]
    assert kept == nodes[len(nodes) - len(kept):]  # the tail is untouched, verbatim
    prices = surface_prices(host.log)
    assert sum(prices[s] for s in kept) >= int(window * cfg.compaction.retainRatio)
    assert "CKPT-ASSISTANT" in host.log.message_of(checkpoint)["content"][0]["text"]
    assert meter.calls == 2  # measured again after the pass: now under, no second pass
    assert not Pressure(sum(prices.values()), window, 0.8).over


def test_one_token_under_the_threshold_is_not_compacted():
    host, _ = open_turn_host(threshold_offset=1)
    service = EngineHarness().compaction
    attach_workers(host, service, [WorkerScript(FOLD)])
    pre_step(service, host, config(), Meter(host))
    assert starts(host) == []


def land_an_assistant_node(host: FakeHost, turn: int = 1) -> int:
    """A turn-memory landing of `turn`'s answer, inside the open turn's landing step (rc8);
    returns the seq of the landed assistant/message."""
    answer = host.log.index.turn_nodes(turn)[-1]
    host.host_append("step/start", {"turn": OPEN, "step": 0})
    landed = host.host_append("assistant/message", RC8.assistant_data(OPEN, 0, assistant_message("Fixed it.")),
                              surfaceOp=RC8.replace_op(answer, answer), sourceEventSeqs=[answer])
    host.host_append("step/end", {"turn": OPEN, "step": 0})
    # the landing shrank the surface: the routed window still puts the threshold right at it
    host.host_append("request/context", {"contextWindow": window_for(sum(surface_prices(host.log).values()))})
    host._forward()
    return landed["seq"]


def no_matching_step(seq: int) -> str:
    return f"token meter: assistant/message at seq {seq} has no matching step/start event"


def test_when_the_meter_refuses_a_landed_assistant_node_the_canonical_surface_is_priced():
    host, window = open_turn_host(threshold_offset=0)
    refused = no_matching_step(land_an_assistant_node(host))
    service = EngineHarness().compaction
    expected = sum(estimate_message(m) for m in host.log.surface_messages())
    measured = asyncio.run(service.measure(host.session, Meter(host, error=refused)))
    assert (measured.tokens, measured.source) == (expected, "surface")
    assert measured.nodes == {s: estimate_message(host.log.message_of(s)) for s in host.log.nodes}
    metered = asyncio.run(service.measure(host.session, Meter(host, extra=77)))
    assert (metered.tokens, metered.source) == (expected + 77, "meter")
    # the fallback is enough to act on: at the threshold, the pre-step compacts
    attach_workers(host, service, [WorkerScript(FOLD)])
    pre_step(service, host, config(), Meter(host, error=refused))
    assert len(starts(host)) == 1 and "error" not in host.log.events[-1]["data"]


def test_any_other_meter_failure_is_not_papered_over_by_the_fallback():
    """The canonical-surface price stands in only for the meter's refusal of a node a
    turn-memory landing wrote; any other failure means no pressure decision this step."""
    host, _ = open_turn_host(threshold_offset=0)
    model_node = host.log.index.turn_nodes(1)[-1]  # the agent's own answer: the meter should know its step
    service = EngineHarness().compaction
    attach_workers(host, service, [WorkerScript(FOLD)])
    for meter in (Meter(host, error="cannot price this session"), Meter(host, raises=True),
                  Meter(host, error=no_matching_step(model_node)), Meter(host, error=no_matching_step(10**6))):
        assert asyncio.run(service.measure(host.session, meter)) is None
        pre_step(service, host, config(), meter)
        assert starts(host) == []  # at the threshold, yet nothing compacts on a guess


def test_the_fallback_also_prices_the_request_envelope():
    host, _ = open_turn_host(threshold_offset=0)
    refused = no_matching_step(land_an_assistant_node(host))
    plain = asyncio.run(EngineHarness().compaction.measure(host.session, Meter(host, error=refused)))
    system = "You are a careful coding agent. " * 100
    tools = [{"name": "bash", "description": "run a command " * 20, "parameters": {"type": "object"}}]
    host.host_append("request/header", {"header": {"config": {"provider": "p", "model": "m"},
                                                   "system": system, "tools": tools}})
    host._forward()
    enveloped = asyncio.run(EngineHarness().compaction.measure(host.session, Meter(host, error=refused)))
    # the system prompt and the tool schemas are part of every request, at ~4 characters a token
    assert enveloped.tokens - plain.tokens >= len(system) // 4 + len(json.dumps(tools, separators=(",", ":"))) // 4


def test_after_a_failed_job_no_retry_until_the_session_grew_by_the_retry_share():
    host, window = open_turn_host(threshold_offset=0)
    service, meter, cfg = EngineHarness().compaction, Meter(host), config(workerAttempts=1)
    failing = WorkerScript([("read_session_memory", {})])
    started = attach_workers(host, service, [failing])
    nodes = list(host.log.nodes)
    pre_step(service, host, cfg, meter)
    (first,) = starts(host)
    end = host.log.events[-1]
    assert end["type"] == "compaction/end" and "no progress" in end["data"]["error"]
    assert host.log.nodes == nodes and len(started) == 1

    # same size, then growth below RETRY_GROWTH of the window: still over, but no new job
    pre_step(service, host, cfg, meter)
    grown = 0
    while grown + 300 < RETRY_GROWTH * window - 300:
        grown += grow(host, 1200)
        pre_step(service, host, cfg, meter)
    assert len(starts(host)) == 1 and len(started) == 1
    # real growth: it tries again (and this time the worker succeeds)
    attach_workers(host, service, [WorkerScript(FOLD)])
    grow(host, 4 * int(RETRY_GROWTH * window))
    pre_step(service, host, cfg, meter)
    assert len(starts(host)) == 2 and "error" not in host.log.events[-1]["data"]


def test_passes_that_stay_over_the_threshold_stop_and_wait_for_growth():
    host, window = open_turn_host(threshold_offset=0)
    service, cfg = EngineHarness().compaction, config(maxPasses=1)
    meter = Meter(host, extra=10 * window)  # e.g. a huge request envelope: never under the threshold
    scripts = [WorkerScript(FOLD), WorkerScript(FOLD)]
    attach_workers(host, service, scripts)
    pre_step(service, host, cfg, meter)
    assert len(starts(host)) == 1 and meter.calls == 2  # one pass, then the final measure
    pre_step(service, host, cfg, meter)
    pre_step(service, host, cfg, meter)
    assert len(starts(host)) == 1 and len(scripts) == 1  # no compaction on every step


def next_turn(host: FakeHost, turn: int) -> None:
    """`turn` answers and ends; the next turn opens with the user's request."""
    grow(host, 200, turn)
    host.host_append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    host.host_append("turn/start", {"turn": turn + 1})
    host.host_append("user/message", {"id": f"u{turn + 1}", "role": "user", "source": {"kind": "user"},
                                      "content": [{"type": "text", "text": "and now the printer"}]}, surfaceOp="append")
    host._forward()


def test_staying_over_after_the_passes_waits_for_growth_even_in_later_turns():
    host, window = open_turn_host(threshold_offset=0)
    service, cfg = EngineHarness().compaction, config(maxPasses=1, retainRatio=0)
    meter = Meter(host, extra=10 * window)
    scripts = [WorkerScript(FOLD), WorkerScript(FOLD)]
    attach_workers(host, service, scripts)
    pre_step(service, host, cfg, meter)
    assert len(starts(host)) == 1
    next_turn(host, OPEN)  # turn OPEN is now a closed unit that could be folded with the checkpoint
    pre_step(service, host, cfg, meter, turn=OPEN + 1)
    assert len(starts(host)) == 1 and len(scripts) == 1  # it grew by far less than RETRY_GROWTH


def test_nothing_compactable_outside_the_tail_waits_for_growth_too():
    host, _ = open_turn_host(threshold_offset=0)
    prices = surface_prices(host.log)
    # retain all but the first turn, plus one token: nothing can be folded yet
    first_turn = [s for s in host.log.nodes if host.turn_of[s] == 1]  # type: ignore[attr-defined]
    retain = sum(prices.values()) - sum(prices[s] for s in first_turn) + 1
    window = 2 * retain
    host.host_append("request/context", {"contextWindow": window})
    host._forward()
    service, cfg = EngineHarness().compaction, config(retainRatio=0.5)
    meter = Meter(host, extra=10 * window)
    started = attach_workers(host, service, [WorkerScript(FOLD)])
    pre_step(service, host, cfg, meter)
    assert starts(host) == []
    grow(host, 40)  # now turn 1 could go, but the session grew by far less than RETRY_GROWTH
    pre_step(service, host, cfg, meter)
    assert starts(host) == [] and started == []


def test_auto_off_or_another_turn_never_compacts():
    host, _ = open_turn_host(threshold_offset=0)
    service, meter = EngineHarness().compaction, Meter(host)
    started = attach_workers(host, service, [WorkerScript(FOLD)])
    pre_step(service, host, config(auto=False), meter)
    assert meter.calls == 0
    pre_step(service, host, config(), meter, turn=OPEN - 1)  # a stale hook for a finished turn
    assert starts(host) == [] and started == []


def test_no_window_yet_means_nothing_to_measure_against():
    host = FakeHost(RC8, work_session(RC8, TURNS, open_turn=True).events)
    meter = Meter(host)
    pre_step(EngineHarness().compaction, host, config(), meter)
    assert meter.calls == 0 and starts(host) == []


def test_overflow_compacts_and_replays_once_per_turn():
    host, _ = open_turn_host(threshold_offset=10**6)  # far below pressure: overflow ignores the threshold
    service, cfg = EngineHarness().compaction, config()
    scripts = [WorkerScript(FOLD), WorkerScript(FOLD)]
    started = attach_workers(host, service, scripts)
    open_nodes = host.log.nodes[-1:]  # the open turn so far: its user request

    def overflow(turn: int = OPEN) -> bool:
        return asyncio.run(asyncio.wait_for(service.overflow(CompactionScope(host.session, host, cfg, AGENT, service.workers), turn), 10))

    assert overflow() is True
    (start,) = starts(host)
    assert start["data"]["turn"] == OPEN
    assert host.log.nodes[1:] == open_nodes  # everything but the open turn was folded
    before = len(host.log)
    assert overflow() is False  # a second overflow in the same turn keeps the provider error
    assert len(host.log) == before and len(started) == 1


def test_overflow_that_cannot_change_the_surface_is_not_replayed_nor_retried_in_the_turn():
    host, _ = open_turn_host(threshold_offset=10**6)
    service, cfg = EngineHarness().compaction, config(workerAttempts=1)
    started = attach_workers(host, service, [WorkerScript([]), WorkerScript(FOLD)])
    nodes = list(host.log.nodes)
    assert asyncio.run(service.overflow(CompactionScope(host.session, host, cfg, AGENT, service.workers), OPEN)) is False
    assert host.log.nodes == nodes and "error" in host.log.events[-1]["data"]
    # the turn's one recovery is spent: a second overflow does not try again
    assert asyncio.run(service.overflow(CompactionScope(host.session, host, cfg, AGENT, service.workers), OPEN)) is False
    assert len(starts(host)) == 1 and len(started) == 1
    # the next turn has its own
    host.host_append("turn/end", {"turn": OPEN, "reason": {"kind": "completed"}})
    host.host_append("turn/start", {"turn": OPEN + 1})
    host._forward()
    assert asyncio.run(service.overflow(CompactionScope(host.session, host, cfg, AGENT, service.workers), OPEN + 1)) is True
    assert len(starts(host)) == 2 and starts(host)[1]["data"]["turn"] == OPEN + 1


@pytest.mark.parametrize("locked", [False, True])
def test_overflow_with_nothing_to_compact_or_a_busy_session_is_not_replayed(locked):
    host = FakeHost(RC8, work_session(RC8, 0, open_turn=True).events)
    service = EngineHarness().compaction

    async def scenario() -> bool:
        if locked:
            async with host.session.job_lock:
                return await service.overflow(CompactionScope(host.session, host, config(), AGENT, service.workers), 1)
        return await service.overflow(CompactionScope(host.session, host, config(), AGENT, service.workers), 1)

    assert asyncio.run(scenario()) is False and starts(host) == []


def test_an_unexpected_failure_still_closes_the_compaction_so_compact_is_not_busy_for_good(monkeypatch):
    """An exception outside the expected ones used to escape with compaction/start still open
    (owned by the turn), after which every /compact answered busy."""
    from turn_memory.compaction import fold
    from turn_memory.compaction.manual import compact_now

    host, _ = open_turn_host(threshold_offset=0)
    service = EngineHarness().compaction
    attach_workers(host, service, [WorkerScript(FOLD)])

    async def broken(*args, **kwargs):
        raise KeyError("a bug")

    real = fold.produce_checkpoint
    monkeypatch.setattr(fold, "produce_checkpoint", broken)
    pre_step(service, host, config(), Meter(host))  # the step goes on
    (start,) = starts(host)
    end = host.log.events[-1]
    assert end["type"] == "compaction/end" and end["data"]["compactionId"] == start["data"]["compactionId"]
    assert "internal error" in end["data"]["error"] and "a bug" in end["data"]["error"]
    # the turn ends; /compact now runs
    monkeypatch.setattr(fold, "produce_checkpoint", real)
    host.host_append("turn/end", {"turn": OPEN, "reason": {"kind": "completed"}})
    host._forward()
    attach_workers(host, service, [WorkerScript(FOLD)])
    result = asyncio.run(compact_now(CompactionScope(host.session, host, config(), AGENT, service.workers), "cmd"))
    assert result is not None and "error" not in host.log.events[-1]["data"]


def test_an_automatic_compaction_left_open_is_closed_by_the_next_compaction():
    """A compaction/start of an earlier turn that nobody closed (its engine died mid-job) no
    longer makes /compact busy: no compaction of this engine runs, so it is abandoned."""
    from turn_memory.compaction.manual import compact_now

    host, _ = open_turn_host(threshold_offset=0)
    host.host_append("compaction/start", {"compactionId": "old", "turn": OPEN})
    host.host_append("turn/end", {"turn": OPEN, "reason": {"kind": "completed"}})
    host._forward()
    service = EngineHarness().compaction
    attach_workers(host, service, [WorkerScript(FOLD)])
    result = asyncio.run(compact_now(CompactionScope(host.session, host, config(), AGENT, service.workers), "cmd"))
    ends = [e["data"] for e in host.log.events if e["type"] == "compaction/end"]
    assert ends[0]["compactionId"] == "old" and "abandoned" in ends[0]["error"]
    assert result is not None and ends[1]["compactionId"] == result.compactionId and "error" not in ends[1]


def test_the_request_envelope_is_priced_as_the_meter_prices_it():
    """DSH's meter rounds the system prompt and the tool list up (`Math.ceil`), and prices an
    empty system prompt at its overhead; the engine's fallback pricing agrees to the token."""
    assert estimate_header({"system": "abcde", "tools": [{"n": "x"}]}) == (2 + 4) + (3 + 4)  # 5 and 11 characters
    assert estimate_header({"system": ""}) == 4
    assert estimate_header({"tools": []}) == 0
