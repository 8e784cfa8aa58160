"""The segmented worker job end to end (`/compact` with `method: workers`) against the in-memory host."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from fake_host import FakeHost, WorkerScript, attach_workers
from golden_session import turn_positions
from session_builders import SessionBuilder, work_session
from turn_memory.compaction.scope import CompactionScope
from turn_memory.bridge.protocol import AgentOptions, ToolResult, WorkerRunParams, WorkerRunResult
from turn_memory.compaction import segment_prompt
from turn_memory.compaction.failures import CompactionFailed, error_info
from turn_memory.compaction.memory import SessionMemoryEditor
from turn_memory.compaction.segmented import plan_segments, task_chars
from turn_memory.compaction.selection import Selection
from turn_memory.compaction.session_tools import SessionTools, source_heading
from turn_memory.compaction.manual import compact_now
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import estimate_text
from turn_memory.runtime.workers import WorkerRegistry

AGENT = AgentOptions(provider="deepseek-official", model="deepseek-v4-flash")
DIALECTS = [pytest.param(RC8, id="rc8"), pytest.param(V02, id="v02")]
FINISH = ("finish_session_segment", {})


def config(**compaction: Any) -> EngineConfig:
    return EngineConfig.model_validate({"compaction": compaction})


def fold(revision: int, target: str, user: str, assistant: str, to: str | None = None) -> tuple[str, dict[str, Any]]:
    args: dict[str, Any] = {"expected_revision": revision, "from": target, "nodes": [
        {"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}
    if to is not None:
        args["to"] = to
    return ("replace_session_memory", args)


def segment_worker(k: int, revision: int) -> WorkerScript:
    return WorkerScript([fold(revision, f"P{k}", f"USER-{k}: fix module {k}.", f"ASSISTANT-{k}: fixed module {k}."),
                         FINISH])


def compact(host: FakeHost, cfg: EngineConfig, scripts: list[WorkerScript], registry: WorkerRegistry | None = None):
    registry = registry or WorkerRegistry()
    started = attach_workers(host, registry, scripts)
    result = asyncio.run(asyncio.wait_for(compact_now(CompactionScope(host.session, host, cfg, AGENT, registry), "cmd-1"), 10))
    return result, started


def transactions(events: list[dict[str, Any]]) -> list[list[str]]:
    out: list[list[str]] = []
    for e in events:
        if e["type"] == "compaction/start":
            out.append([])
        if out and (e["type"].startswith("compaction/") or e.get("surfaceOp") not in (None, "append")):
            out[-1].append(e["type"])
    return out


def checkpoint_body(host: FakeHost) -> str:
    text = host.log.message_of(host.log.nodes[0] if host.dialect is RC8 else host.log.nodes[1])["content"][0]["text"]
    match = re.search(r"<compacted-summary>\n(.*)\n</compacted-summary>", text, re.S)
    assert match, text
    return match.group(1)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_one_segment_is_folded_by_one_spawn_and_committed_as_one_transaction(dialect):
    b = work_session(dialect, 3, system=dialect is V02)
    host = FakeHost(dialect, b.events)
    before_nodes, before = list(host.log.nodes), len(host.log)
    result, started = compact(host, config(), [segment_worker(1, 0)])

    assert [s["mode"] for s in started] == ["spawn"]  # its task carries the segment: no fork copies the session
    spec = started[0]
    assert {t["name"] for t in spec["tools"]} == {"list_session_segments", "read_session_source", "read_session_memory",
                                                  "search_session_memory", "replace_session_memory",
                                                  "finish_session_segment", "read_memory_image"}
    assert "assigned to you" in spec["prompt"] and "### S1.1 · turn 1 · user · human\nTurn 1:" in spec["prompt"]
    assert "You start fresh" in spec["prompt"] and spec["maxRequests"] == 32
    assert "memory editor" in spec["persona"]
    assert transactions(host.log.events[before:]) == [
        ["compaction/start", "compaction/summary", "user/message", "compaction/end"]]
    assert checkpoint_body(host) == "User: USER-1: fix module 1.\n\nAssistant: ASSISTANT-1: fixed module 1."
    # turns 1-2 are folded, turn 3 is kept verbatim after the checkpoint
    assert {b.turn_of[s] for s in result.shadowedSeqs} == {1, 2}
    kept = [s for s in before_nodes if b.turn_of.get(s) == 3]
    assert host.log.nodes[-len(kept):] == kept and len(host.log.nodes) == len(kept) + 1 + (dialect is V02)
    assert result.summary[0]["text"] == checkpoint_body(host)
    SessionLog(dialect, host.log.events)  # the log still reloads


def test_several_segments_are_processed_in_order_into_one_chronological_checkpoint():
    b = work_session(RC8, 4)
    host = FakeHost(RC8, b.events)
    before = len(host.log)
    scripts = [segment_worker(1, 0), segment_worker(2, 1), segment_worker(3, 2)]
    result, started = compact(host, config(segmentTokens=100), scripts)

    assert [s["mode"] for s in started] == ["spawn", "spawn", "spawn"]
    assert [s["label"] for s in started] == [f"turn-memory compaction S{k}" for k in (1, 2, 3)]
    # the second worker sees what the first established, and the segment list with S1 done
    assert "USER-1: fix module 1." in started[1]["prompt"] and "What earlier segments established" in started[1]["prompt"]
    assert re.search(r"- S1 · turns 1-1 .* · done ·", started[1]["prompt"])
    assert "What earlier segments established" not in started[0]["prompt"]
    assert transactions(host.log.events[before:]) == [
        ["compaction/start", "compaction/summary", "user/message", "compaction/end"]]
    body = checkpoint_body(host)
    assert body == "\n\n".join(f"User: USER-{k}: fix module {k}.\n\nAssistant: ASSISTANT-{k}: fixed module {k}."
                               for k in (1, 2, 3))
    assert {b.turn_of[s] for s in result.shadowedSeqs} == {1, 2, 3}
    SessionLog(RC8, host.log.events)


def test_a_later_segment_may_rewrite_earlier_memory():
    host = FakeHost(RC8, work_session(RC8, 3).events)
    second = WorkerScript([fold(1, "M2", "USER-2: and the lexer.", "ASSISTANT-1+2: parser and lexer fixed.", to="P2"),
                           FINISH])
    compact(host, config(segmentTokens=100), [segment_worker(1, 0), second])
    assert checkpoint_body(host) == ("User: USER-1: fix module 1.\n\nUser: USER-2: and the lexer.\n\n"
                                     "Assistant: ASSISTANT-1+2: parser and lexer fixed.")


def test_a_worker_that_stops_after_progress_is_continued_by_a_spawn():
    host = FakeHost(RC8, work_session(RC8, 3).events)
    partial = WorkerScript([("replace_session_memory", {"expected_revision": 0, "from": "P1", "nodes": [
        {"role": "user", "content": "PARTIAL: fix things."}]})], stop="completed")
    spawn = WorkerScript([fold(1, "M1", "SPAWN-USER: fix the parser.", "SPAWN-ASSISTANT: fixed."), FINISH])
    _, started = compact(host, config(workerAttempts=1), [partial, spawn])

    assert [s["mode"] for s in started] == ["spawn", "spawn"]
    prompt = started[1]["prompt"]
    assert "You start fresh" in prompt and "### S1.1 · turn 1 · user · human\nTurn 1:" in prompt  # the segment's text itself
    assert "Compiling src/" in prompt and "revision 1" in prompt and "PARTIAL: fix things." in prompt
    assert started[0]["workerId"] != started[1]["workerId"]
    assert checkpoint_body(host) == "User: SPAWN-USER: fix the parser.\n\nAssistant: SPAWN-ASSISTANT: fixed."


def test_a_task_carries_its_whole_segment_whatever_one_read_returns():
    """One request per segment: a relayed model cut at `readLimitChars` read on twice."""
    host = FakeHost(RC8, work_session(RC8, 3, log_lines=400).events)
    scripts = [WorkerScript([]), segment_worker(1, 0)]
    _, started = compact(host, config(readLimitChars=2000), scripts)
    assert [s["mode"] for s in started] == ["spawn", "spawn"]
    first, second = (spec["prompt"] for spec in started)
    assert "cut at character" not in first + second and len(second) > 10 * 2000
    assert first.count("Compiling src/") == second.count("Compiling src/") == 926  # every log line of turns 1-2 (turn 3 stays)
    assert task_chars(config().compaction) == 32000 * 4
    assert task_chars(config(readLimitChars=200_000).compaction) == 200_000


def test_a_segment_longer_than_the_task_carries_is_cut_where_a_read_goes_on():
    log = SessionLog(RC8, work_session(RC8, 3, log_lines=400).events)
    segments, sources = plan_segments(log, Selection([s for t in (1, 2, 3) for s in turn_positions(log, t)]), 32000)
    tools = SessionTools(SessionMemoryEditor(len(segments)), segments, sources, assigned=1)
    editor = tools.editor
    body = "\n\n".join(f"{source_heading(n)}\n{n.text}" for n in tools.sources[segments[0].index])
    prompt = segment_prompt.task(tools, editor, tools.segments[0], spawn=True, text_chars=2000, handoff_chars=0)
    assert body[:2000] + f"\n[… cut at character 2000 of {len(body)}: read the rest with read_session_source, " \
                         "offset=2000]" in prompt
    assert f"about {segment_prompt.target_tokens(segments[0].tokens):,} tokens in all (its\nsources take " \
           f"~{segments[0].tokens:,})" in prompt


def test_an_earlier_checkpoint_among_the_sources_counts_whole_in_the_target_length():
    """A background fold takes the last checkpoint with each new turn: asked for 15% of it
    again at every fold, the oldest history would shrink a little more each time."""
    assert segment_prompt.target_tokens(5_502) == 850
    assert segment_prompt.target_tokens(5_502, checkpoint_tokens=2_014) == 2_550  # 2,014 + 15% of 3,488
    assert segment_prompt.target_tokens(900) == segment_prompt.target_tokens(900, 0) == 200  # the least asked for
    assert segment_prompt.target_tokens(1_000, checkpoint_tokens=5_000) == 1_000  # never over the sources
    host = FakeHost(RC8, work_session(RC8, 3).events)
    compact(host, config(), [segment_worker(1, 0)])
    first = [t for t in host.log.nodes if host.log.index.origins.get(t, ("", 0))[0] == "checkpoint"]
    _, started = compact(host, config(retainTurns=0), [segment_worker(1, 0)])
    carried = sum(estimate_text(host.log.message_of(s)["content"][0]["text"]) for s in first)
    assert f"of which ~{carried:,} are an earlier checkpoint: carry\nwhat it records" in started[0]["prompt"]


def test_progress_resets_the_budget_and_its_exhaustion_closes_with_the_error():
    b = work_session(RC8, 3)
    host = FakeHost(RC8, b.events)
    nodes, before = list(host.log.nodes), len(host.log)
    progress = WorkerScript([("replace_session_memory", {"expected_revision": 0, "from": "P1",
                                                         "nodes": [{"role": "user", "content": "something"}]})])
    junk = WorkerScript([("replace_session_memory", f"{{broken {k}") for k in range(40)])  # never the same call twice
    reader = WorkerScript([("read_session_memory", {})])
    never = WorkerScript([FINISH])
    with pytest.raises(CompactionFailed) as excinfo:
        compact(host, config(workerAttempts=2, maxWorkerRequests=5), [progress, junk, reader, never])
    assert error_info(excinfo.value).manual == "summary"
    assert "S1: 2 consecutive workers made no progress" in str(excinfo.value)
    # the fork made progress; then two without: three workers in all, the fourth never started
    assert len(progress.answers) == 1 and not progress.answers[0].is_error
    assert len(junk.answers) == 5 and all(a.is_error and "not valid JSON" in a.text for a in junk.answers)
    assert len(reader.answers) == 1 and "revision 1" in reader.answers[0].text
    assert never.answers == []
    assert transactions(host.log.events[before:]) == [["compaction/start", "compaction/end"]]
    end = host.log.events[-1]
    assert end["data"]["error"].startswith("summary: S1: 2 consecutive workers made no progress")
    assert end["data"]["compactionId"] == host.log.events[before]["data"]["compactionId"]
    assert host.log.nodes == nodes  # the surface is unchanged


def test_a_segment_whose_workers_always_progress_but_never_finish_is_capped():
    """The same worker run as a turn's: progress resets the no-progress budget, never the
    segment's worker cap, and the reason names the key that set it."""
    host = FakeHost(RC8, work_session(RC8, 3).events)
    nodes = list(host.log.nodes)
    first = WorkerScript([fold(0, "P1", "USER: v1.", "ASSISTANT: v1.")])
    rewrites = [WorkerScript([fold(k, f"M{2 * k - 1}", f"USER: v{k + 1}.", f"ASSISTANT: v{k + 1}.", to=f"M{2 * k}")])
                for k in range(1, 9)]
    with pytest.raises(CompactionFailed) as excinfo:
        compact(host, config(maxWorkers=3), [first, *rewrites])
    assert str(excinfo.value) == "S1: 3 workers, the cap (compaction.maxWorkers); the conversation is unchanged"
    assert [len(s.answers) for s in rewrites[:3]] == [1, 1, 0]  # three workers in all, each an accepted edit
    assert all(not a.is_error for s in (first, *rewrites[:2]) for a in s.answers)
    assert host.log.nodes == nodes


def test_a_worker_that_fails_to_run_counts_as_no_progress():
    host = FakeHost(RC8, work_session(RC8, 3).events)
    registry = WorkerRegistry()
    modes: list[str] = []
    attach_workers(host, registry, [segment_worker(1, 0)])
    play = host.run_worker

    async def flaky(params: WorkerRunParams, timeout: float) -> WorkerRunResult:
        modes.append(params.mode)
        if len(modes) == 1:
            raise TimeoutError("worker timed out")
        return await play(params, timeout)

    host.run_worker = flaky  # type: ignore[method-assign]
    asyncio.run(compact_now(CompactionScope(host.session, host, config(), AGENT, registry), None))
    assert modes == ["spawn", "spawn"] and "USER-1" in checkpoint_body(host)


def test_dropping_an_image_marker_is_refused_at_finish_and_keeping_it_commits():
    def image_host() -> FakeHost:
        b = SessionBuilder(RC8, 5)
        b.preamble()
        b.work_turn(image="sha256:" + "4" * 64)
        b.work_turn()
        b.work_turn()
        return FakeHost(RC8, b.events)

    marker = ('<memory-image ref="sha256:' + "4" * 64 + '" type="image/png" size="640x480" bytes="51234" '
              'name="screen.png" />')
    host = image_host()
    nodes, before = list(host.log.nodes), len(host.log)
    # the worker folds without the marker: its finish is refused, naming the marker; it never
    # fixes it, so the compaction closes with an error and the surface is untouched
    with pytest.raises(CompactionFailed):
        compact(host, config(workerAttempts=1), [segment_worker(1, 0)])
    assert transactions(host.log.events[before:]) == [["compaction/start", "compaction/end"]]
    assert host.log.nodes == nodes

    host = image_host()
    script = WorkerScript([fold(0, "P1", "Screenshot of the failure.", "Fixed it."), FINISH,
                           ("replace_session_memory", {"expected_revision": 1, "from": "M1",
                                                       "nodes": [{"role": "user", "content": f"Screenshot: {marker}"}]}),
                           FINISH])
    _, started = compact(host, config(), [script])
    assert started[0]["mode"] == "spawn"
    refused = script.answers[1]
    assert refused.is_error and "image markers were dropped" in refused.text and marker in refused.text
    assert marker in checkpoint_body(host)
    # the task lists the segment's markers in full (catalog previews may cut them)
    assert marker in started[0]["prompt"]


def test_a_checkpoint_no_shorter_than_its_sources_cannot_finish_until_the_worker_folds_it():
    """Issue 29: the worker is told at its finish, with both sizes, and the same worker can fold
    it and finish; the commit then replaces the history."""
    b = SessionBuilder(RC8)
    b.preamble()
    for _ in range(2):
        b.work_turn(calls=0, task="please fix the parser " * 40)
    host = FakeHost(RC8, b.events)
    script = WorkerScript([fold(0, "P1", "x " * 3000, "y " * 3000), FINISH,
                           fold(1, "M1", "Fix the parser (asked twice).", "Fixed it.", to="M2"), FINISH])
    result, started = compact(host, config(), [script])
    refused = script.answers[1]
    assert refused.is_error and refused.text.startswith(
        "cannot finish yet: the checkpoint so far is 12,000 characters, not shorter than the 1,031 characters of the sources it replaces. Fold it")
    assert len(started) == 1 and script.answers[3].text == "Segment S1 accepted. Your work is done."
    assert checkpoint_body(host) == "User: Fix the parser (asked twice).\n\nAssistant: Fixed it."
    assert result.shadowedTokenCount > 0


def test_a_worker_that_never_folds_fails_the_compaction_and_changes_nothing():
    b = SessionBuilder(RC8)
    b.preamble()
    for _ in range(2):
        b.work_turn(calls=0, task="please fix the parser " * 40)
    host = FakeHost(RC8, b.events)
    nodes = list(host.log.nodes)
    bloated = [WorkerScript([fold(0, "P1", "x " * 3000, "y " * 3000), FINISH]) for _ in range(3)]
    with pytest.raises(CompactionFailed) as failed:
        compact(host, config(), bloated)
    assert "made no progress" in failed.value.message
    assert host.log.nodes == nodes and host.log.events[-1]["type"] == "compaction/end"


def test_tool_calls_of_a_worker_that_is_no_longer_active_are_refused():
    """Only the worker running now is answered, and only until its finish is accepted."""
    host = FakeHost(RC8, work_session(RC8, 3).events)
    registry = WorkerRegistry()
    answers: dict[str, ToolResult] = {}
    job_ids: list[str] = []

    async def worker(params: WorkerRunParams, timeout: float) -> WorkerRunResult:
        spec = params.model_dump()
        job_ids.append(spec["jobId"])

        def call(name: str, worker_id: str, tool: str, args: dict[str, Any]) -> None:
            answers[name] = registry.call(spec["jobId"], worker_id, tool, args)

        call("stranger", "c0", "list_session_segments", {})
        call("edit", spec["workerId"], *fold(0, "P1", "USER: fix it.", "ASSISTANT: fixed."))
        call("bad finish", spec["workerId"], "finish_session_segment", {"x": 1})
        call("finish", spec["workerId"], "finish_session_segment", {})
        call("after its finish", spec["workerId"], "read_session_memory", {})
        return WorkerRunResult(stop="concluded", requests=5)

    host.run_worker = worker  # type: ignore[method-assign]
    result = asyncio.run(compact_now(CompactionScope(host.session, host, config(), AGENT, registry), None))
    assert result is not None and checkpoint_body(host) == "User: USER: fix it.\n\nAssistant: ASSISTANT: fixed."
    stranger, edit, bad, done, after = (answers[k] for k in ("stranger", "edit", "bad finish", "finish",
                                                             "after its finish"))
    assert stranger.is_error and stranger.conclude and "no longer active" in stranger.text
    assert not edit.is_error and not edit.conclude
    assert bad.is_error and not bad.conclude  # a refused call never ends the worker
    assert done.conclude and not done.is_error
    assert after.is_error and after.conclude and "no longer active" in after.text
    # once the job is over the registry tells stragglers to stop
    late = registry.call(job_ids[0], "c1", "list_session_segments", {})
    assert late.is_error and late.conclude and "job is over" in late.text


def test_restating_the_same_memory_is_no_progress():
    """A worker that replaces memory nodes with exactly what they say under new ids leaves the
    working checkpoint as it was: no progress, so the segment's budget runs out instead of
    every such worker resetting it until the worker cap."""
    host = FakeHost(RC8, work_session(RC8, 3).events)
    first = WorkerScript([fold(0, "P1", "USER: fix the modules.", "ASSISTANT: fixing them.")])
    restate = [WorkerScript([fold(k, f"M{2 * k - 1}", "USER: fix the modules.", "ASSISTANT: fixing them.",
                                  to=f"M{2 * k}")]) for k in range(1, 10)]
    with pytest.raises(CompactionFailed, match="3 consecutive workers made no progress"):
        _, started = compact(host, config(), [first, *restate])
    assert [len(s.answers) for s in restate[:3]] == [1, 1, 1] and all(not a.is_error for a in restate[0].answers)
    assert restate[3].answers == []  # 1 + 3 workers, not maxWorkers (8)


def test_a_compaction_stops_at_its_request_budget_over_all_segments(caplog):
    host = FakeHost(RC8, work_session(RC8, 4).events)
    before = len(host.log)
    reader = WorkerScript([("read_session_memory", {})] * 10)
    registry = WorkerRegistry()
    started = attach_workers(host, registry, [segment_worker(1, 0), reader, WorkerScript([FINISH])])
    with caplog.at_level("INFO", logger="turn_memory.compaction"), pytest.raises(CompactionFailed) as excinfo:
        asyncio.run(compact_now(CompactionScope(host.session, host, config(segmentTokens=100, maxJobRequests=5,
                                                                    maxWorkerRequests=4), AGENT, registry), None))
    assert "5 model requests, the compaction's budget (compaction.maxJobRequests)" in str(excinfo.value)
    assert [s["maxRequests"] for s in started] == [4, 3]  # segment 1 used 2; segment 2's worker got the rest
    assert "job failed: S2: 5 model requests" in caplog.text and "2 worker(s), 5 model request(s)" in caplog.text
    assert transactions(host.log.events[before:]) == [["compaction/start", "compaction/end"]]


def test_a_compaction_stops_at_its_wall_clock_budget():
    host = FakeHost(RC8, work_session(RC8, 3).events)
    timeouts: list[float] = []

    async def slow(params: WorkerRunParams, timeout: float) -> WorkerRunResult:
        timeouts.append(timeout)
        await asyncio.sleep(min(timeout, 0.2))
        return WorkerRunResult(stop="completed", requests=1)

    host.run_worker = slow  # type: ignore[method-assign]
    with pytest.raises(CompactionFailed, match="the compaction's wall-clock budget"):
        asyncio.run(compact_now(CompactionScope(host.session, host, config(jobTimeoutS=0.3), AGENT, WorkerRegistry()), None))
    assert len(timeouts) == 2 and timeouts[1] < 0.2
