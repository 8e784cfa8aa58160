"""Issue 12, Deliver 4: the fault-injection suite, on each real DSH host (0.1.0-rc.8, 0.2.1-rc.2).

Every case asserts what a user would notice: the agent's turns complete, the log reloads, no
landing is lost or doubled, and — where a finished compression could be kept across the fault
(issue 12's sidecar) — nothing is paid twice. Each scenario runs once per host; its tests share
the outcome (faults_lib.py). Faults are deterministic: the engine is killed through its pid file
at a point the scripted model chooses, or at a `turn_memory.faults` point; DSH kills itself
from the driver (`{killSelf: true}`).

The cases that needed the engine-side fixes of issue 12 (branch issue12a: the turn recorded at
turn/end — now in the engine's journal of owed markers, issue 33 — finished compressions kept in
a sidecar, bounded job spend) pass since it landed.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import pytest

from faults_lib import (Case, Outcome, account, current_catalog, current_ids, fold, is_segment_worker, is_worker, make_case,
                        tool_turn, worker_turn)
from helpers import engine_connected, text_of, transactions

pytestmark = pytest.mark.e2e

#: the scenarios' liveness check: a ping every second, two to answer it (`engine.livenessMs`; 5 s and 10 s by default)
LIVENESS_MS = 1000
#: the most a hung engine may hold a step: the first ping, its wait, and a second for the hook's own work
HUNG_BOUND_MS = 3 * LIVENESS_MS + 1000


# --------------------------------------------------------------------------- scenarios

def checkpoint(request):
    """A segment worker: replace its placeholder with a two-node checkpoint, then finish."""
    last = next((text_of(m) for m in reversed(request.messages) if m.get("role") == "tool"), "")
    if last.startswith("Accepted at revision"):
        return {"tool_calls": [{"name": "finish_session_segment", "arguments": {}}]}
    task = request.all_text()
    segment = re.search(r"You are assigned segment (\d+)", task).group(1)
    revision = int(re.search(r"the working checkpoint is at revision (\d+)", task).group(1))
    return {"tool_calls": [{"name": "replace_session_memory", "arguments": {
        "expected_revision": revision, "from": f"P{segment}", "nodes": [
            {"role": "user", "content": "CHECKPOINT: modules inspected."},
            {"role": "assistant", "content": "CHECKPOINT: all reported."}]}}]}


def engine_killed(case: Case) -> Outcome:
    """SIGKILL while turn 1's first worker waits for the model, then again while the first
    `/compact` segment worker does; the shim restarts the engine each time."""
    fake, killed = case.fake, {"worker": False, "segment": False}

    def respond(request):
        if request.kind != "turn":
            return None
        if is_segment_worker(request):
            if not killed["segment"]:
                killed["segment"] = True
                threading.Timer(0.2, case.kill_engine, (signal.SIGKILL,)).start()
                return {"text": "the segment answer never arrives", "delay_ms": 6000}
            return checkpoint(request)
        if is_worker(request):
            if worker_turn(request) == 1 and not killed["worker"]:
                killed["worker"] = True
                threading.Timer(0.2, case.kill_engine, (signal.SIGKILL,)).start()
                return {"text": "the answer never arrives", "delay_ms": 6000}
            return fold(request)
        return None

    fake.responder = respond
    tasks = [tool_turn(fake, k) for k in range(1, 5)]
    fake.add_rule({"last_user_contains": "Last task:", "tools_exclude": "replace_turn_nodes"}, reply="All done. LAST")
    case.run([engine_connected(case.engine_log), *tasks[:2], {"sleepMs": 3000}, *tasks[2:], {"sleepMs": 1500},
              "/compact", {"sleepMs": 3000}, "/compact", "Last task: sum up."],
             timeout=150, engine_overrides={"engine": {"restartDelayMs": 1000}, "compaction": {"retainTurns": 1}})
    return account(case, ["engine SIGKILLed while a worker runs", "engine SIGKILLed while a compaction segment runs"],
                   notes={"killed": dict(killed)}, sidecar_turns=[1, 2, 3, 4])


def engine_fault(case: Case, fault: str, covers: str, first_sleep_ms: int, timeout: int,
                 engine: dict) -> Outcome:
    """Three tool turns and a closing turn with the engine-side `fault` injected once."""
    case.home.extra_env["TURN_MEMORY_FAULTS"] = fault
    fake = case.fake
    fake.responder = lambda r: fold(r) if r.kind == "turn" and is_worker(r) else None
    tasks = [tool_turn(fake, k) for k in range(1, 4)]
    fake.add_rule({"last_user_contains": "Last task:", "tools_exclude": "replace_turn_nodes"}, reply="All done. LAST")
    case.run([engine_connected(case.engine_log), tasks[0], {"sleepMs": first_sleep_ms}, tasks[1], {"sleepMs": 3000},
              tasks[2], {"sleepMs": 1500}, "Last task: sum up."], timeout=timeout, engine_overrides={"engine": engine})
    return account(case, [covers], sidecar_turns=[1, 2, 3])


def kill_before_apply(case: Case) -> Outcome:
    """The engine dies between validating turn 1's landing and the apply call."""
    return engine_fault(case, "kill-before-apply", "engine killed between validation and apply", 1500, 90,
                        {"restartDelayMs": 1000})


def hang_prestep(case: Case) -> Outcome:
    """The engine's event loop blocks for good at turn 2's first pre-step (pings unanswered)."""
    return engine_fault(case, "hang-prestep", "engine hung during a pre-step", 1000, 120,
                        {"restartDelayMs": 500, "recycleAfterTimeouts": 1, "livenessMs": LIVENESS_MS})


def corrupt_reply(case: Case) -> Outcome:
    """The engine's reply to turn 2's first pre-step goes out unparsable."""
    return engine_fault(case, "corrupt-reply", "a corrupted engine reply on the bridge", 1000, 90,
                        {"restartDelayMs": 500})


def dsh_killed(case: Case) -> Outcome:
    """One session across four DSH processes, three of them SIGKILLed:
    1. turn 2 ends while turn 1 still compresses (a slow worker); DSH is killed right after;
    2. resumed: turn 3's worker is mid-request when DSH is killed;
    3. resumed: turn 4 is the session's last turn; its worker finishes; DSH is killed;
    4. resumed: one more turn after a pause."""
    fake, flags = case.fake, {"turn1": 0, "turn3": 0, "turn4-done": case.tmp / "turn4-done",
                              "turn3-asked": case.tmp / "turn3-asked"}

    def respond(request):
        if request.kind != "turn" or not is_worker(request):
            return None
        turn = worker_turn(request)
        if turn == 1 and flags["turn1"] == 0:
            flags["turn1"] += 1
            return {"text": "slow", "delay_ms": 15000}  # DSH is gone before it answers
        if turn == 3 and flags["turn3"] == 0:
            flags["turn3"] += 1
            flags["turn3-asked"].write_text("asked")
            return {"text": "slow", "delay_ms": 15000}
        reply = fold(request)
        if turn == 4:
            flags["turn4-done"].write_text("done")
        return reply

    fake.responder = respond
    tasks = [tool_turn(fake, k) for k in range(1, 5)]
    fake.add_rule({"last_user_contains": "Last task:", "tools_exclude": "replace_turn_nodes"}, reply="All done. LAST")
    first = case.run([engine_connected(case.engine_log), tasks[0], tasks[1], {"sleepMs": 1000}, {"killSelf": True}],
                     timeout=60)
    sid = first.session_id
    case.run([tasks[2], {"waitFile": str(flags["turn3-asked"]), "contains": "asked", "timeoutMs": 20000},
              {"sleepMs": 300}, {"killSelf": True}], resume=sid, timeout=60)
    case.run([{"sleepMs": 2500}, tasks[3], {"waitFile": str(flags["turn4-done"]), "contains": "done", "timeoutMs": 20000},
              {"sleepMs": 1000}, {"killSelf": True}], resume=sid, timeout=60)
    case.run([{"sleepMs": 3000}, "Last task: sum up."], resume=sid, timeout=60)
    return account(case, ["DSH killed right after turn/end", "DSH killed during a worker",
                          "DSH killed after the last turn of a session"],
                   notes={"killed": [r.killed for r in case.runs]}, sidecar_turns=[1, 2, 3, 4])


CJK = "数据流水线🚀テスト한국어✅"  # 3-byte CJK, 4-byte emoji
BIG_START, BIG_END = "起点标记🏁START", "终点标记🎯END"
BIG = BIG_START + (CJK * 40 + "\n") * 1400 + BIG_END  # ~1.0 MB of UTF-8
HUGE = "X" * 300_000


def bad_worker_input(case: Case) -> Outcome:
    """Worker misbehaviour and big, non-ASCII input, one turn each:
    1. malformed calls (arguments that are not JSON, unknown ids), then a good fold;
    2. an oversized rewrite (2 x 300 kB, refused at finish as longer), then a good fold;
    3. the same over-long rewrite, again and again, never finishing;
    4. a ~1 MB CJK/emoji user message, compressed to CJK text;
    5. read_session_history reads turn 4 back whole (a ~1 MB tool result) and searches it;
       the turn carrying that result is compressed too."""
    fake = case.fake
    started = {4: case.tmp / "turn4-started", 5: case.tmp / "turn5-folded"}

    def pair(request, user: str, assistant: str) -> dict:
        """The turn rewritten to `user` + `assistant`; where the host keeps the assistant nodes
        (0.2's default) only its opening user nodes, to `user`."""
        ids, catalog = current_ids(request), current_catalog(request)
        if " · fixed · " not in catalog:
            return {"name": "replace_turn_nodes", "arguments": {"from": ids[0], "to": ids[-1], "nodes": [
                {"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}}
        users = re.findall(r"^- ([nr]\d+) · user · ", catalog, re.M)
        head = [i for i in ids[:len(users)] if i in users]
        return {"name": "replace_turn_nodes", "arguments": {"from": head[0], "to": head[-1], "nodes": [
            {"role": "user", "content": user}]}}

    def respond(request):
        if request.kind != "turn" or not is_worker(request):
            return None
        turn = worker_turn(request)
        if turn in started:
            started[turn].write_text("yes")
        mine = sum(1 for r in fake.requests if is_worker(r) and worker_turn(r) == turn)  # this one not yet counted
        if turn == 1 and mine == 0:
            return {"tool_calls": [{"name": "replace_turn_nodes", "arguments": '{"from": "n1", "to": "n'},
                                   {"name": "replace_turn_nodes", "arguments": {"from": "n91", "to": "n99", "nodes": [
                                       {"role": "user", "content": "x"}]}}]}
        if turn == 2 and mine == 0:
            return {"tool_calls": [pair(request, HUGE, HUGE), {"name": "finish_turn_compression", "arguments": {}}]}
        if turn == 3:
            return {"tool_calls": [pair(request, "REPEATED " * 400, "REPEATED " * 400),
                                   {"name": "finish_turn_compression", "arguments": {}}]}
        if turn == 4:
            return {"tool_calls": [pair(request, f"压缩的第四轮：用户发来约 1 MB 的{CJK}", f"已读完，结尾是 {BIG_END}"),
                                   {"name": "finish_turn_compression", "arguments": {}}]}
        return fold(request)

    fake.responder = respond
    tasks = [tool_turn(fake, k) for k in range(1, 4)]
    fake.add_rule({"last_user_contains": BIG_START, "tools_exclude": "replace_turn_nodes"}, reply=f"读完了 {CJK}")
    fake.add_rule({"last_user_contains": "Read turn 4 back", "tools_exclude": "replace_turn_nodes"}, replies=[
        {"tool_calls": [{"name": "read_session_history", "arguments": {"turn": 4}}]},
        {"tool_calls": [{"name": "read_session_history", "arguments": {"query": "终点标记🎯END"}}]},
        f"都在 {CJK}. READ-DONE"])
    fake.add_rule({"last_user_contains": "Last task:", "tools_exclude": "replace_turn_nodes"}, reply="All done. LAST")
    # turn 4's worker starts only once turn 3's job stopped (one job at a time per session)
    wait = [lambda k: {"waitFile": str(started[k]), "contains": "yes", "timeoutMs": 60000}][0]
    # the pause lets turn 2 land at turn 3's first pre-step: landed mid-turn 3 on rc8, it splits
    # turn 3's nodes and turn 3 is skipped as not contiguous (seen under load; reported, issue 12)
    case.run([tasks[0], tasks[1], {"sleepMs": 1500}, tasks[2], BIG, wait(4), "Read turn 4 back, whole, then search it.", wait(5), {"sleepMs": 1500},
              "Last task: sum up."],
             timeout=150, engine_overrides={"turns": {"maxWorkerRequests": 4},
                                            "sessionHistory": {"maxReadChars": 1_200_000}})
    # turn 3 (endless) is meant to stay raw; the rest land
    return account(case, ["a worker's malformed tool calls", "a worker's oversized tool calls",
                          "a worker's endlessly repeated tool calls", "a 1 MB tool result and CJK/emoji text"],
                   must_land={"main": [1, 2, 4, 5]})


def two_sessions(case: Case) -> Outcome:
    """Two sessions in one DSH process, each three tool turns, their workers overlapping."""
    fake = case.fake

    def respond(request):
        if request.kind != "turn" or not is_worker(request):
            return None
        text = request.all_text()
        label = "-B" if "Task B" in text else "-A"
        return {**fold(request, label), "delay_ms": 700}

    fake.responder = respond
    a = [tool_turn(fake, f"A{k}") for k in range(1, 4)]
    b = [tool_turn(fake, f"B{k}") for k in range(1, 4)]
    fake.add_rule({"last_user_contains": "Last task A:", "tools_exclude": "replace_turn_nodes"}, reply="A done. LAST")
    fake.add_rule({"last_user_contains": "Last task B:", "tools_exclude": "replace_turn_nodes"}, reply="B done. LAST")
    run = case.run([{"spawn": "b", "tasks": [*b, {"sleepMs": 3000}, "Last task B: sum up."]}, *a, {"sleepMs": 3000},
                    "Last task A: sum up.", {"join": "b"}], timeout=90)
    return account(case, ["two sessions in one DSH process compressing at once"],
                   sessions={"a": run.session_id, "b": run.session_of("b")})


SCENARIOS = {f.__name__: f for f in (engine_killed, kill_before_apply, hang_prestep, corrupt_reply, dsh_killed,
                                     bad_worker_input, two_sessions)}


@pytest.fixture(scope="module")
def scenario(installed_template, host_runtime, tmp_path_factory):
    """scenario(name) -> its Outcome on this host, run once per module (an error is re-raised
    for every test that asks)."""
    done: dict[str, Outcome | BaseException] = {}

    def get(name: str) -> Outcome:
        if name not in done:
            case, fake = make_case(name, installed_template, host_runtime,
                                   tmp_path_factory.mktemp(f"fault-{name}-{host_runtime.host}"))
            started = time.monotonic()
            try:
                done[name] = SCENARIOS[name](case)
            except BaseException as exc:  # noqa: BLE001 - reported by each test that uses it
                done[name] = exc
            finally:
                fake.stop()
            print(f"\n[faults] {name} on {host_runtime.host}: {time.monotonic() - started:.1f}s")
        result = done[name]
        if isinstance(result, BaseException):
            raise result
        return result

    return get


def check_common(o: Outcome, skip_lost: dict[str, set[int]] | None = None) -> None:
    assert o.turns_completed == o.turns_asked, (o.turns_completed, o.turns_asked, o.results[-1].records[-5:])
    assert o.logs_reloaded, o.reload_problems
    assert o.doubled() == [], o.markers
    assert o.lost(skip_lost) == [], (o.markers, o.must_land)


# --------------------------------------------------------------------------- engine faults

def test_engine_killed_while_a_worker_runs_and_while_a_segment_runs(scenario):
    o = scenario("engine_killed")
    assert o.notes["killed"] == {"worker": True, "segment": True}
    check_common(o)
    log = o.sessions["main"]
    down, back = o.results[0].commands()
    # the /compact whose segment worker lost its engine fails cleanly and appends nothing of ours
    assert down["result"]["kind"] == "error", down
    assert back["result"]["kind"] == "success", back
    # the bracket the dead engine had opened is closed as abandoned (by the next engine, before
    # it compacts); the one committed compaction is the second /compact's; none is left open
    brackets = transactions(o, log)
    assert all(t[-1]["type"] == "compaction/end" for t in brackets), brackets
    committed = [t for t in brackets if any(e["type"] == "compaction/summary" for e in t)]
    (tx,) = committed
    assert "error" not in tx[-1]["data"] and tx[0]["seq"] > down["eventsAfter"], tx
    assert all("error" in t[-1]["data"] and len(t) == 2 for t in brackets if t is not tx), brackets


def test_engine_killed_while_a_segment_runs_pays_once_for_the_turns_it_had_finished(scenario):
    o = scenario("engine_killed")
    assert o.redone == {}, o.finished_by_turn


def test_engine_killed_between_validation_and_apply_lands_once(scenario):
    o = scenario("kill_before_apply")
    assert o.notes["fired"] == ["kill-before-apply"] and o.notes["engine_starts"] == 2, o.notes
    check_common(o)
    assert o.finished_by_turn.get(1, 0) >= 1


def test_engine_killed_between_validation_and_apply_pays_once(scenario):
    o = scenario("kill_before_apply")
    assert o.redone == {}, o.finished_by_turn


def test_a_hung_engine_holds_a_pre_step_only_within_the_liveness_bound(scenario):
    o = scenario("hang_prestep")
    assert o.notes["fired"] == ["hang-prestep"] and o.notes["engine_starts"] == 2, o.notes
    check_common(o)
    (run,) = o.results
    waits = run.pre_steps()
    held = [p for p in waits if p["ms"] >= 1000]
    # exactly one step waited for the hung engine, and no longer than the liveness bound; the
    # shim recycled it and every later step went on at once
    assert len(held) == 1 and held[0]["turn"] == 2 and held[0]["ms"] <= HUNG_BOUND_MS, waits


def test_a_hung_engine_pays_once_for_the_turn_it_had_finished(scenario):
    o = scenario("hang_prestep")
    assert o.redone == {}, o.finished_by_turn


def test_a_corrupted_engine_reply_holds_no_step_and_loses_no_landing(scenario):
    """Before: the shim skipped the unparsable frame and the pre-step it answered waited for
    its whole timeout (about 15 minutes with automatic compaction on)."""
    o = scenario("corrupt_reply")
    assert o.notes["fired"] == ["corrupt-reply"], o.notes
    check_common(o)
    (run,) = o.results
    waits = run.pre_steps()
    assert max(p["ms"] for p in waits if p["turn"] > 1) < 3000, waits
    assert o.notes["engine_starts"] == 2, o.notes  # the engine behind the broken stream was replaced


def test_a_corrupted_engine_reply_pays_once(scenario):
    """rc8 landed turn 1 inside the pre-step whose reply was lost, so the new engine has nothing
    to redo; 0.2 defers that landing to the step's request, which the lost reply announced, and
    the replacing engine lands the finished compression from its sidecar without workers."""
    o = scenario("corrupt_reply")
    assert o.redone == {}, o.finished_by_turn


# --------------------------------------------------------------------------- DSH killed

def test_dsh_killed_right_after_turn_end_the_turn_still_lands(scenario):
    """The turn is journaled at turn/end, not when its job starts (its pending marker waits for
    the next turn's landing point), so a turn that ended while an earlier one compressed is
    recovered after DSH is killed."""
    o = scenario("dsh_killed")
    assert o.markers["main"].get(2) == 1, o.markers


def test_dsh_killed_during_a_worker_the_turn_lands_once(scenario):
    o = scenario("dsh_killed")
    assert o.notes["killed"] == [True, True, True, False]
    check_common(o)
    assert o.markers["main"].get(1) == 1 and o.markers["main"].get(3) == 1, o.markers


def test_dsh_killed_after_the_last_turn_of_a_session_it_lands_once(scenario):
    o = scenario("dsh_killed")
    assert o.markers["main"].get(4) == 1, o.markers


def test_dsh_killed_after_the_last_turn_of_a_session_it_is_paid_once(scenario):
    o = scenario("dsh_killed")
    assert o.redone == {}, o.finished_by_turn


# --------------------------------------------------------------------------- bad input

def test_malformed_and_oversized_worker_calls_are_refused_and_the_turns_land(scenario):
    o = scenario("bad_worker_input")
    check_common(o)
    log = "\n".join(text_of(e["data"] if e["type"] == "user/message" else e["data"].get("message") or {})
                    for e in o.sessions["main"] if e["type"] in ("user/message", "assistant/message"))
    assert "XXXXXXXXXX" not in log  # the refused oversized rewrite never reached the session
    assert o.markers["main"].get(3, 0) == 0, o.markers  # the endless turn stays raw, whole
    assert "Probing 3." in log


def test_an_endlessly_repeating_worker_is_stopped_within_its_budget(scenario):
    """A replacement that repeats a refused shape is no progress, so an endlessly repeating
    worker stops after turns.workerAttempts workers (it used to run to turns.maxWorkers)."""
    o = scenario("bad_worker_input")
    # a worker's first request ends in its task prompt (later ones in a tool result)
    workers = [r for r in o.requests if is_worker(r) and worker_turn(r) == 3 and r.last_role == "user"]
    # turns.workerAttempts (3) workers without progress, then the turn stays raw (it was maxWorkers, 8)
    assert 1 <= len(workers) <= 3, (len(workers), o.worker_requests_by_turn)
    assert o.worker_requests_by_turn.get(3, 0) <= 3 * 4, o.worker_requests_by_turn


def test_a_1mb_cjk_emoji_turn_is_compressed_and_read_back_intact(scenario):
    o = scenario("bad_worker_input")
    agent = [r for r in o.requests if r.kind == "turn" and not is_worker(r)]
    results = list(dict.fromkeys(text_of(m) for r in agent for m in r.messages if m.get("role") == "tool"))
    # the host hands a result that large to the model as its head plus a file with the rest
    page = next(t for t in results if BIG_START in t)
    spill = re.search(r"(/\S+read_session_history\.txt)", page)
    whole = Path(spill.group(1)).read_text(encoding="utf-8") if spill else page
    assert BIG_START in whole and BIG_END in whole and CJK * 40 in whole and len(whole.encode()) > 1_000_000, \
        (len(whole.encode()), page[-300:])
    found = next(t for t in results if "completed turn(s) contain all of" in t)
    assert "- turn 4" in found and BIG_END in found, found[:300]
    last = next(r for r in agent if "Last task:" in r.last_user_text)
    text = last.all_text()
    # turns 4 and 5 (the 1 MB message, the 1 MB tool result) reach the model compressed, CJK intact
    assert f"压缩的第四轮：用户发来约 1 MB 的{CJK}" in text and BIG_START not in text, len(text)
    assert len(text.encode()) < 200_000, len(text.encode())


# --------------------------------------------------------------------------- two sessions

def test_two_sessions_in_one_process_compress_at_once_each_into_its_own_log(scenario):
    o = scenario("two_sessions")
    check_common(o)
    for label, other in (("a", "-B"), ("b", "-A")):
        texts = "\n".join(text_of(e["data"]) for e in o.sessions[label] if e["type"] == "user/message")
        assert f"COMPRESSED-USER{other}" not in texts and f"COMPRESSED-USER-{label.upper()}" in texts, label
    # the two sessions' workers did overlap in time
    spans = {}
    for r in o.requests:
        if is_worker(r):
            key = "-B" if "Task B" in r.all_text() else "-A"
            spans.setdefault(key, []).append(r.time)
    assert min(spans["-B"]) < max(spans["-A"]) and min(spans["-A"]) < max(spans["-B"]), spans
