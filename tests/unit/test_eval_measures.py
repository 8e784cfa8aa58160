"""The deterministic measures of `turn-memory eval`: planted-fact survival and history-search
recall, the search they rely on, worker-protocol statistics from the engine log, the cost
estimate, and probes answered and judged by the scripted stand-in."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from surface_builders import LogBuilder, new_id

from turn_memory.config import EngineConfig
from turn_memory.eval import cost, routing
from turn_memory.eval.facts import check_facts, holds, recall
from turn_memory.eval.probes import ProbeAsker, ProbeResult, history_answer, judge, parse_verdict
from turn_memory.eval.protocol_stats import protocol_stats, summarize_raw
from turn_memory.eval.provider import ChatRequest, ProviderDown, Usage
from turn_memory.eval.scenario import Fact, Probe, parse_scenario
from turn_memory.eval.scripted import NOT_FOUND, ScriptedProvider, scripted_hint, scripted_summary
from turn_memory.history.session_history import collect_turns, search, search_hits
from turn_memory.host.dialects import RC8

LOG_LINES = "\n".join(f"12:{i:02d} INFO request {i} took {40 + i}ms" for i in range(60))


def add_turn(b: LogBuilder, task: str, output: str, answer: str) -> None:
    b.turn_no += 1
    b.step_no = 1
    b.add("turn/start", {"turn": b.turn_no})
    b.add("step/start", {"turn": b.turn_no, "step": 1})
    b.user(task)
    call = new_id("call")
    b.assistant("Looking.", tool_calls=(call,))
    b.tool_result(call, output, call_seq=b.tool_call(call))
    b.add("step/end", {"turn": b.turn_no, "step": 1})
    b.step_no = 2
    b.add("step/start", {"turn": b.turn_no, "step": 2})
    b.assistant(answer)
    b.add("step/end", {"turn": b.turn_no, "step": 2})
    b.add("turn/end", {"turn": b.turn_no, "reason": {"kind": "completed"}})


def session():
    b = LogBuilder(RC8)
    add_turn(b, "Read the service log.", LOG_LINES + "\n12:59 WARN pool   exhausted (in_use=12 size=12)", "One pool warning.")
    add_turn(b, "Show the config.", "pool_size = 12\nacquire_timeout_ms = 2500\n", "The pool has 12 connections.")
    add_turn(b, "What now?", "1148ms spent in retries", "We keep the pool at 12 because the database allows 100 connections.")
    return collect_turns(b.events)


FACTS = [Fact("warn", "WARN pool exhausted (in_use=12", 1, "tool-output", "pool exhausted"),
         Fact("size", "pool_size = 12", 2, "tool-output", "pool_size"),
         Fact("why", "the database allows 100 connections", 3, "decision", "database connections"),
         Fact("typo", "pool_size = 13", 2, "tool-output", "pool_size")]


def test_a_fact_holds_verbatim_with_whitespace_runs_counted_as_one():
    assert holds("12:59 WARN pool\n  exhausted (in_use=12 size=12)", FACTS[0])
    assert not holds("WARN pool exhausted in_use=12", FACTS[0])  # a paraphrase does not count


def test_fact_checks_report_planting_surface_and_search_rank():
    turns = session()
    checks = check_facts(FACTS, turns, surface_text="User asked; the pool has pool_size = 12 connections.")
    assert [(c.fact.id, c.planted, c.on_surface, c.rank) for c in checks] == [
        ("warn", True, False, 1), ("size", True, True, 1), ("why", True, False, 1), ("typo", False, False, 1)]
    # "typo" is not in turn 2's messages: the scenario did not plant it (reported as a scenario bug)
    assert recall(checks[:3]) == recall(checks[:3]).__class__(facts=3, at1=3, at5=3, first_page=3)


def test_search_matches_word_starts_so_a_number_does_not_match_inside_another():
    turns = session()
    assert [h.record.turn for h in search_hits(turns, "pool_size")] == [2]
    assert [h.record.turn for h in search_hits(turns, "48ms")] == [1]  # "48ms" in turn 1, not inside "1148ms"
    assert [h.record.turn for h in search_hits(turns, "148ms")] == []
    assert [h.record.turn for h in search_hits(turns, "connect")] == [3, 2]  # the start of "connections"; a tie: newest first


def test_search_ranks_by_tf_idf_and_falls_back_to_the_turns_with_the_most_words():
    turns = session()
    # only turn 1 holds both words; a hit lists its words rarest first ("pool" is in every turn)
    assert [(h.record.turn, h.words) for h in search_hits(turns, "pool warning")] == [(1, ("warning", "pool"))]
    # "pool" is in every turn, "database" in turn 3 only: turn 3 ranks first though turn 1 says "pool" more often
    assert [h.record.turn for h in search_hits(turns, "pool database")] == [3]
    assert [h.record.turn for h in search_hits(turns, "pool")] == [2, 1, 3]
    assert [(h.record.turn, h.words) for h in search_hits(turns, "database warning retries")] == [
        (3, ("database", "retries")), (1, ("warning",))]
    text = search(turns, "database warning retries", 1)
    assert text.startswith("No completed turn of this session contains all of: database, warning, retries; 2 contain "
                           "some of them (page 1 of 1, most words first).")
    assert "- turn 3 (2 hits; has database, retries; turn-memory: not compressed)" in text
    assert search(turns, "zebra", 1) == "No completed turn of this session contains any of: zebra."


ENGINE_LOG = """\
2026-12-01 10:00:01,000 INFO turn_memory.turns: session s1 turn 1: finished by worker 1 (fork); 7 -> 2 nodes; landing at the next pre-step
2026-12-01 10:00:01,001 INFO turn_memory.turns: session s1 turn 1: job finished; landing at the next landing point: 1 worker(s) (fork), 2 model request(s), 0.2s
2026-12-01 10:00:01,100 INFO turn_memory.turns: session s1 turn 1: landed (7 -> 2 nodes, 1 worker(s), 2 model request(s))
2026-12-01 10:00:02,000 INFO turn_memory.turns: session s1 turn 2: 144 tokens, below turns.minTurnTokens (600): a worker would cost more than the smaller turn saves; no-op marker, no worker
2026-12-01 10:00:03,000 WARNING turn_memory.turns: session s1 turn 3: gave up: 3 consecutive worker(s) without progress; the turn stays raw (pending, retried on the next start)
2026-12-01 10:00:03,001 INFO turn_memory.turns: session s1 turn 3: job gave up: 3 consecutive worker(s) without progress; the turn stays raw (pending, retried on the next start): 3 worker(s) (fork, spawn, spawn), 9 model request(s), 4.0s
2026-12-01 10:00:04,000 WARNING turn_memory.turns: session s1 turn 4: landing refused, the turn stays raw: seq 40: overlaps [rule: replace-coverage]
2026-12-01 10:00:04,001 INFO turn_memory.turns: session s1 turn 4: job finished: 1 worker(s) (fork), 2 model request(s), 0.1s
2026-12-01 10:00:05,000 INFO turn_memory.turns: session other turn 5: landed (3 -> 2 nodes, 1 worker(s), 2 model request(s))
2026-12-01 10:00:06,000 INFO turn_memory.compaction: session s1 compaction job 1: job finished: 1 worker(s), 2 model request(s), 0.1s
"""


def test_protocol_stats_count_landed_and_attempted_turns_requests_and_why_turns_stayed_raw():
    stats = protocol_stats(ENGINE_LOG, "s1", 5, Counter({"cannot finish yet": 1}))
    assert (stats.turns, stats.attempted, stats.landed, stats.requests) == (5, 3, 1, 13)
    assert stats.requests_per_turn == pytest.approx(13 / 3)
    assert stats.raw == [(2, "no-op: below turns.minTurnTokens (600)"),
                         (3, "gave up: 3 consecutive worker(s) without progress"),
                         (4, "landing refused: seq 40: overlaps [rule: replace-coverage]"),
                         (5, "no worker started before the session ended")]
    assert stats.refusals == Counter({"cannot finish yet": 1, "replace-coverage": 1})
    assert stats.compactions == [("finished", 1, 2)]
    assert summarize_raw([(2, "no-op: x"), (6, "no-op: x"), (3, "gave up: y")]) == "turns 2, 6 (no-op: x); turn 3 (gave up: y)"


HELD_LOG = """\
2026-12-02 00:17:18,644 INFO turn_memory.turns: session s1 turn 1: held; turn 1 (1541 tokens) held: saves ~2,157 over the 2 requests the session is expected to make yet, costs ~33,153 (cached-token units)
2026-12-02 00:17:18,918 INFO turn_memory.turns: session s1 turns 1, 2: held; turns 1, 2 (1894 tokens) held: saves ~5,303 over the 4 requests the session is expected to make yet, costs ~39,225 (cached-token units)
2026-12-02 00:17:19,000 INFO turn_memory.turns: session other turns 1, 2, 3: compressing; turns 1, 2, 3 (9000 tokens): saves ~9 (cached-token units)
2026-12-02 00:17:19,039 INFO turn_memory.turns: session s1 turns 1, 2, 3: held; turns 1, 2, 3 (2642 tokens) held: saves ~9,247 over the 5 requests the session is expected to make yet, costs ~52,090 (cached-token units)
2026-12-02 00:17:20,000 INFO turn_memory.turns: session s1 turn 4: held; turn 4 (144 tokens) held: below turns.minTurnTokens (600) together
2026-12-02 00:17:21,000 INFO turn_memory.turns: session s1 turns 4, 5: compressing; turns 4, 5 (900 tokens): saves ~20,000 over the 9 requests the session is expected to make yet, costs ~10,000 (cached-token units)
2026-12-02 00:17:22,000 INFO turn_memory.turns: session s1 turn 4: landed (5 -> 2 nodes, 1 worker(s), 1 model request(s))
2026-12-02 00:17:22,001 INFO turn_memory.turns: session s1 turn 6: held; turn 6 (300 tokens) held: below turns.minTurnTokens (600) together
"""


def test_turns_the_policy_held_are_reported_as_held_with_its_last_reason():
    stats = protocol_stats(HELD_LOG, "s1", 6, folded=[1, 2, 3])
    why = ("held by the policy: saves ~9,247 over the 5 requests the session is expected to make yet, costs ~52,090 "
           "(cached-token units)")
    # turn 5 was dispatched (with turn 4) and nothing more was logged of it: that is no policy hold
    assert stats.raw == [(1, why), (2, why), (3, why), (5, "dispatched, not landed when the session ended"),
                         (6, "held by the policy: below turns.minTurnTokens (600) together")]
    assert (stats.held, stats.folded, stats.attempted, stats.landed) == ([1, 2, 3, 6], [1, 2, 3], 1, 1)
    assert summarize_raw(stats.raw) == (f"turns 1-3 ({why}); turn 5 (dispatched, not landed when the session ended); "
                                        "turn 6 (held by the policy: below turns.minTurnTokens (600) together)")
    assert stats.to_json()["held"] == [1, 2, 3, 6] and stats.to_json()["folded"] == [1, 2, 3]


def test_turns_a_checkpoint_took_in_their_compressed_form_say_so_not_that_they_never_landed():
    log = HELD_LOG + (
        "2026-12-02 00:17:23,000 INFO turn_memory.compaction: session s1 compaction e91a: folding 40 surface nodes "
        "(seqs 3..90); turn(s) 5 in their finished compressed form\n")
    stats = protocol_stats(log, "s1", 6, folded=[1, 2, 3, 4, 5])
    assert dict(stats.raw)[5] == "compressed, then folded by a checkpoint in that form before it landed"
    assert protocol_stats(log.replace("session s1 compaction", "session other compaction"), "s1", 6).raw[3] == \
        (5, "dispatched, not landed when the session ended")


SNAPSHOT_LOG = """\
2026-12-04 17:25:20,700 INFO turn_memory.turns: session s1 turn 1: landed (9 -> 8 nodes, 1 worker(s), 2 model request(s), in one block with turns 1, 2)
2026-12-04 17:25:20,701 INFO turn_memory.turns: session s1 turn 2: landed (7 -> 7 nodes, 1 worker(s), 2 model request(s), in one block with turns 1, 2)
2026-12-04 17:26:37,725 INFO turn_memory.turns: session s1 turn 3: held; turn 3 (300 tokens) held: below turns.minTurnTokens (600) together
2026-12-04 17:26:37,800 INFO turn_memory.turns: session s1 turn 4 step 1: waited 12 ms for turn 3's compression (landing barrier)
2026-12-04 17:26:38,000 INFO turn_memory.turns: session s1 turns 3, 4: compressing; turns 3, 4 (700 tokens): saves ~9 (cached-token units)
2026-12-04 17:26:38,083 INFO turn_memory.turns: session s1 turn 3: job stopped: 1 worker(s) (fork), 0 model request(s), 0.1s (one worker run for turns 3, 4: workers, requests and time are the batch's)
"""


def test_turns_landed_in_one_block_count_and_what_the_snapshot_turns_end_started_does_not():
    """A 3-turn scenario; turn 4 is the snapshot turn: its end dispatched turn 3 after the memory was measured, and
    whether DSH's exit let that worker start is timing, so it is left out (else turn 3 reads "dispatched" one run and
    "held" the next)."""
    stats = protocol_stats(SNAPSHOT_LOG, "s1", 3)
    assert (stats.attempted, stats.landed, stats.requests) == (2, 2, 4)
    assert stats.raw == [(3, "held by the policy: below turns.minTurnTokens (600) together")] and stats.held == [3]


def _scenario(steps: int = 1, turns: int = 10, **changes):
    """`turns` turns of `steps` agent requests each (the last one says "done", the others run a command)."""
    def turn(n: int) -> dict:
        work = [{"bash": [f"echo {n}.{i}"]} for i in range(steps - 1)]
        return {"user": f"task {n}", "steps": [*work, {"think": "x" * 2500 if n == 1 else "", "say": "done"}]}
    data = {"title": "t", "shape": "s", "raw_tokens": 20_000, "turns": [turn(n) for n in range(1, turns + 1)],
            "facts": [{"id": "f", "text": "done", "turn": 1, "kind": "decision", "query": "done"}],
            "probes": [{"id": f"p{n}", "dimension": "recall", "question": "q", "reference": "r", "facts": ["f"]}
                       for n in range(3)]}
    return parse_scenario({**data, **changes}, Path("x"))


def test_the_estimate_runs_the_compression_policy_over_the_scenarios_turns():
    # 8 turns of 2,000 tokens, 4 agent requests each. Held together after turn n: saving 0.7 x 2,000n x 4n
    # (cached-token units) against cost 10 x (2,000n + 400 per job) + 2,000 per job + 0.3 x 2,000n x 24, jobs
    # of two turns (turns.batchTokens 4,000): at n = 6, 201,600 < 224,400 (held); at n = 7, 274,400 >= 264,800
    plan = cost.policy_plan(_scenario(steps=4, turns=8, raw_tokens=16_000), EngineConfig())
    assert plan.jobs == [[1, 2], [3, 4], [5, 6], [7], [8]] and plan.held == [] and plan.pressure_segments == []
    assert plan.surface == 4_000  # a quarter of each compressed turn stays
    # ten turns of one request each never pay for a worker: all held, /compact folds them
    assert cost.policy_plan(_scenario(), EngineConfig()) == cost.PolicyPlan([], list(range(1, 11)), [], 20_000)
    # the size policy (the run's --set turns.policy=size) gives each a worker as it ends
    size = EngineConfig.model_validate({"turns": {"policy": "size"}})
    assert cost.policy_plan(_scenario(), size).jobs == [[n] for n in range(1, 11)]


def test_the_cost_estimate_is_arithmetic_over_the_scenario_size():
    bill = cost.estimate([_scenario()])
    # expected: no turn worker (above); /compact: one segment worker of one request over the 20,000-token surface
    # (4,000 + 20,000 prompt, 6,666 + 100 out); the hint (1,200 cached + 625); stock's summary (20,000 + 8,000);
    # per probe, from memory: stock 10,000 (snapshot + summary), turn-memory 14,666 (snapshot + the checkpoint); with
    # history: turn-memory 14,666 and one read (+ 2,000); each cached after the first probe; nine judges of 1,200
    assert bill.expected.requests_by_label == {"session-worker": 1, "hint": 1, "summary": 1, "probe": 12, "judge": 9}
    e = bill.expected
    assert (e.requests, e.prompt_tokens, e.hit_tokens, e.output_tokens) == (24, 232_619, 123_862, 14_026)
    assert round(bill.cost(), 8) == 0.03981102  # (123,862 x 0.028 + 108,757 x 0.28 + 14,026 x 0.42) / 1e6
    # at most: a worker of two requests for every turn (the first sends 4,000 + the session so far at 25% + the
    # turn: 82,500 over the ten; the second re-sends it plus the edit), a /compact over a quarter of the raw
    # history, two reads per answer with history, every prompt token a miss
    h = bill.high
    assert h.requests_by_label == {"turn-worker": 20, "session-worker": 2, "hint": 1, "summary": 1, "probe": 15, "judge": 9}
    assert (h.requests, h.prompt_tokens, h.output_tokens) == (48, 394_283, 15_756)
    assert round(bill.upper_bound(), 8) == 0.11701676  # (394,283 x 0.28 + 15,756 x 0.42) / 1e6
    assert bill.to_json()["at_most"] == {"requests": 48, "prompt_tokens": 394_283, "output_tokens": 15_756,
                                         "cost_usd": 0.117, "by_purpose": dict(sorted(h.requests_by_label.items()))}
    # in two parts: what turn-memory adds to a session (the segment worker $0.00956, the hint $0.00038) and the
    # evaluation (stock's summary, the answers, the judge)
    assert bill.to_json()["parts"] == {
        "turn_memory": {"requests": 2, "cost_usd": 0.0099, "at_most": {"requests": 23, "cost_usd": 0.0573}},
        "evaluation": {"requests": 22, "cost_usd": 0.0299, "at_most": {"requests": 25, "cost_usd": 0.0597}}}
    # without read_session_history (sessionHistory.enabled false) each probe is asked from memory only
    no_history = EngineConfig.model_validate({"sessionHistory": {"enabled": False}})
    assert cost.estimate([_scenario()], no_history).expected.requests_by_label == {
        "session-worker": 1, "hint": 1, "summary": 1, "probe": 6, "judge": 6}
    # a session that is not compacted but runs into its window gets one stock summary per threshold's worth
    # (0.8 x 8,000): 4 for 20,000 tokens
    assert cost.estimate([_scenario(compact=False, window=8_000)]).expected.requests_by_label["summary"] == 4


def test_usage_is_priced_at_deepseek_list_prices():
    assert Usage(1_000_000, 1_000_000, 400_000).cost() == pytest.approx(0.4 * 0.028 + 0.6 * 0.28 + 0.42)
    measured = cost.measured([("probe", Usage(100, 10, 60)), ("judge", Usage(50, 5, 0))])
    assert measured.to_json() == {"requests": 2, "prompt_tokens": 150, "cached_tokens": 60, "output_tokens": 15,
                                  "cost_usd": 0.0, "by_purpose": {"judge": 1, "probe": 1}}


def test_scripted_hint_and_summary_are_deterministic_extracts():
    assert scripted_hint("The pool is full. It leaks.\n\nTry a bigger pool? No.") == "- The pool is full.\n- Try a bigger pool?"
    messages = [{"role": "user", "content": "first ask"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "Current runtime context. …"}, {"role": "user", "content": "second ask"},
                {"role": "assistant", "content": "a2"}, {"role": "user", "content": "summarize"}]
    assert scripted_summary(messages) == ("## Primary Request and Intent\n- first ask / second ask\n\n"
                                          "## Current Work\n- a1 / a2")


HISTORY_TOOL = [{"type": "function", "function": {"name": "read_session_history", "parameters": {}}},
                {"type": "function", "function": {"name": "bash", "parameters": {}}}]


def test_the_scripted_answerer_searches_reads_and_quotes_what_it_found():
    turns = session()
    snapshot = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Read the service log."},
                {"role": "assistant", "content": "One pool warning."}, {"role": "user", "content": "CAPTURE"}]
    provider = ScriptedProvider()
    asker = ProbeAsker(provider, snapshot, HISTORY_TOOL, "CAPTURE", turns, 160_000, use_history=True)
    assert [t["function"]["name"] for t in asker.history] == ["read_session_history"]  # only the memory tool
    facts = [FACTS[0], FACTS[3]]
    answered = asker.ask(Probe("p", "recall", "What did the warning say, and what size is the pool?", "r", ("warn", "typo")),
                         facts)
    assert answered.lookups == [{"query": "pool exhausted"}, {"query": "pool_size"}, {"turn": 1}, {"turn": 2}]
    assert answered.answer == "- WARN pool exhausted (in_use=12\n- " + NOT_FOUND
    assert len(answered.usage) == 3 and answered.with_history
    judge(provider, answered, facts)
    assert (answered.score, answered.reason) == (2.5, "1 of 2 reference facts present")


class _Recorder(ScriptedProvider):
    def __init__(self) -> None:
        super().__init__()
        self.tools: list[list[str]] = []

    def complete(self, request: ChatRequest):
        self.tools.append([t["function"]["name"] for t in request.tools])
        return super().complete(request)


def test_from_memory_a_probe_gets_no_tool_even_where_the_snapshot_offers_the_history_search():
    """A fact only the search finds is no memory kept: the scored answer is given without the tool."""
    snapshot = [{"role": "user", "content": "Noted: the pool has pool_size = 12."}, {"role": "user", "content": "CAPTURE"}]
    provider = _Recorder()
    probe = Probe("p", "recall", "What did the warning say, and what size is the pool?", "r", ("warn", "size"))
    answered = ProbeAsker(provider, snapshot, HISTORY_TOOL, "CAPTURE", session(), 160_000).ask(probe, FACTS[:2])
    assert (provider.tools, answered.lookups, answered.with_history) == ([[]], [], False)
    # the warning is in turn 1 of the log, not on the surface: from memory it is not found
    assert answered.answer == f"- {NOT_FOUND}\n- pool_size = 12"
    judge(provider, answered, FACTS[:2])
    assert answered.score == 2.5
    # with the search, both are found (reported apart)
    searched = ProbeAsker(provider, snapshot, HISTORY_TOOL, "CAPTURE", session(), 160_000, use_history=True).ask(
        probe, FACTS[:2])
    assert searched.answer == "- WARN pool exhausted (in_use=12\n- pool_size = 12"


def test_a_provider_that_is_down_stops_the_probes_instead_of_scoring_zero():
    class Down(ScriptedProvider):
        def complete(self, request: ChatRequest):
            raise ProviderDown("http://127.0.0.1:9/v1 m: Connection error.", "check --base-url")

    snapshot = [{"role": "user", "content": "CAPTURE"}]
    probe = Probe("p", "recall", "size?", "r", ("size",))
    with pytest.raises(ProviderDown):
        ProbeAsker(Down(), snapshot, [], "CAPTURE", session(), 160_000).ask(probe, [FACTS[1]])
    with pytest.raises(ProviderDown):
        judge(Down(), ProbeResult(probe, "an answer"), [FACTS[1]])


def test_without_the_tool_the_answer_comes_from_the_snapshot_alone():
    snapshot = [{"role": "user", "content": "The pool has pool_size = 12."}, {"role": "user", "content": "CAPTURE"}]
    asker = ProbeAsker(ScriptedProvider(), snapshot, [], "CAPTURE", session(), 160_000)
    answered = asker.ask(Probe("p", "recall", "size?", "r", ("size",)), [FACTS[1]])
    assert (answered.lookups, answered.answer) == ([], "- pool_size = 12")


def test_history_calls_are_answered_by_the_tools_own_code_errors_included():
    turns = session()
    assert history_answer(turns, '{"turn": 2}', 160_000).startswith("Turn 2, original nodes from the session log")
    assert history_answer(turns, '{"turn": 9}', 160_000) == "turn 9 does not exist; completed turns: 1–3"
    assert history_answer(turns, "{not json", 160_000).startswith("arguments are not valid JSON")


@pytest.mark.parametrize("text,verdict", [
    ('{"score": 4, "reason": "one value missing"}', (4.0, "one value missing")),
    ('Sure.\n```json\n{"score": 2.5, "reason": "half"}\n```', (2.5, "half")),
    ('{"score": 7}', (None, "unreadable verdict: '{\"score\": 7}'")),
    ("no json here", (None, "unreadable verdict: 'no json here'")),
])
def test_the_judges_verdict_is_read_or_reported_unreadable(text, verdict):
    assert parse_verdict(text) == verdict


def test_the_scripted_provider_refuses_what_it_cannot_answer():
    with pytest.raises(ValueError, match="no answer for a agent request"):
        ScriptedProvider().complete(ChatRequest(routing.AGENT, []))
