"""Issue 3 acceptance on each real DSH host (0.1.0-rc.8, 0.2.1-rc.2): every completed turn is rewritten by a
worker and landed; the scripted model plays both the agent and the worker."""

from __future__ import annotations

import pytest

from helpers import reload, text_of
from turn_memory.devtools.scripted_workers import worker_responder
from turn_memory.host.dialect import is_runtime_context
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns.recovery import turn_nodes
from turn_memory.turns.results import ResultStore

pytestmark = pytest.mark.e2e

WORKER_TOOLS = {"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression"}
IS_WORKER = {"tools_include": "replace_turn_nodes"}
TASK_1 = "Please fix the parser: empty input crashes it. " * 4
# user, runtime snapshot, assistant+call, result, assistant+call, result, answer = 7 nodes
AGENT_TURN_1 = [
    {"text": "Looking at the parser.", "tool_calls": [{"name": "bash", "arguments": {"command": "echo probe-one", "description": "a"}}]},
    {"text": "Running the tests.", "tool_calls": [{"name": "bash", "arguments": {"command": "echo probe-two", "description": "b"}}]},
    "Turn one done: parse() now returns [] on empty input. FIRST-DONE",
]
FOLD = {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n7", "nodes": [
    {"role": "user", "content": "COMPRESSED-USER: fix the parser crash on empty input."},
    {"role": "assistant", "content": "COMPRESSED-ASSISTANT: probed with echo; parse() returns [] on empty input."}]}}]}
FINISH = {"tool_calls": [{"name": "finish_turn_compression", "arguments": {}}]}
#: the default on 0.2 (`turns.assistantNodes`): the assistant nodes stay, the user nodes and results shrink
IN_PLACE = {"tool_calls": [
    {"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n2", "nodes": [
        {"role": "user", "content": "COMPRESSED-USER: fix the parser crash on empty input."}]}},
    *({"name": "replace_turn_nodes", "arguments": {"from": n, "to": n, "nodes": [
        {"role": "tool", "content": f"COMPRESSED-RESULT of {n}."}]}} for n in ("n4", "n6"))]}
#: turn 1 landed in place: its assistant nodes and results keep their places
IN_PLACE_ROLES = ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def agent_requests(fake):
    return [r for r in fake.requests if r.kind == "turn" and not WORKER_TOOLS & set(r.tool_names)]


def worker_requests(fake):
    return [r for r in fake.requests if r.kind == "turn" and WORKER_TOOLS & set(r.tool_names)]


def conversation(request) -> list[tuple[str, str]]:
    return [(m["role"], text_of(m)) for m in request.messages if m["role"] != "system"]


def turn1_roles(home, events) -> list[str]:
    """Turn 1's roles, tool results as `tool` on either host, less a runtime snapshot rc8
    restated after it (a landing that shadows the snapshot rc8 retains restates it)."""
    log = SessionLog(home.dialect, events)
    nodes = turn_nodes(log, 1)
    if nodes and is_runtime_context(log.message_of(nodes[-1]).get("source")):
        nodes = nodes[:-1]
    tool = home.dialect.tool_result_role
    return ["tool" if log.message_of(s)["role"] == tool and log.events[s]["type"] == "tool/result" else
            log.message_of(s)["role"] for s in nodes]


def compression_marks(events, turn):
    return [e["seq"] for e in events if marker_of(e) == ("compression", turn)]


#: the opt-in landing barrier: each turn's first request waits for the previous turn's landing
BARRIER = {"turns": {"landingBarrier": True}}
#: with workers that may rewrite assistant nodes (0.2: the tail form at the next turn's first step)
BARRIER_REWRITE = {"turns": {"landingBarrier": True, "assistantNodes": "rewrite"}}


def test_with_the_landing_barrier_the_turn_lands_as_two_nodes_and_the_next_request_carries_it(home, fake):
    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE", "Turn three after reopening. THIRD-DONE")
    fake.add_rule(IS_WORKER, replies=[FOLD, FINISH])
    run = home.run([TASK_1, "Second task: add a regression test.", {"measure": True}], engine_overrides=BARRIER_REWRITE)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed", "completed"]

    # the first model request of turn 2 already carries turn 1 compressed, and only that
    first_of_turn2 = next(r for r in agent_requests(fake) if "Second task" in r.all_text())
    convo = conversation(first_of_turn2)
    assert convo[0][0] == "user" and convo[0][1].startswith("COMPRESSED-USER")
    assert convo[1][0] == "assistant" and convo[1][1].startswith("COMPRESSED-ASSISTANT")
    assert not any("Looking at the parser" in text for _, text in convo)
    # the worker was a spawn: its first request carried the raw turn in its task
    (first_worker, *_rest) = worker_requests(fake)
    # its scope holds the four editor tools and the public read_memory_image, nothing else
    assert "Looking at the parser" in first_worker.all_text()
    assert set(first_worker.tool_names) == WORKER_TOOLS | {"read_memory_image"}

    _, events = home.session_log(run.session_id)
    reload(home, events)  # the whole log reloads under the host's rules
    assert turn1_roles(home, events) == ["user", "assistant"]
    assert len(compression_marks(events, 1)) == 1
    # DSH's token meter still prices the session after the landing (headless DSH prints no
    # warnings, so ask the meter itself: a landed assistant outside a step breaks it for good)
    (measure,) = [r for r in run.records if r.get("measure")]
    assert "error" not in measure and measure["totalTokens"] > 0, measure
    # no persisted request header of the main session lists a worker tool
    headers = [e for e in events if e["type"] == "request/header"]
    assert headers and not any(WORKER_TOOLS & {t["name"] for t in e["data"]["header"].get("tools", [])} for e in headers)

    # a new DSH process reopens the session and continues
    again = home.run(["Third task after reopening."], resume=run.session_id, engine_overrides=BARRIER_REWRITE)
    assert again.returncode == 0 and again.tasks()[0]["reason"]["kind"] == "completed", again.records
    reload(home, home.session_log(run.session_id)[1])


def test_a_fork_that_stops_after_progress_is_continued_by_a_spawn(home, fake):
    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE")
    partial = {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n3", "to": "n6", "nodes": [
        {"role": "assistant", "content": "PARTIAL: probed twice with echo."}]}}]}
    fake.add_rule(IS_WORKER, replies=[partial, "I will stop here without finishing."])
    # the spawn continues from the current catalog: n1, n2, r1, n7 (n3..n6 are gone)
    fake.add_rule(IS_WORKER, replies=[
        {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n7", "nodes": [
            {"role": "user", "content": "COMPRESSED-USER: fix the parser."},
            {"role": "assistant", "content": "COMPRESSED-ASSISTANT: done."}]}}]},
        FINISH])
    # the barrier keeps turn 2 from ending the session before the fork and the spawn are done
    run = home.run([TASK_1, "Second task."], engine_overrides={"turns": {"workerAttempts": 1, "landingBarrier": True,
                                                                         "assistantNodes": "rewrite",
                                                                         "workerStart": "fork"}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    workers = worker_requests(fake)
    spawn_first = workers[2]
    assert "You start fresh" in spawn_first.all_text() and "r1" in spawn_first.all_text()
    assert "Looking at the parser." not in [text for _, text in conversation(spawn_first)]  # no inherited history
    _, events = home.session_log(run.session_id)
    (seq,) = compression_marks(events, 1)
    source = events[seq]["data"]["source"]
    assert source["workers"] == 2 and source["workerModes"] == ["fork", "spawn"]
    assert turn1_roles(home, events) == ["user", "assistant"]
    reload(home, events)


def test_stopped_before_landing_then_landed_exactly_once(home, fake):
    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE")
    fake.add_rule(IS_WORKER, reply={"text": "slow worker", "delay_ms": 15000})  # DSH exits before it answers
    fake.add_rule(IS_WORKER, replies=[IN_PLACE, FINISH])
    first = home.run([TASK_1, {"sleepMs": 1500}])  # time for the engine to journal the turn
    assert first.returncode == 0, (first.records, first.stderr[-2000:])
    _, events = home.session_log(first.session_id)
    # no turn after it: its pending marker is owed, in the engine's journal (the next process recovers it from there)
    assert [marker_of(e) for e in events if marker_of(e)] == []
    assert ResultStore(home.root).owed(first.session_id) == {1: "pending"}

    second = home.run(["Second task after a restart."], resume=first.session_id, engine_overrides=BARRIER)
    assert second.returncode == 0, (second.records, second.stderr[-2000:])
    _, events = home.session_log(first.session_id)
    landed = compression_marks(events, 1)
    assert len(landed) == 1 and turn1_roles(home, events) == IN_PLACE_ROLES
    surface_after_second = SessionLog(home.dialect, events).nodes

    third = home.run([], resume=first.session_id)
    assert third.returncode == 0, (third.records, third.stderr[-2000:])
    _, events = home.session_log(first.session_id)
    assert compression_marks(events, 1) == landed  # not redone
    assert SessionLog(home.dialect, events).nodes == surface_after_second  # nothing changed
    reload(home, events)


def test_a_worker_stuck_on_malformed_calls_is_stopped_and_the_turn_stays_raw(home, fake):
    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE")
    broken = {"tool_calls": [{"name": "replace_turn_nodes", "arguments": "{not json"}]}
    fake.add_rule(IS_WORKER, reply=broken, times="always")
    run = home.run([TASK_1, "Second task."],
                   engine_overrides={"turns": {"maxWorkerRequests": 4, "workerAttempts": 2, "landingBarrier": True}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    # 2 workers, then the job gave up: on rc8 each worker is stopped at 4 requests; 0.2.1's
    # stream parser already ends a worker's turn at its first malformed call (1 request each)
    assert len(worker_requests(fake)) == {"rc8": 8, "v021": 2}[home.host]
    _, events = home.session_log(run.session_id)
    assert turn1_roles(home, events) == ["user", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert compression_marks(events, 1) == []
    reload(home, events)


def test_the_last_turn_before_dsh_exits_lands_after_a_restart_without_its_workers_again(home, fake):
    """Turn 1 is compressed but cannot land before DSH exits (landing waits for a later
    turn): the finished compression is kept in a sidecar under the DSH home, and the next DSH
    process lands it at its first landing point instead of paying the turn's workers again."""
    from turn_memory.host.session_dirs import encode_segment

    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE")
    fake.add_rule(IS_WORKER, replies=[IN_PLACE, FINISH])
    first = home.run([TASK_1, {"sleepMs": 4000}])  # the worker finishes; no later turn lands it
    assert first.returncode == 0, (first.records, first.stderr[-2000:])
    _, events = home.session_log(first.session_id)
    assert [marker_of(e) for e in events if marker_of(e)] == []
    assert ResultStore(home.root).owed(first.session_id) == {1: "pending"}
    kept = home.root / "turn-memory" / "results" / encode_segment(first.session_id) / "1.json"
    assert kept.exists()
    workers_before = len(worker_requests(fake))
    assert workers_before == 2  # FOLD, FINISH

    second = home.run(["Second task after a restart."], resume=first.session_id, engine_overrides=BARRIER)
    assert second.returncode == 0, (second.records, second.stderr[-2000:])
    assert len(worker_requests(fake)) == workers_before  # no worker ran again
    _, events = home.session_log(first.session_id)
    assert len(compression_marks(events, 1)) == 1 and turn1_roles(home, events) == IN_PLACE_ROLES
    first_of_turn2 = next(r for r in agent_requests(fake) if "Second task after a restart." in r.all_text())
    assert conversation(first_of_turn2)[0][1].startswith("COMPRESSED-USER")
    assert not kept.exists()  # deleted once landed
    assert ResultStore(home.root).owed(first.session_id) == {2: "pending"}  # the session's last turn, now
    reload(home, events)


def catalog_users(request) -> list[tuple[str, str]]:
    """(kind, preview) of each user node the worker's task catalog lists."""
    task = next(text_of(m) for m in reversed(request.messages) if m["role"] == "user")
    lines = [line.split(" · ") for line in task.splitlines() if line.startswith("- n")]
    return [(parts[2], parts[-1]) for parts in lines if parts[1] == "user"]


def test_the_catalog_labels_host_snapshots_and_human_words_from_their_sources(home, fake):
    """Issue 22 item 1. On rc8 a landing that shadows the retained snapshot restates it at the
    tail, before the next turn's words, so every later turn opens with a snapshot, which that
    turn's own landing shadows and restates again. (While a pending marker was written at each
    turn's end, it replaced that opening snapshot with a copy of turn-memory's source, so the
    landing found no snapshot to restate and every other turn opened with the person's words,
    without the runtime context stock has.) 0.2.1's loop always appends its snapshot after the
    step's input (dsh-agent-loop preStep `[...claimed, context]`) and restates none."""
    turns = 4
    for k in range(turns):
        fake.push("turn", {"text": f"Checking {k}.", "tool_calls": [
            {"name": "bash", "arguments": {"command": f"echo probe-{k}", "description": "probe"}}]}, f"Done {k}.")
    fake.responder = worker_responder
    tasks = [task for k in range(turns) for task in (f"Task {k}: run the probe and report.", {"sleepMs": 1000})]
    run = home.run(tasks, engine_overrides=BARRIER)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])

    # the first request of each turn's worker carries the turn's catalog
    catalogs = {}
    for request in worker_requests(fake):
        users = catalog_users(request)
        catalogs.setdefault(next(p for k, p in users if k == "human")[:6], users)
    assert sorted(catalogs) == [f"Task {k}" for k in range(turns)]
    for users in catalogs.values():
        assert [kind for kind, preview in users if preview.startswith("Current runtime context")] == ["host-context"]
        assert [preview[:5] for kind, preview in users if kind == "human"] == ["Task "]
    opening = [users[0][0] for users in catalogs.values()]
    assert opening == {"rc8": ["human"] + ["host-context"] * (turns - 1), "v021": ["human"] * turns}[home.host], \
        opening
    reload(home, home.session_log(run.session_id)[1])
