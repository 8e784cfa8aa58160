"""The demo's screen: its figures are `inspect`'s, its words say why each turn is as it is, and
its before/after view of a turn adds up to the same tokens."""

from __future__ import annotations

import orjson
import pytest

from test_inspect import header, landed_log
from turn_memory.demo.requests import Costs, TurnCost, costs, owner
from turn_memory.demo.screen import DemoFacts, Showcase, screen, state_text, turn_table
from turn_memory.demo.turn_view import clip, turn_nodes
from turn_memory.devtools.fake_model import FakeRequest
from turn_memory.host.dialects import RC8, V02
from turn_memory.inspection.report import inspect_log


def size(nodes: int, tokens: int) -> dict[str, int]:
    return {"nodes": nodes, "tokens": tokens}


def turn(n: int, state: str, before: tuple[int, int], after: tuple[int, int], folded: int | None = None) -> dict:
    return {"turn": n, "complete": state != "open", "state": state, "before": size(*before), "after": size(*after),
            "current": size(*after), "markers": [], "shadowed_by": folded}


@pytest.mark.parametrize("t, text", [
    (turn(1, "compressed", (5, 1125), (2, 75), folded=118),
     "compressed by a worker; the original stays in the log; then folded into the checkpoint"),
    (turn(2, "pending", (3, 285), (3, 285)),
     "held, raw: below turns.minTurnTokens (600 tok) a worker would cost more than it saves; it waits for later "
     "turns to join it"),
    (turn(3, "no-op", (9, 2400), (9, 2400)), "left as is: its worker found nothing to shorten"),
    (turn(4, "pending", (2, 28), (3, 152)),
     "held, raw: below turns.minTurnTokens (600 tok) a worker would cost more than it saves; it waits for later "
     "turns to join it; +1 msg: DSH's runtime-context snapshot, restated here when the turn before it landed"),
    (turn(5, "pending", (5, 900), (5, 900)),
     "pending: DSH exited before its compression landed; it lands when the session resumes"),
    (turn(6, "open", (1, 20), (1, 20)), "open: the turn did not finish"),
])
def test_each_state_says_what_happened_and_why(t, text):
    assert state_text(t, 600) == text


def test_the_screen_prints_inspects_figures_with_requests_and_cost():
    report = {"turns": [turn(1, "compressed", (5, 1125), (2, 75), folded=118), turn(2, "no-op", (3, 285), (3, 285))],
              "checkpoints": [{"seq": 118, "compaction_id": "c", "range": {"start": 34, "end": 96},
                               "shadowed": {"nodes": 11, "tokens": 629, "turns": [1, 2]}, "tokens": 242,
                               "current": True, "folded_by": None}],
              "surface": size(11, 1235), "before": size(27, 3895), "savings": {"tokens": 2660, "percent": 68.3}}
    costs = Costs({1: TurnCost(2, 2, 0.002, 0.00176), 2: TurnCost(1, 0, 0.00028, 0.0), "/compact": TurnCost(0, 2, 0, 0.00117)})
    facts = DemoFacts(report, {1: "Write notes.md: a one-page reference on the zstd frame format", 2: "Which fact?"},
                      compact_at=2, compact_text="Compacted 11 history items (~629 tokens).", costs=costs,
                      min_turn_tokens=600, showcase=None, read_back="Turn 1, original nodes (4 nodes, 3,982 characters)",
                      read_back_by=6)
    lines = screen(facts)
    assert lines[2] == "     1  Write notes.md: a one-page…         2 + 2 worker     $0.00376    5 msgs ~1,125 tok ->  " \
                       "2 msgs ~   75 tok"
    assert lines[6].startswith("     -  /compact                            0 + 2 worker     $0.00117   Compacted 11")
    assert lines[7] == ("  * the agent's + the turn's worker's model requests; 7 in all, $0.0052 at DeepSeek list prices with "
                        "prefix caching (4 characters per token).")
    assert ("  /compact folded turns 1-2 (11 messages, ~629 tok) into one checkpoint of ~242 tok (61% smaller); the "
            "turns after it stay as they are") in lines
    assert ("  the model now sees 11 messages, ~1,235 tok; the raw log holds 27, ~3,895 tok (68.3% less), and nothing "
            "was deleted from it") in lines
    assert lines[-1] == ("  nothing was lost: turn 6 read turn 1's original back with read_session_history: 4 messages, "
                         "3,982 characters (--verbose prints it)")


@pytest.mark.parametrize("dialect, name", [(RC8, "session.jsonl"), (V02, "session.v4.jsonl")])
def test_a_turns_before_and_after_add_up_to_inspects_figures(tmp_path, dialect, name):
    events = landed_log(dialect)
    path = tmp_path / name
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [header(dialect), *events]))
    (landed,) = [t for t in inspect_log(path)["turns"] if t["state"] == "compressed"]
    before = turn_nodes(events, dialect, landed["turn"], landed["markers"][0]["seq"])
    after = turn_nodes(events, dialect, landed["turn"], len(events))
    assert (len(before), sum(v.tokens for v in before)) == (landed["before"]["nodes"], landed["before"]["tokens"])
    assert (len(after), sum(v.tokens for v in after)) == (landed["after"]["nodes"], landed["after"]["tokens"])
    assert after[0].role == "user" and "Fix the parser." in after[0].preview  # v02 lands one user message
    lines = screen(DemoFacts({**inspect_log(path)}, {}, 0, "", Costs(), 600, Showcase(landed["turn"], before, after),
                             None))
    assert any(line.startswith(f"  turn {landed['turn']} before ({len(before)} msgs") for line in lines)


def test_previews_end_at_a_whole_word():
    assert clip("a reader can decode across frames without rewriting the file", 30) == "a reader can decode across…"
    assert clip("short", 30) == "short"


def test_each_request_belongs_to_its_turn_or_to_compact():
    def request(kind: str, tools: list[str], user: str) -> FakeRequest:
        return FakeRequest(0, kind, "/v1/chat/completions", {}, {
            "messages": [{"role": "user", "content": user}],
            "tools": [{"type": "function", "function": {"name": t}} for t in tools]}, 0.0)

    tasks = {"Count the words in notes.md.": 3}
    assert owner(request("turn", ["bash"], "Count the words in notes.md."), tasks) == (3, False)
    assert owner(request("turn", ["replace_turn_nodes"], "Current nodes of turn 3:\n- n1 …"), tasks) == (3, True)
    assert owner(request("turn", ["replace_session_memory"], "Your segment's nodes"), tasks) == ("/compact", True)
    assert owner(request("title", [], "Count the words in notes.md."), tasks) == (None, False)


def test_rows_and_footer_add_up_and_a_batched_turn_names_the_worker_that_took_it():
    """Issue 32: the rows summed to 19 requests while the footer said 20 (the session title);
    a turn compressed in an earlier turn's batch read "+ 0 worker" beside "compressed by a worker"."""
    def request(kind: str, tools: list[str], user: str) -> FakeRequest:
        return FakeRequest(0, kind, "/v1/chat/completions", {}, {
            "messages": [{"role": "user", "content": user}],
            "tools": [{"type": "function", "function": {"name": t}} for t in tools]}, 0.0)

    tasks = {"Write notes.md.": 1, "Count the words.": 2, "Which fact?": 3}
    requests = [request("turn", ["bash"], "Write notes.md."), request("title", [], "Write notes.md."),
                request("turn", ["bash"], "Count the words."), request("turn", ["bash"], "Which fact?"),
                request("turn", ["replace_turn_nodes"], "Current nodes of turns 1, 2 and 3:\n- t1.n1 …"),
                request("turn", ["replace_turn_nodes"], "Current nodes of turns 1, 2 and 3:\n- t1.n1 …")]
    priced = costs(requests, tasks)
    assert (priced.requests, priced.other_requests, priced.batched_with) == (6, 1, {2: 1, 3: 1})
    report = {"turns": [turn(n, "compressed", (5, 900), (2, 90)) for n in (1, 2, 3)], "checkpoints": [],
              "surface": size(6, 270), "before": size(15, 2700), "savings": {"tokens": 2430, "percent": 90.0}}
    lines = turn_table(DemoFacts(report, {v: k for k, v in tasks.items()}, compact_at=0, compact_text="",
                                 costs=priced, min_turn_tokens=600, showcase=None, read_back=None))
    assert [line[44:59].strip() for line in lines[1:7:2]] == ["1 + 2 worker", "1 + 0 worker", "1 + 0 worker"]
    assert lines[2] == "        compressed by a worker; the original stays in the log"
    assert lines[4] == ("        compressed by turn 1's worker, with turn 1 (its requests count there); the original "
                        "stays in the log")
    assert lines[7].startswith("  * the agent's + the turn's worker's model requests; 5 in the rows and 1 of DSH's "
                               "own (the session's title): 6 in all, $")


def test_ctrl_c_exits_130_quietly_and_removes_the_throwaway_home(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from turn_memory.cli import main
    from turn_memory.demo import command

    root = tmp_path / "demo-home"

    class Interrupted:
        def __init__(self, home, runtime, base_url):  # type: ignore[no-untyped-def]
            self.root = home

        def create(self):  # type: ignore[no-untyped-def]
            (self.root / "profiles" / "tm").mkdir(parents=True)
            (self.root / "profiles" / "tm" / "package.json").write_text("{}")
            return self

        def install_turn_memory(self, *extra):  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt  # Ctrl-C while pnpm installs the shim

    monkeypatch.setattr(command, "ensure_runtime", lambda **_: SimpleNamespace(root=None, dsh=tmp_path / "dsh",
                                                                                version="0.2.1-rc.2"))
    monkeypatch.setattr(command, "DshHome", Interrupted)
    assert main(["demo", "--dsh-home", str(root)]) == 130
    out, err = capsys.readouterr()
    assert err == f"turn-memory demo: interrupted; removed the throwaway home {root}\n" and "Traceback" not in out
    assert not root.exists()

    root.mkdir()  # an empty folder the user named is left as it was given: empty
    assert main(["demo", "--dsh-home", str(root)]) == 130
    assert root.is_dir() and list(root.iterdir()) == []
