"""Issue 14 on each real DSH host: what turn-memory adds to the model's requests keeps the
provider's prompt cache warm, and a turn too small to be worth a worker costs no request.

Priced with the session benchmark's prefix-cache model (`turn_memory.devtools.price_model`)."""

from __future__ import annotations

import pytest

from helpers import reload
from test_turn_compression_e2e import AGENT_TURN_1, BARRIER, BARRIER_REWRITE, FINISH, FOLD, IS_WORKER, TASK_1, agent_requests, \
    worker_requests
from turn_memory.devtools import price_model as pm
from turn_memory.host.markers import marker_of

pytestmark = pytest.mark.e2e

MEMORY_TOOLS = {"read_session_history", "read_memory_image", "continue_after_turn_compression"}


def prefix_breaks(requests) -> list[int]:
    """Indexes of the requests that do not extend the request before them (a cached-prefix miss)."""
    texts = [pm.canonical_text(r.tools, r.messages) for r in requests]
    return [i for i in range(1, len(texts)) if not texts[i].startswith(texts[i - 1])]


def memory_tools(request) -> set[str]:
    return MEMORY_TOOLS & set(request.tool_names)


def test_the_memory_tools_join_the_request_that_carries_the_first_compressed_turn_and_stay(home, fake):
    # nothing to read back before the first landing: no declarations (~700 tokens) in those
    # requests; the tool list changes in the request the landing rewrites anyway (one cache
    # break, not two), and never again, across a restart too
    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE", "Turn three after reopening. THIRD-DONE")
    fake.add_rule(IS_WORKER, replies=[FOLD, FINISH])
    run = home.run([TASK_1, "Second task: add a regression test."], engine_overrides=BARRIER_REWRITE)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    agent = agent_requests(fake)
    first = next(i for i, r in enumerate(agent) if "COMPRESSED-USER" in r.all_text())
    assert "Second task" in agent[first].all_text()  # turn 2's first request (the landing barrier)
    assert [memory_tools(r) for r in agent] == [set()] * first + [MEMORY_TOOLS] * (len(agent) - first)
    # the host's own tools are as they were; ours join them in one change
    assert [set(r.tool_names) - MEMORY_TOOLS for r in agent] == [set(agent[0].tool_names)] * len(agent)
    assert prefix_breaks(agent) == [first]

    # a new DSH process resumes the session: its first request carries the tools its last one did
    seen = len(fake.requests)
    again = home.run(["Third task after reopening."], resume=run.session_id, engine_overrides=BARRIER_REWRITE)
    assert again.returncode == 0 and again.tasks()[0]["reason"]["kind"] == "completed", again.records
    resumed = [r for r in agent_requests(fake) if fake.requests.index(r) >= seen]
    assert resumed and all(r.tool_names == agent[-1].tool_names for r in resumed), \
        [r.tool_names for r in resumed]
    reload(home, home.session_log(run.session_id)[1])  # 0.2.1 logged the change (a tool-addition): it reloads


def test_every_worker_after_the_first_reads_its_instructions_from_the_cache(home, fake):
    fake.push("turn", *AGENT_TURN_1, *AGENT_TURN_1[:2], "Turn two done: SECOND-DONE", "Closing.")
    fold2 = {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n6", "nodes": [
        {"role": "user", "content": "COMPRESSED-USER 2"}, {"role": "assistant", "content": "COMPRESSED-ASSISTANT 2"}]}}]}
    fake.add_rule({**IS_WORKER, "last_user_contains": "memory editor for turn 1 of"}, replies=[FOLD, FINISH])
    fake.add_rule({**IS_WORKER, "last_user_contains": "memory editor for turn 2 of"}, replies=[fold2, FINISH])
    run = home.run([TASK_1, "Second task: " + TASK_1, "Third task."], engine_overrides=BARRIER)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    first_requests = {}
    for r in worker_requests(fake):
        turn = 1 if "memory editor for turn 1 of" in r.last_user_text else 2
        first_requests.setdefault(turn, r)
    w1, w2 = first_requests[1], first_requests[2]
    # the instructions are the worker's system prompt: the same for every worker, before the
    # inherited conversation; the task after the conversation holds only the turn
    assert w1.system_text == w2.system_text and "Rules the host enforces" in w1.system_text
    assert "Rules the host enforces" not in w1.last_user_text
    fixed = pm.canonical_text(w2.tools, [m for m in w2.messages if m["role"] == "system"][:1])
    texts = [pm.Request(pm.canonical_text(r.tools, r.messages), 1) for r in fake.requests]
    priced = pm.price(texts)
    hit = priced[fake.requests.index(w2)].hit_tokens
    # at least the fixed prefix's whole cache intervals (w2 goes on differently after it)
    assert hit >= pm.interval_tokens(fixed) > 1000, (hit, pm.tokens(fixed))


def test_with_the_default_policy_a_short_session_runs_no_worker_and_its_requests_stay_as_they_were(home, fake):
    """A worker pays for itself only over the requests still to come; a three-turn session
    has not made enough to expect them: every turn is held, pending, and costs nothing."""
    big = [{"text": "Listing the cases.", "tool_calls": [{"name": "bash", "arguments": {
        "command": "seq -f 'case-%06g' 1 400", "description": "list"}}]}, "Big turn done: 400 cases listed. BIG-DONE"]
    fake.push("turn", *big, "Small answer. SMALL-DONE", "Closing.")
    fake.add_rule(IS_WORKER, replies=[FINISH], times="always")
    policy = {"turns": {"landingBarrier": True, "minTurnTokens": 600}}  # the default (the template sets 0)
    run = home.run(["List the parser cases.", "Thanks, short question: ok?", "Bye."], engine_overrides=policy)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert worker_requests(fake) == []
    _, events = home.session_log(run.session_id)
    marks = [m for e in events if (m := marker_of(e))]
    # held, pending: each marker lands at the next turn's first pre-step; turn 3's stays owed (journaled)
    assert marks == [("pending", 1), ("pending", 2)], marks
    # the pending markers are content-identical copies: each request extends the one before it
    # and so reads all of it from the cache, however long the paths and dates in it make it
    agent = agent_requests(fake)
    # nothing compressed, nothing to read back: no memory tool in any request
    assert not any(memory_tools(r) for r in agent), [r.tool_names for r in agent]
    texts = [pm.canonical_text(r.tools, r.messages) for r in agent]
    assert all(now.startswith(before) for before, now in zip(texts, texts[1:]))
    priced = pm.price([pm.Request(text, 1) for text in texts])
    for before, now in zip(priced, priced[1:]):
        assert now.hit_tokens >= before.prompt_tokens, (before, now)
    last = agent[-1].all_text()
    assert "case-000400" in last and "Small answer. SMALL-DONE" in last
    reload(home, events)


def test_turns_queued_behind_a_slow_worker_are_compressed_by_one_worker_and_each_lands(home, fake):
    # fast turns behind a slower worker: per-turn workers would each re-read the raw turns
    # after theirs, and each landing would break the cache behind them; one worker reads the
    # backlog once and its turns land together
    from test_turn_backlog_e2e import carries_compressed, compression_marks, fold, is_worker, tool_turn

    def respond(request):
        if request.kind != "turn" or not is_worker(request):
            return None
        return {**fold(request), "delay_ms": 4000}

    fake.responder = respond
    tasks = [tool_turn(fake, k) for k in range(1, 4)]
    fake.add_rule({"last_user_contains": "Last task:", "tools_exclude": "replace_turn_nodes"}, reply="All done. LAST")
    # turn 1's worker starts before turn 2 does (a loaded machine could otherwise start it only
    # once turns 2 and 3 had ended, and one worker would take all three), and is still busy when
    # they end; the backlog's worker is done before the last task
    run = home.run([tasks[0], {"sleepMs": 1000}, *tasks[1:], {"sleepMs": 10000}, "Last task: sum up."], timeout=120,
                   # the default batch (the template sets 1); one worker slot: the turns that end
                   # while it is busy form the backlog (with the default three, each would get its own)
                   engine_overrides={"turns": {"batchTurns": 4, "concurrentJobs": 1}})
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    workers = [r for r in fake.requests if r.kind == "turn" and is_worker(r)]
    prompts = [r.last_user_text.splitlines()[0] for r in workers]
    assert len(workers) == 2, prompts  # turn 1's, then one for the backlog
    assert "memory editor for turn 1 of" in prompts[0] and "memory editor for turns 2 and 3 of" in prompts[1], prompts
    _, events = home.session_log(run.session_id)
    landed = [compression_marks(events, k) for k in (1, 2, 3)]
    assert all(len(m) == 1 for m in landed) and landed == sorted(landed), landed
    last = next(r for r in agent_requests(fake) if "Last task:" in r.last_user_text)
    assert carries_compressed(last, (1, 2, 3))
