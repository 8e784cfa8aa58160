"""Manual compaction (`/compact`) against an in-memory host that enforces both dialects."""

from __future__ import annotations

import asyncio
import json

import pytest

from fake_host import FakeHost, HostEngine, text_reply
from surface_builders import LogBuilder
from turn_memory.bridge.protocol import CompactSkipped
from turn_memory.turns.lifecycle import Phase
from turn_memory.compaction.scope import CompactionScope
from turn_memory.bridge.protocol import AgentOptions, CompactNowParams, ErrorInfo
from turn_memory.bridge.server import Peer, RemoteError
from turn_memory.compaction.failures import CompactionFailed, Failure, error_info
from turn_memory.compaction.manual import compact_now
from turn_memory.compaction.selection import select_manual_range
from turn_memory.compaction.transaction import framing_tokens
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog
from turn_memory.prompts import read_prompt
from turn_memory.runtime.interfaces import LandingOutcome
from turn_memory.runtime.workers import WorkerRegistry

AGENT = AgentOptions(provider="deepseek-official", model="deepseek-v4-flash")
DIALECTS = [pytest.param(RC8, id="rc8"), pytest.param(V02, id="v02")]


def long_log(dialect, *, turns: int, system: bool = False):
    """Turns with enough text that a checkpoint is genuinely smaller than them."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    if system:
        b.system()
    marks = [b.turn(f"task {i}: " + "please refactor the parser module carefully. " * 20) for i in range(turns)]
    return b.events, marks


SUMMARY = EngineConfig.model_validate({"compaction": {"method": "summary"}})


def run(host: FakeHost, *, config: EngineConfig | None = None, command: str | None = "cmd-1"):
    return asyncio.run(compact_now(CompactionScope(host.session, host, config or SUMMARY, AGENT, WorkerRegistry()), command))


def manual_code(excinfo: pytest.ExceptionInfo[CompactionFailed]) -> str | None:
    """The ManualCompactionError code DSH is answered with."""
    return error_info(excinfo.value).manual


def compaction_events(host: FakeHost, since: int) -> list[str]:
    return [e["type"] for e in host.log.events[since:]]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_compact_folds_older_turns_into_one_checkpoint(dialect):
    events, marks = long_log(dialect, turns=3, system=dialect is V02)
    host = FakeHost(dialect, events)
    before_nodes = list(host.log.nodes)
    before = len(host.log)

    result = run(host)

    assert compaction_events(host, before) == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    start, summary, replacement, end = host.log.events[before:]
    shadowed = result.shadowedSeqs
    # the two oldest turns are folded, the last turn is kept verbatim
    assert shadowed[0] == marks[0]["user"] and shadowed[-1] == marks[1]["answer"]
    assert before_nodes[before_nodes.index(shadowed[0]):before_nodes.index(shadowed[-1]) + 1] == shadowed
    assert replacement["surfaceOp"] == dialect.replace_op(shadowed[0], shadowed[-1])
    assert replacement["sourceEventSeqs"] == [start["seq"], summary["seq"], *shadowed]
    assert dialect.is_checkpoint_source(replacement["data"]["source"])
    assert replacement["data"]["source"]["sourceCommandId"] == "cmd-1"
    assert "SUMMARY" in replacement["data"]["content"][0]["text"]
    assert summary["data"]["shadowedSeqs"] == shadowed and end["data"].get("error") is None
    # the model sees: [system head], checkpoint, then the retained turn unchanged
    head = [before_nodes[0]] if dialect is V02 else []
    assert host.log.nodes == head + [replacement["seq"]] + before_nodes[before_nodes.index(shadowed[-1]) + 1:]
    assert result.summarySeq == summary["seq"] and result.endSeq == end["seq"]
    assert host.flushes == 1
    # the log still reloads under the host's rules
    SessionLog(dialect, host.log.events)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_summary_request_replays_the_span_then_the_instruction(dialect):
    events, _ = long_log(dialect, turns=2, system=dialect is V02)
    host = FakeHost(dialect, events)
    run(host)
    (request,) = host.llm_requests
    assert request.purpose == "compaction" and request.provider == "deepseek-official"
    roles = [m["role"] for m in request.messages]
    assert roles[-1] == "user" and "checkpoint" in request.messages[-1]["content"][0]["text"]
    if dialect is V02:  # the protected system head is the prompt, replayed first
        assert roles[0] == "system"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_summary_no_smaller_than_the_history_is_a_result_not_an_error(dialect):
    """Issue 21: "too small to fold" is what /compact answers, with the size; the attempt is
    recorded (its bracket closed with the reason) and the surface is unchanged."""
    events, _ = long_log(dialect, turns=2)
    host = FakeHost(dialect, events)
    nodes, before = list(host.log.nodes), len(host.log)
    host.llm_script.append(lambda h: text_reply("x" * 20000))
    result = run(host)
    assert isinstance(result, CompactSkipped) and set(result.model_dump()) == {"skipped"}
    assert result.skipped.startswith("the older history (turn 1, ")
    assert result.skipped.endswith(" tokens) is too small to fold: its checkpoint came out at ~5093 tokens")
    assert compaction_events(host, before) == ["compaction/start", "compaction/end"]
    assert host.log.events[-1]["data"]["error"].startswith("summary:")
    assert host.log.nodes == nodes


@pytest.mark.parametrize("dialect", DIALECTS)
def test_older_history_too_small_to_fold_is_reported_with_its_size_before_any_model_request(dialect, caplog):
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    for i in range(2):
        b.turn(f"ok {i}", tool=False)  # user + answer: a few tokens each
    host = FakeHost(dialect, b.events)
    nodes, before = list(host.log.nodes), len(host.log)
    selection = select_manual_range(host.log, 1)
    shadowed = host.log.tokens(selection.shadowed)
    framing = framing_tokens(dialect, read_prompt("checkpoint"))
    assert shadowed <= framing  # no checkpoint could be smaller
    with caplog.at_level("INFO", logger="turn_memory.compaction"):
        result = run(host)
    assert result == CompactSkipped(skipped=f"the older history (turn 1, {len(selection.shadowed)} nodes, "
                                            f"~{shadowed} tokens) is too small to fold: a checkpoint's framing alone "
                                            f"is ~{framing} tokens")
    assert host.llm_requests == [] and len(host.log) == before and host.log.nodes == nodes  # nothing written
    assert f"/compact: {result.skipped}; nothing changed" in caplog.text


def test_model_error_closes_the_bracket_with_the_error():
    events, _ = long_log(RC8, turns=2)
    host = FakeHost(RC8, events)
    nodes = list(host.log.nodes)
    host.llm_script.append(lambda h: [{"type": "finish", "reason": {"kind": "error", "failure": {"code": "RATE", "message": "slow down"}}}])
    with pytest.raises(CompactionFailed) as excinfo:
        run(host)
    assert manual_code(excinfo) == "summary" and "slow down" in str(excinfo.value)
    assert "slow down" in host.log.events[-1]["data"]["error"]
    assert host.log.nodes == nodes


def test_open_turn_is_busy_and_appends_nothing():
    b = LogBuilder(RC8)
    b.turn("one")
    b.turn("two")
    b.add("turn/start", {"turn": 3})
    host = FakeHost(RC8, b.events)
    before = len(host.log)
    with pytest.raises(CompactionFailed) as excinfo:
        run(host)
    assert manual_code(excinfo) == "busy"
    assert len(host.log) == before


def test_span_rewritten_during_summary_reports_changed():
    events, marks = long_log(RC8, turns=3)
    host = FakeHost(RC8, events)

    def concurrent_rewrite(h: FakeHost):
        # another writer replaces the first user message while the summary is produced
        msg = dict(h.log.events[marks[0]["user"]]["data"], id="other")
        h.host_append("user/message", msg, surfaceOp=RC8.replace_op(marks[0]["user"], marks[0]["user"]),
                      sourceEventSeqs=[marks[0]["user"]])
        return text_reply("SUMMARY")

    host.llm_script.append(concurrent_rewrite)
    nodes_after_rewrite = None
    with pytest.raises(CompactionFailed) as excinfo:
        run(host)
    nodes_after_rewrite = list(host.log.nodes)
    assert manual_code(excinfo) == "changed"
    assert host.log.events[-1]["type"] == "compaction/end" and "changed" in host.log.events[-1]["data"]["error"]
    assert not any(e["type"] == "compaction/summary" for e in host.log.events)
    assert nodes_after_rewrite == host.log.nodes


def test_log_moving_without_touching_the_span_replans_and_commits():
    events, _ = long_log(RC8, turns=3)
    host = FakeHost(RC8, events)

    def title_lands(h: FakeHost):
        h.host_append("session/title", {"title": "t", "messageSeqs": [], "source": {"kind": "fallback"}})
        return text_reply("SUMMARY")

    host.llm_script.append(title_lands)
    result = run(host)
    kinds = [e["type"] for e in host.log.events[result.startSeq:]]
    assert kinds == ["compaction/start", "session/title", "compaction/summary", "user/message", "compaction/end"]
    SessionLog(RC8, host.log.events)


def test_compaction_left_open_by_a_dead_engine_is_closed_first():
    events, _ = long_log(RC8, turns=2)
    b = LogBuilder(RC8, len(events))
    b.events = []
    b.add("compaction/start", {"compactionId": "old", "turn": None})
    host = FakeHost(RC8, events + b.events)
    result = run(host)
    ended = [e for e in host.log.events if e["type"] == "compaction/end"]
    assert ended[0]["data"]["compactionId"] == "old" and "abandoned" in ended[0]["data"]["error"]
    assert ended[1]["data"]["compactionId"] == result.compactionId


def test_second_compaction_while_one_runs_is_busy():
    events, _ = long_log(RC8, turns=3)
    host = FakeHost(RC8, events)

    async def both():
        gate = asyncio.Event()

        async def slow_stream(session_id, request, on_chunks, timeout):
            await gate.wait()
            on_chunks(text_reply("SUMMARY"))

        host.llm_stream = slow_stream  # type: ignore[method-assign]
        first = asyncio.create_task(compact_now(CompactionScope(host.session, host, SUMMARY, AGENT, WorkerRegistry()), None))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        with pytest.raises(CompactionFailed) as excinfo:
            await compact_now(CompactionScope(host.session, host, SUMMARY, AGENT, WorkerRegistry()), None)
        gate.set()
        await first
        return excinfo

    excinfo = asyncio.run(both())
    assert manual_code(excinfo) == "busy"


def test_nothing_to_compact_returns_none():
    b = LogBuilder(RC8)
    b.add("permission/preset", {"preset": "workspace-write"})
    host = FakeHost(RC8, b.events)
    assert run(host) is None
    assert len(host.log) == 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_selection_keeps_tool_pairs_and_the_last_turn(dialect):
    events, marks = long_log(dialect, turns=3, system=dialect is V02)
    log = SessionLog(dialect, events)
    sel = select_manual_range(log, retain_turns=1)
    assert sel is not None
    assert log.balanced_before(sel.start) and log.balanced_after(sel.end)
    assert sel.end == marks[1]["answer"]
    if dialect is V02:
        assert sel.start != log.nodes[0]  # never the system head
    # a single complete turn is still compactable
    events1, marks1 = long_log(dialect, turns=1)
    sel1 = select_manual_range(SessionLog(dialect, events1), retain_turns=1)
    assert sel1 is not None and sel1.end == marks1[0]["answer"]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("method", ["summary", "workers"])
def test_a_compression_ready_but_not_landed_is_folded_in_its_compressed_form_not_wasted(dialect, method, caplog):
    """Issue 21: `/compact` runs with no turn open, where no landing can happen: the checkpoint
    reads the finished compression instead of the raw turn, and that job never lands."""
    from engine_harness import EngineHarness
    from fake_host import SESSION, WorkerScript, attach_workers
    from test_turn_jobs import FINISH, FOLD, complete_turn, one_turn_host
    from turn_memory.turns.recovery import turn_nodes

    host = one_turn_host(dialect)
    harness = EngineHarness()
    turns_cfg = EngineConfig.model_validate({"turns": {"minTurnTokens": 0, "assistantNodes": "rewrite"}})
    checkpoint = ("replace_session_memory", {"expected_revision": 0, "from": "P1", "nodes": [
        {"role": "user", "content": "CKPT: the parser."}, {"role": "assistant", "content": "CKPT: fixed."}]})
    started = attach_workers(host, harness.workers, [WorkerScript([FOLD, FINISH]),
                                                     WorkerScript([checkpoint, ("finish_session_segment", {})])])
    cfg = EngineConfig.model_validate({"compaction": {"method": method, "retainTurns": 0}})
    host.llm_script.append(lambda h: text_reply("SUMMARY of the compressed turn."))

    async def scenario():
        await complete_turn(host, harness.turns, turns_cfg)
        await harness.turns.drained(SESSION, 5)
        job = harness.turns.job(SESSION, 1)
        assert job.phase is Phase.READY  # ready; no turn is open to land it in
        with caplog.at_level("INFO"):
            result = await compact_now(CompactionScope(host.session, host, cfg, AGENT, harness.workers, harness.turns), "cmd-1")
        return job, result

    job, result = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert result.shadowedSeqs and turn_nodes(host.log, 1) == []  # the checkpoint took the turn
    if method == "summary":
        (request,) = host.llm_requests
        read = " ".join(json.dumps(m) for m in request.messages)
    else:
        read = started[1]["prompt"]
    assert "Fixed parse() on empty input." in read and "step 1 answer" not in read
    assert job.phase is Phase.FOLDED and job.landing is LandingOutcome.FOLDED
    assert job.lifecycle.reason == f"into the checkpoint at seq {result.summarySeq + 1}"
    assert harness.turns.job(SESSION, 1) is None
    assert "turn(s) 1 in their finished compressed form" in caplog.text
    assert SessionLog(dialect, host.log.events).reload_problems == []


#: every compaction failure and the one wire error it is answered with (code, ManualCompactionError code)
WIRE = [(Failure.BUSY, "compaction-busy", "busy"), (Failure.CANCELLED, "compaction-cancelled", "cancelled"),
        (Failure.CHANGED, "compaction-changed", "changed"), (Failure.SUMMARY, "compaction-summary", "summary"),
        (Failure.COMMIT, "compaction-commit", "commit"), (Failure.PERSISTENCE, "compaction-persistence", "persistence"),
        (Failure.NO_OPEN_TURN, "no-open-turn", None), (Failure.BAD_RANGE, "bad-range", None)]


@pytest.mark.parametrize(("failure", "code", "manual"), WIRE, ids=[f.value for f, _, _ in WIRE])
def test_each_failure_has_one_wire_error(failure, code, manual):
    info = error_info(CompactionFailed(failure, "why it failed"))
    assert (info.code, info.message, info.manual) == (code, "why it failed", manual)


def test_the_wire_table_covers_every_failure():
    assert [f for f, _, _ in WIRE] == list(Failure)


def test_the_engine_answers_a_refused_compact_with_the_wire_error():
    """What the shim receives when /compact is refused: DSH's ManualCompactionError code, the
    plain message, and nothing appended."""
    b = LogBuilder(RC8)
    b.turn("one")
    b.turn("two")
    b.add("turn/start", {"turn": 3})
    host = FakeHost(RC8, b.events)
    before = len(host.log)
    engine = HostEngine(host, SUMMARY)
    params = CompactNowParams(sessionId=host.session.id, logLength=len(host.log), agentOptions=AGENT,
                              sourceCommandId="cmd-1")
    with pytest.raises(RemoteError) as refused:
        asyncio.run(engine.on_call(Peer(b"p"), "compact.now", params, None))
    assert refused.value.info == ErrorInfo(code="compaction-busy", manual="busy",
                                           message="manual compaction: the session already has an open turn")
    assert len(host.log) == before


@pytest.mark.parametrize("dialect", DIALECTS)
def test_compact_right_at_a_turns_end_commits_and_the_folded_turn_owes_no_marker(dialect, caplog):
    """Issue 31: `/compact` issued as a turn ends used to race that turn's pending marker (it
    replaces the turn's first user node) and fail with "the selected history changed: span … is
    no longer contiguous". Nothing lands at turn/end any more: the compaction reads the range as
    it stays, commits, and the turn it folded owes the log no marker at the next landing point."""
    from engine_harness import EngineHarness
    from fake_host import SESSION
    from test_turn_jobs import complete_turn, next_turn_prestep, one_turn_host
    from turn_memory.host.markers import marker_of
    from turn_memory.turns.recovery import turn_nodes

    host = one_turn_host(dialect)
    harness = EngineHarness()
    turns_cfg = EngineConfig.model_validate({"turns": {"minTurnTokens": 0}})
    cfg = EngineConfig.model_validate({"compaction": {"method": "summary", "retainTurns": 0}})
    host.llm_script.append(lambda h: text_reply("SUMMARY of turn 1."))

    async def scenario():
        await complete_turn(host, harness.turns, turns_cfg)
        result = await compact_now(CompactionScope(host.session, host, cfg, AGENT, harness.workers, harness.turns),
                                   "cmd-1")
        await harness.turns.drained(SESSION, 5)
        await next_turn_prestep(host, harness.turns, turns_cfg)
        return result

    with caplog.at_level("INFO"):
        result = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert result.shadowedSeqs and turn_nodes(host.log, 1) == []  # the checkpoint took the turn
    assert [m for e in host.log.events if (m := marker_of(e)) and m[0] == "pending"] == []
    assert harness.turns.sessions[SESSION].owed == {}
    assert "no longer contiguous" not in caplog.text
    assert SessionLog(dialect, host.log.events).reload_problems == []
