"""Which completed turns get a worker, and when (turns/eligibility.py), as the user sees it: a
turn not worth a worker yet costs no model request, keeps its context byte for byte and says
it is pending (held); held turns are compressed together once they are worth one; a turn the
model said nothing in gets the no-op marker. The policy's arithmetic is pinned with exact values."""

from __future__ import annotations

import asyncio
import time
import json

import pytest

from engine_harness import EngineHarness
from fake_host import SESSION, FakeHost, WorkerScript, attach_workers
from surface_builders import LogBuilder
from test_inspect import write_plain
from test_turn_jobs import FINISH, complete_turn, next_turn_prestep, one_turn_host
from turn_builders import Shape, add_turn
from turn_memory.config import EngineConfig, TurnConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.inspection.report import inspect_log
from turn_memory.turns import eligibility as E
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turn_nodes, turns_to_recover

#: ten tool calls over two steps: about a thousand tokens, as DSH's meter counts them
BIG = Shape(steps=[(5, True, False), (5, False, False), (0, False, False)])
#: one call with raw reasoning, then the answer: a few hundred tokens
SMALL = Shape()


# -- the policy's arithmetic (pure) -----------------------------------------------------------

def facts(requests: int, surface: int = 12_000, **more) -> E.SessionFacts:
    return E.SessionFacts(agent_requests=requests, surface_tokens=surface, **more)


def test_the_value_policy_prices_a_worker_against_what_it_saves_over_the_requests_to_come():
    turn = [E.TurnFacts(5, 5000)]
    # saving: (1 - 0.3) x 5000 x 30 = 105,000; cost: 10 x (5000 + 400) + 2000 (the worker's own
    # prompt, cached) + 0.3 x 5000 x (15 + 9) = 54,000 + 2000 + 36,000 = 92,000
    assert E.price(5000, facts(30)) == pytest.approx((105_000, 92_000))
    worth = E.choose(turn, facts(30), TurnConfig())
    assert worth.dispatch == (5,) and (worth.saving, worth.cost) == pytest.approx((105_000, 92_000))
    assert worth.reason == ("turn 5 (5000 tokens): saves ~105,000 over the 30 requests the session is expected to "
                            "make yet, costs ~92,000 (cached-token units)")
    # four requests fewer so far: the session is expected to be shorter, the same worker does not pay
    held = E.choose(turn, facts(26), TurnConfig())
    assert held.dispatch == () and held.reason.startswith("turn 5 (5000 tokens) held: saves ~91,000")


def test_a_tool_using_session_counts_the_horizon_prior_and_a_chat_does_not():
    """Issue 29: `turns.horizonRequests` adds to the Lindy estimate once the session used a tool."""
    turn = [E.TurnFacts(1, 5000)]
    config = TurnConfig(horizonRequests=20)
    # an agent after its first turn of 10 requests: 0.7 x 5000 x (10 + 20) = 105,000 >= 92,000
    early = E.choose(turn, facts(10, agentic=True), config)
    assert early.dispatch == (1,) and "over the 30 requests the session is expected to make yet" in early.reason
    # the same turn in a session that never called a tool: 0.7 x 5000 x 10 = 35,000
    assert E.choose(turn, facts(10), config).dispatch == ()
    assert E.choose(turn, facts(10, agentic=True), TurnConfig()).dispatch == ()  # the default adds nothing


def test_a_tool_using_session_is_expected_to_go_on_for_more_turns_as_long_as_its_turns_so_far():
    """Issue 28: `turns.horizonTurns` (5): a coding session's first turn no longer waits for the
    session to have made the requests that pay its worker; a session of one-call turns still does."""
    turn = [E.TurnFacts(1, 6900)]
    # one turn of 9 requests: 5 more like it, 45 requests: 0.7 x 6900 x 45 = 217,350 against
    # 10 x 7300 + 2000 + 0.3 x 6900 x 24 = 124,680
    coding = E.choose(turn, facts(9, agentic=True, completed_turns=1), TurnConfig())
    assert coding.dispatch == (1,) and "saves ~217,350 over the 45 requests" in coding.reason
    # the Lindy estimate alone (9 requests), and a session that never used a tool
    assert E.choose(turn, facts(9, agentic=True, completed_turns=1), TurnConfig(horizonTurns=0)).dispatch == ()
    assert "over the 9 requests" in E.choose(turn, facts(9, completed_turns=1), TurnConfig()).reason
    # six one-call turns (12 requests): max(12, 12 x 5 / 6) = 12: 0.7 x 1500 x 12 = 12,600 < 31,800
    short = E.choose([E.TurnFacts(6, 1500)], facts(12, agentic=True, completed_turns=6), TurnConfig())
    assert short.dispatch == () and short.reason.startswith("turn 6 (1500 tokens) held: saves ~12,600 over the 12 ")


def test_what_the_sessions_rewrites_kept_and_its_history_move_the_price():
    # rewrites that kept 10%: 0.9 x 5000 x 28 = 126,000 against 54,000 + 2000 + 12,000 = 68,000
    assert E.price(5000, facts(28, keep_ratio=0.1)) == pytest.approx((126_000, 68_000))
    assert E.choose([E.TurnFacts(5, 5000)], facts(28, keep_ratio=0.1), TurnConfig()).dispatch == (5,)
    # a fork (`turns.workerStart=fork`) also reads the 47,000 tokens of history before the turn, cached:
    # 54,000 + 49,000 + 36,000; a spawn's task carries only the turn
    assert E.price(5000, facts(30, surface=52_000), fork=True) == pytest.approx((105_000, 139_000))
    assert E.choose([E.TurnFacts(5, 5000)], facts(30, surface=52_000), TurnConfig(workerStart="fork")).dispatch == ()
    assert E.choose([E.TurnFacts(5, 5000)], facts(30, surface=52_000), TurnConfig()).dispatch == (5,)


def test_where_assistants_are_kept_only_the_rest_of_the_turn_is_priced_as_saved():
    # 5000 tokens, 4000 of them assistant nodes no worker may rewrite (0.2's default): saving
    # 0.7 x 1000 x 30 = 21,000; cost 10 x 5400 + 2000 + 0.3 x 1000 x 24 = 63,200: a chat-like turn is held
    assert E.price(5000, facts(30), fixed=4000) == pytest.approx((21_000, 63_200))
    held = E.choose([E.TurnFacts(5, 5000, fixed=4000)], facts(30), TurnConfig())
    assert held.dispatch == () and held.reason.startswith("turn 5 (5000 tokens) held: saves ~21,000")
    # the same turn with its bulk in tool results (500 fixed) pays, as above
    assert E.choose([E.TurnFacts(5, 5000, fixed=500)], facts(40), TurnConfig()).dispatch == (5,)


def test_held_turns_share_one_worker_and_a_batch_over_the_cap_is_priced_as_two_jobs():
    turns = [E.TurnFacts(t, 1000) for t in range(1, 7)]
    # 6000 tokens, two jobs of at most 4 turns: 10 x (6000 + 800) + 2 x 2000 + 0.3 x 6000 x 24
    assert E.price(6000, facts(40, surface=20_000), jobs=2) == pytest.approx((168_000, 115_200))
    choice = E.choose(turns, facts(40, surface=20_000), TurnConfig())
    assert choice.dispatch == (1, 2, 3, 4, 5, 6) and choice.cost == pytest.approx(115_200)


def test_a_worker_takes_several_turns_only_while_they_are_small_together():
    cfg = TurnConfig(batchTurns=4, batchTokens=4000)
    assert E.batches([500, 800, 1200, 900, 700, 300], cfg) == [4, 2]  # at most four turns
    assert E.batches([9000, 300, 3600, 100, 50], cfg) == [1, 3, 1]  # a big turn gets a worker of its own
    assert E.batches([1000] * 3, TurnConfig(batchTurns=1)) == [1, 1, 1]


def test_small_turns_are_held_until_they_reach_the_minimum_together():
    small = [E.TurnFacts(1, 300)]
    assert E.choose(small, facts(10**6), TurnConfig()).reason == \
        "turn 1 (300 tokens) held: below turns.minTurnTokens (600) together"
    two = small + [E.TurnFacts(2, 350)]
    assert E.choose(two, facts(10**6), TurnConfig()).dispatch == (1, 2)  # priced: worth it in a long session
    assert E.choose(two, facts(10), TurnConfig(policy="size")).dispatch == (1, 2)  # size: 650 >= 600 is enough
    assert E.choose(two, facts(10), TurnConfig()).dispatch == ()  # value: ten requests so far do not pay for it
    assert E.choose(small, facts(1), TurnConfig(minTurnTokens=0)).dispatch == (1,)  # 0: every turn, at once


def test_a_window_past_half_of_the_compaction_threshold_or_a_hand_off_dispatches_whatever_the_price():
    turn = [E.TurnFacts(3, 5000)]
    assert E.choose(turn, facts(2, surface=49_999, threshold_tokens=100_000), TurnConfig()).dispatch == ()
    choice = E.choose(turn, facts(2, surface=50_000, threshold_tokens=100_000), TurnConfig())
    assert choice.dispatch == (3,) and "past half of the compaction threshold (100000)" in choice.reason
    handoff = E.choose([E.TurnFacts(1, 40, handoff=True)], facts(1), TurnConfig())
    assert handoff.dispatch == (1,) and "hand-off" in handoff.reason


def test_a_turn_the_model_said_nothing_in_can_never_be_rewritten():
    host = one_turn_host(shape=BIG)
    originals = original_nodes(host.log, turn_nodes(host.log, 1))
    assert E.transcript_problem(originals) is None
    assert E.transcript_problem([o for o in originals if o.role != "assistant"]) == "no assistant transcript"


# -- the service, as the user sees it -----------------------------------------------------------

def surface_messages(host) -> list:
    """What the model is sent of the session: the surface nodes' roles and contents."""
    return [(m["role"], m["content"]) for s in host.log.nodes if (m := host.log.message_of(s)) is not None]


def fold_turn(host, turn: int, prefix: str = "") -> tuple[str, dict]:
    nodes = turn_nodes(host.log, turn)
    return ("replace_turn_nodes", {"from": f"{prefix}n1", "to": f"{prefix}n{len(nodes)}", "nodes": [
        {"role": "user", "content": f"Fix the parser ({turn})."},
        {"role": "assistant", "content": f"COMPRESSED {turn}: fixed parse()."}]})


def run_turn(host, cfg: EngineConfig, scripts: list[WorkerScript]):
    service = EngineHarness().turns
    started = attach_workers(host, service, scripts)

    async def scenario():
        await complete_turn(host, service, cfg)
        await asyncio.sleep(0.05)
        await service.drained(SESSION, 5)  # ready (or held); a ready turn lands at the next pre-step
        await next_turn_prestep(host, service, cfg)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    return started, service


def markers(host) -> list[tuple[str, int]]:
    return [m for e in host.log.events if (m := marker_of(e)) is not None]


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_a_turn_not_worth_a_worker_yet_is_held_pending_with_its_context_unchanged(dialect, caplog, tmp_path):
    host = one_turn_host(dialect, shape=BIG)
    before = surface_messages(host)
    with caplog.at_level("INFO", logger="turn_memory.turns"):
        started, service = run_turn(host, EngineConfig(), [WorkerScript([FINISH])])
    assert started == []  # no model request at all
    assert markers(host) == [("pending", 1)]  # never a landed marker over its raw reasoning
    assert surface_messages(host)[:len(before)] == before
    assert service.job(SESSION, 1).held
    assert f"session {SESSION} turn 1: held; turn 1 (" in caplog.text and "requests the session is expected" in caplog.text
    # recovery and inspect agree: a held turn is pending, taken up again on the next start
    assert turns_to_recover(host.log) == [1]
    report = inspect_log(write_plain(tmp_path / ("session.v4.jsonl" if dialect is V02 else "session.jsonl"),
                                     host.log.events, dialect))
    assert [(t["turn"], t["state"]) for t in report["turns"]] == [(1, "pending"), (2, "open")]


def test_a_turn_in_a_window_half_way_to_the_compaction_threshold_is_compressed_at_once():
    host = one_turn_host(shape=BIG)
    tokens = host.log.tokens()
    host.host_append("request/context", {"contextWindow": int(tokens / 0.5 / 0.8)})  # threshold = 2 x surface
    host._forward()
    harness = EngineHarness()
    harness.turns.window_of = harness.compaction.window
    started = attach_workers(host, harness.turns, [WorkerScript([fold_turn(host, 1), FINISH])])

    async def scenario():
        await complete_turn(host, harness.turns, EngineConfig())
        await harness.turns.drained(SESSION, 5)
        await next_turn_prestep(host, harness.turns, EngineConfig())

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert [s["mode"] for s in started] == ["spawn"]
    assert markers(host) == [("compression", 1)]  # ready by the next turn: it needed no pending marker


def test_a_turn_the_model_said_nothing_in_gets_the_no_op_marker_and_no_worker():
    b = LogBuilder(RC8)
    b.add("permission/preset", {"preset": "workspace-write"})
    b.turn_no = 1
    b.add("turn/start", {"turn": 1})
    b.add("step/start", {"turn": 1, "step": 1})
    b.user("please fix the parser " * 20)
    b.add("step/end", {"turn": 1, "step": 1})
    host = FakeHost(RC8, b.events)
    started, _ = run_turn(host, EngineConfig.model_validate({"turns": {"minTurnTokens": 0}}), [WorkerScript([FINISH])])
    assert started == []
    assert markers(host) == [("compression", 1)]  # seen and recorded: never retried


def turn_by_turn_host(shapes: list[Shape]) -> FakeHost:
    """Completed turns whose turn/ends the engine has not seen yet."""
    b = LogBuilder(RC8)
    b.add("permission/preset", {"preset": "workspace-write"})
    for shape in shapes:
        add_turn(b, shape)
    return FakeHost(RC8, b.events)


def test_held_small_turns_are_compressed_together_by_one_worker_once_they_are_worth_it():
    """Issue 22: no small turn's raw reasoning stays behind under a marker that says compressed."""
    host = turn_by_turn_host([SMALL, SMALL, SMALL])
    sizes = [host.log.tokens(turn_nodes(host.log, t)) for t in (1, 2, 3)]
    minimum = sizes[0] + sizes[1] + 1  # two are not enough, three are
    cfg = EngineConfig.model_validate({"turns": {"policy": "size", "minTurnTokens": minimum}})
    service = EngineHarness().turns
    script = WorkerScript([*(fold_turn(host, t, f"t{t}.") for t in (1, 2, 3)), FINISH])
    started = attach_workers(host, service, [script])
    ends = [e for e in host.log.events if e["type"] == "turn/end"]
    held = []

    async def scenario():
        for end in ends:  # one turn ends at a time
            service.on_events(host.session, [end], False, lambda: host, cfg)
            await asyncio.sleep(0.05)
            await service.drained(SESSION, 5)
            held.append(service.sessions[SESSION].queue.held_turns)
        await next_turn_prestep(host, service, cfg, turn=4)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert held == [[1], [1, 2], []]
    assert [s["label"] for s in started] == ["turn-memory turns 1-3"]
    assert [m for m in markers(host) if m[0] == "compression"] == [("compression", 1), ("compression", 2),
                                                                   ("compression", 3)]
    assert not any(host.log.index.has_raw_reasoning(t) for t in (1, 2, 3))
    assert all(not a.is_error for a in script.answers), [a.text for a in script.answers]
    assert "COMPRESSED 2" in json.dumps([host.log.message_of(s) for s in turn_nodes(host.log, 2)])


def test_the_landing_barrier_never_waits_for_a_held_turn():
    """With `turns.landingBarrier` the next turn's first request waits for the previous turn's
    compression, but not for one the policy holds: no worker is coming for it now."""
    host = one_turn_host(shape=BIG)
    service = EngineHarness().turns
    cfg = EngineConfig.model_validate({"turns": {"landingBarrier": True, "landingWaitS": 5}})

    async def scenario():
        await complete_turn(host, service, cfg)
        started = time.monotonic()
        await next_turn_prestep(host, service, cfg)  # at once: the turn is still being marked
        return time.monotonic() - started

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) < 1
    assert service.job(SESSION, 1).held and markers(host) == [("pending", 1)]
