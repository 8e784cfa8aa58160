"""Issue 4 acceptance on each real DSH host (0.1.0-rc.8, 0.2.1-rc.2): automatic compaction at pressure, overflow
recovery with one replay, and `/compact` with segmented workers, including failure paths."""

from __future__ import annotations

import pytest

from helpers import engine_connected, reload, text_of, transactions
from turn_memory.host.surface import SessionLog

pytestmark = pytest.mark.e2e

WINDOW = 24000
NO_TURN_WORKERS = {"turns": {"enabled": False}}
IS_SESSION_WORKER = {"tools_include": "replace_session_memory"}
FOLD_P1 = {"tool_calls": [{"name": "replace_session_memory", "arguments": {"expected_revision": 0, "from": "P1", "nodes": [
    {"role": "user", "content": "CKPT-USER: the user asked a series of parser questions."},
    {"role": "assistant", "content": "CKPT-ASSISTANT: each answer explained parser internals; nothing pending."}]}}]}
FINISH = {"tool_calls": [{"name": "finish_session_segment", "arguments": {}}]}


def long_answers(fake, n: int) -> None:
    for i in range(n):
        fake.push("turn", f"Answer {i}: " + "the parser keeps a token buffer and a lookahead. " * 60)


def questions(n: int, start: int = 0) -> list:
    tasks: list = []
    for i in range(start, start + n):
        tasks += [f"Question {i}: how does the parser work? " + "details please " * 30, {"measure": True}]
    return tasks


def session_workers(fake, jobs: int = 6) -> None:
    fake.add_rule(IS_SESSION_WORKER, replies=[FOLD_P1, FINISH] * jobs)


def worker_requests_has(request) -> bool:
    return "replace_session_memory" in request.tool_names


def worker_requests(fake):
    return [r for r in fake.requests if worker_requests_has(r)]


def test_pressure_compacts_before_the_window_fills(home, fake):
    home.context_window = WINDOW
    # 18 questions: a session with nothing compressed carries no memory tool declarations (~700
    # tokens a request less than before), and must still cross 80% of the window
    long_answers(fake, 20)
    session_workers(fake)
    run = home.run(questions(18), timeout=150, engine_overrides=NO_TURN_WORKERS)
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert all(t["reason"]["kind"] == "completed" for t in run.tasks())
    measures = [r["totalTokens"] for r in run.records if r.get("measure")]
    assert max(measures) < WINDOW, measures  # no request ever came close to overflowing

    _, events = home.session_log(run.session_id)
    txs = transactions(home, events)
    assert txs, "pressure never triggered a compaction"
    start, summary, checkpoint, end = txs[0]
    assert start["data"]["turn"] is not None and "error" not in end["data"]  # owned by the open turn
    assert "CKPT-ASSISTANT" in text_of(checkpoint["data"])
    # the retained tail is untouched: the nodes after the span stay on the surface, verbatim
    before = SessionLog(home.dialect, events[: checkpoint["seq"]]).nodes
    shadowed = summary["data"]["shadowedSeqs"]
    tail = before[before.index(shadowed[-1]) + 1:]
    after = SessionLog(home.dialect, events[: checkpoint["seq"] + 2]).nodes
    assert tail and after[after.index(checkpoint["seq"]) + 1:] == tail
    reload(home, events)

    fake.push("turn", "Resumed answer.")
    again = home.run(["After reopening: one more question."], resume=run.session_id, engine_overrides=NO_TURN_WORKERS)
    assert again.returncode == 0 and again.tasks()[0]["reason"]["kind"] == "completed", again.records
    reload(home, home.session_log(run.session_id)[1])


def test_one_overflow_compacts_and_replays_the_request_once(home, fake, tmp_path):
    long_answers(fake, 2)
    fake.push("turn", {"context_overflow": True}, "Answer after recovery. THIRD-DONE")
    session_workers(fake)
    engine_log = tmp_path / "engine.log"  # the overflow needs the engine up by turn 3
    run = home.run([engine_connected(engine_log), *questions(3)],
                   engine_overrides={**NO_TURN_WORKERS, "engine": {"logFile": str(engine_log)}})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed"] * 3
    assert "THIRD-DONE" in run.tasks()[2]["text"]
    _, events = home.session_log(run.session_id)
    (tx,) = transactions(home, events)
    assert tx[0]["data"]["turn"] == 3 and "error" not in tx[-1]["data"]
    agent = [r for r in fake.requests if r.kind == "turn" and not worker_requests_has(r)]
    replay = agent[-1]
    assert "CKPT-USER" in " ".join(text_of(m) for m in replay.messages)  # the replayed request is the compacted one
    reload(home, events)


def test_a_second_overflow_in_the_same_turn_keeps_the_provider_error(home, fake, tmp_path):
    long_answers(fake, 2)
    fake.push("turn", {"context_overflow": True}, {"context_overflow": True}, "never sent")
    session_workers(fake)
    engine_log = tmp_path / "engine.log"  # the overflow needs the engine up by turn 3
    run = home.run([engine_connected(engine_log), *questions(3)],
                   engine_overrides={**NO_TURN_WORKERS, "engine": {"logFile": str(engine_log)}})
    reasons = [t["reason"]["kind"] for t in run.tasks()]
    assert reasons == ["completed", "completed", "error"], run.records
    assert "CONTEXT_WINDOW_EXCEEDED" in str(run.tasks()[2]["reason"])
    agent = [r for r in fake.requests if r.kind == "turn" and not worker_requests_has(r)]
    assert len(agent) == 4  # two answered turns, then exactly two attempts: no third request
    assert fake.pending()["turn"] == 1


def test_compact_during_an_open_turn_reports_busy(home, fake):
    fake.push("turn", {"text": "slow answer", "delay_ms": 2500})
    run = home.run([{"send": "A slow question.", "afterMs": 500}, "/compact", {"waitIdle": True}],
                   engine_overrides=NO_TURN_WORKERS)
    (compact,) = run.commands()
    assert compact["result"]["kind"] == "error" and "not idle" in compact["result"]["text"], compact


def test_a_segment_worker_that_stops_after_progress_is_continued_by_a_spawn(home, fake):
    long_answers(fake, 3)
    partial = {"tool_calls": [{"name": "replace_session_memory", "arguments": {"expected_revision": 0, "from": "P1", "nodes": [
        {"role": "user", "content": "PARTIAL-USER: parser questions."}]}}]}
    fake.add_rule(IS_SESSION_WORKER, replies=[partial, "Stopping here."])
    fake.add_rule(IS_SESSION_WORKER, replies=[
        {"tool_calls": [{"name": "replace_session_memory", "arguments": {"expected_revision": 1, "from": "M1", "nodes": [
            {"role": "user", "content": "SPAWN-USER: parser questions."},
            {"role": "assistant", "content": "SPAWN-ASSISTANT: buffer and lookahead explained."}]}}]},
        FINISH])
    run = home.run([*questions(3)[::2], "/compact"],
                   engine_overrides={**NO_TURN_WORKERS, "compaction": {"workerAttempts": 1}})
    (compact,) = run.commands()
    assert compact["result"]["kind"] == "success", compact
    workers = worker_requests(fake)
    assert "Question 0" in " ".join(text_of(m) for m in workers[0].messages)  # its task carries the segment's text
    spawn = workers[2]
    assert "You start fresh" in spawn.all_text() and "Question 0" not in text_of(spawn.messages[0])
    _, events = home.session_log(run.session_id)
    (tx,) = transactions(home, events)
    body = text_of(tx[2]["data"])
    assert "SPAWN-ASSISTANT" in body and "PARTIAL-USER" not in body
    reload(home, events)


def test_when_every_worker_fails_the_compaction_closes_with_the_error(home, fake):
    long_answers(fake, 3)
    fake.add_rule(IS_SESSION_WORKER, reply="I cannot do this.", times="always")
    run = home.run([*questions(3)[::2], "/compact"], engine_overrides=NO_TURN_WORKERS)
    (compact,) = run.commands()
    assert compact["result"]["kind"] == "error" and "useful summary" in compact["result"]["text"], compact
    assert len(worker_requests(fake)) == 3  # three spawns: the no-progress budget
    _, events = home.session_log(run.session_id)
    (tx,) = transactions(home, events)
    assert [e["type"] for e in tx] == ["compaction/start", "compaction/end"]
    assert "no progress" in tx[-1]["data"]["error"]
    before = SessionLog(home.dialect, events[: tx[0]["seq"]]).nodes
    assert SessionLog(home.dialect, events).nodes[: len(before)] == before  # the surface is unchanged
    reload(home, events)
