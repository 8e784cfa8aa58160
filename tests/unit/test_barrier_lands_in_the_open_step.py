"""A compaction that lands the ready turns while the agent loop's step is open (an overflow: its
request failed, the step stays open while the engine compacts and DSH replays) lands them inside
that step on rc8, not in a landing step of its own nested in it: DSH's token meter refuses a
step/start before the open step ended and then fails at every measure for the rest of the session
(found by bench/soak.py on rc8: 525 failed measures after one overflow at turn 90 of 300)."""

from __future__ import annotations

import asyncio

from test_rewrite_barrier import OPEN, HostEngine, Workers, backlog_host, config, end_turns_and_open_the_next, marks


def steps_nest(events: list[dict]) -> list[int]:
    """Seqs of step/starts that arrive while another step is open (what DSH's meter refuses)."""
    open_step, out = None, []
    for e in events:
        if e["type"] == "step/start":
            if open_step is not None:
                out.append(e["seq"])
            open_step = (e["data"]["turn"], e["data"]["step"])
        elif e["type"] in ("step/end", "turn/end"):
            open_step = None
    return out


def test_the_barrier_lands_the_ready_turns_inside_the_loops_open_step_without_nesting_a_landing_step():
    host = backlog_host(pressure=False)
    engine = HostEngine(host, config())
    Workers(host, engine)

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        assert await engine.turns.drained(host.session.id, 5)  # turns 1-3 ready, none landed yet
        host.host_append("step/start", {"turn": OPEN, "step": 1})  # the loop's step; its request overflowed
        host._forward()
        async with engine.turns.rewrite_barrier(host.session, OPEN, 5):
            pass

    asyncio.run(asyncio.wait_for(scenario(), 10))
    events = host.log.events
    assert [turn for turn, _ in marks(host, "compression")] == [1, 2, 3]
    assert steps_nest(events) == []
    opened = next(e["seq"] for e in events if e["type"] == "step/start" and e["data"]["turn"] == OPEN)
    landed = [e for e in events[opened:] if e["type"] == "assistant/message"]
    assert landed and all((e["data"]["turn"], e["data"]["step"]) == (OPEN, 1) for e in landed)


def test_between_steps_the_barrier_still_lands_in_a_landing_step_of_its_own():
    host = backlog_host(pressure=False)
    engine = HostEngine(host, config())
    Workers(host, engine)

    async def scenario():
        end_turns_and_open_the_next(host, engine)
        assert await engine.turns.drained(host.session.id, 5)
        async with engine.turns.rewrite_barrier(host.session, OPEN, 5):
            pass

    asyncio.run(asyncio.wait_for(scenario(), 10))
    events = host.log.events
    assert [turn for turn, _ in marks(host, "compression")] == [1, 2, 3] and steps_nest(events) == []
    assert any(e["type"] == "step/start" and e["data"] == {"turn": OPEN, "step": 0} for e in events)
