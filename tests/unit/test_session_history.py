"""read_session_history: what the main agent reads back of its own original turns."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from surface_builders import LogBuilder
from turn_builders import Shape, add_turn, completed_turn_log

from turn_memory.bridge.protocol import AgentOptions
from turn_memory.catalog import public_tools
from turn_memory.config import EngineConfig
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.public_tools import PublicCall, PublicTools


def _call(log: SessionLog, args: Any, **config: Any) -> tuple[str, bool]:
    session = MirroredSession(id="s1", dialect=log.dialect, peer=None, log=log)
    call = PublicCall(session=session, args=args, turn=None, call_id="c1", agent_options=AgentOptions(),
                      config=EngineConfig.model_validate(config), port=None)  # type: ignore[arg-type]
    answer = asyncio.run(PublicTools(public_tools()).call("read_session_history", call))
    return answer.text, answer.is_error


def _log(dialect=RC8, turns: int = 3) -> SessionLog:
    b = LogBuilder(dialect)
    for n in range(1, turns + 1):
        add_turn(b, Shape(steps=[(1, True, False), (0, False, False)]), f"task number {n}")
    return SessionLog(dialect, b.events)


@pytest.mark.parametrize("dialect", [RC8, V02])
def test_catalog_lists_completed_turns_newest_first_with_sizes_and_state(dialect) -> None:
    log, _ = completed_turn_log(dialect, Shape(), prior_turns=2, pending=True, next_turn_open=True)
    text, error = _call(log, {})
    assert not error
    lines = [line for line in text.splitlines() if line.startswith("- turn")]
    assert [line.split(":")[0] for line in lines] == ["- turn 3", "- turn 2", "- turn 1"]  # open turn 4 absent
    assert "turn-memory: pending" in lines[0] and "turn-memory: not compressed" in lines[1]
    assert "reasoning 180 chars" in lines[0] and "1 tool calls" in lines[0]


def test_catalog_pages() -> None:
    text, _ = _call(_log(turns=25), {})
    assert "page 1 of 2" in text and "- turn 25" in text and "- turn 5:" not in text
    text, _ = _call(_log(turns=25), {"page": 2})
    assert "- turn 5:" in text and "- turn 1:" in text
    text, error = _call(_log(turns=25), {"page": 3})
    assert error and "2 page(s)" in text


def test_reading_a_turn_shows_original_nodes_in_order_with_reasoning_and_tool_results() -> None:
    text, error = _call(_log(), {"turn": 2})
    assert not error
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### user", "### assistant", "### tool result", "### assistant"]
    assert "task number 2" in text and "task number 1" not in text
    assert "[reasoning]\nthink think" in text
    assert "output output" in text and "[end of turn]" in text
    assert "Current runtime context" not in text  # host snapshot is not conversation


def test_reading_survives_compression_landing_and_checkpoint() -> None:
    # the pending marker replaced the first user node: the read still shows the original
    log, _ = completed_turn_log(RC8, Shape(), prior_turns=1, pending=True)
    text, _ = _call(log, {"turn": 2})
    assert text.count("### user") == 1 and "please fix the parser" in text


def test_long_turn_is_cut_and_continued_by_offset() -> None:
    b = LogBuilder(RC8)
    add_turn(b, Shape(steps=[(3, True, False), (2, True, True), (0, False, False)]))
    log = SessionLog(RC8, b.events)
    full, _ = _call(log, {"turn": 1}, sessionHistory={"maxReadChars": 1000000})
    first, _ = _call(log, {"turn": 1}, sessionHistory={"maxReadChars": 1000})
    assert "more characters: call read_session_history with turn=1 and offset=1000" in first
    second, _ = _call(log, {"turn": 1, "offset": 1000}, sessionHistory={"maxReadChars": 1000})
    body = lambda t: t.split("\n\n", 1)[1].rsplit("\n\n[", 1)[0]  # noqa: E731
    assert body(first) + body(second) == body(full)[: len(body(first)) + len(body(second))]


@pytest.mark.parametrize("args, expected", [
    ({"turn": 9}, "turn 9 does not exist; completed turns: 1–3"),
    ({"turn": 2, "offset": 10**7}, "past the end of turn 2"),
    ({"turn": "two"}, "invalid arguments"),
    ({"session": "other"}, "invalid arguments"),
    ({"query": "   "}, "query is empty"),
])
def test_bad_input_gets_a_clear_error(args, expected) -> None:
    text, error = _call(_log(), args)
    assert error and expected in text


def test_open_turn_is_not_readable() -> None:
    log, _ = completed_turn_log(RC8, Shape(), prior_turns=1, next_turn_open=True)
    text, error = _call(log, {"turn": 3})
    assert error and "still open" in text


def test_query_finds_a_fact_only_the_raw_turn_holds() -> None:
    b = LogBuilder(RC8)
    add_turn(b, Shape(), "set up the build")
    add_turn(b, Shape(), "the deploy key is ZEBRA-4471 keep it")
    add_turn(b, Shape(), "write docs")
    text, error = _call(SessionLog(RC8, b.events), {"query": "zebra-4471 deploy"})
    assert not error
    assert "1 completed turn(s)" in text and "- turn 2" in text and "ZEBRA-4471" in text
    text, _ = _call(SessionLog(RC8, b.events), {"query": "nothing-like-this"})
    assert text.startswith("No completed turn")


def test_tool_is_off_when_disabled() -> None:
    text, error = _call(_log(), {}, sessionHistory={"enabled": False})
    assert error and "unknown tool" in text
