"""Thought hints: which blocks get one, when, at most once; what the request holds; how
the turn's compression waits for them; and that a failed, slow or empty hint changes nothing
but the missing prompt section."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from engine_harness import EngineHarness, forward
from fake_host import SESSION, FakeHost, WorkerScript, attach_workers
from surface_builders import LogBuilder
from turn_builders import Shape, add_turn
from turn_memory.config import EngineConfig, ThoughtHintsConfig
from turn_memory.devtools.fake_model import FakeModel
from turn_memory.hints.client import DshLlmHints, EndpointHints, HintFailed, make_client
from turn_memory.hints.detect import durable_blocks, live_block, long_blocks, open_turn_blocks
from turn_memory.hints.service import HintService
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.host.reasoning import Hint, ReasoningBlock, hints_text
from turn_memory.prompts import render_prompt
from turn_memory.turns.recovery import turn_nodes

THOUGHT = "I suspect the lexer drops the final token; ruled out the parser because its tests pass. " * 3
FOLD = ("replace_turn_nodes", {"from": "n1", "to": "n5", "nodes": [
    {"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "Fixed parse() on empty input."}]})
FINISH = ("finish_turn_compression", {})


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def cfg(**hints) -> EngineConfig:
    return EngineConfig.model_validate({"thoughtHints": {"minimumChars": 100, **hints}, "turns": {"minTurnTokens": 0}})


def chunk_event(seq: int, turn: int, step: int, chunk: dict) -> dict:
    return {"type": "assistant/chunk", "seq": seq, "time": 1, "data": {"turn": turn, "step": step, "chunk": chunk}}


def block_end(text: str, index: int = 0) -> dict:
    return {"type": "block-end", "index": index, "block": {"type": "reasoning", "text": text}}


class Scripted:
    """A hint client: records each request, then answers, fails or stalls as told."""

    label = "scripted"

    def __init__(self, reply: str = "- HINT: lexer drops the last token", *, delay: float = 0.0,
                 error: Exception | None = None):
        self.reply, self.delay, self.error = reply, delay, error
        self.calls: list[tuple[str, str]] = []

    async def generate(self, system: str, reasoning: str) -> str:
        self.calls.append((system, reasoning))
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.reply

    def factory(self, *_args):
        return self


def reasoning_turn_host(dialect=RC8, text: str = THOUGHT) -> FakeHost:
    """One completed-but-for-turn/end turn whose first step reasons at length."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    # 0.2's header holds neither the system prompt (a system/message instead) nor an empty tool list
    extra = {} if dialect.protects_system_head else {"system": "agent system", "tools": []}
    b.add("request/header", {"header": {"config": {"provider": "deepseek-official", "model": "deepseek-v4-flash"},
                                        **extra}})
    if dialect.protects_system_head:
        b.system()
    add_turn(b, Shape())
    for event in b.events:
        if event["type"] == "assistant/message":
            for block in event["data"]["message"]["content"]:
                if block["type"] == "reasoning":
                    block["text"] = text
    return FakeHost(dialect, b.events[:-1])


# -- detection (pure) ----------------------------------------------------------------------
def test_only_a_reasoning_block_end_is_a_live_block():
    assert live_block(chunk_event(5, 2, 3, block_end("why"))) == ReasoningBlock(2, 3, "why")
    assert live_block(chunk_event(5, 2, 3, {"type": "reasoning-delta", "index": 0, "text": "why"})) is None
    assert live_block(chunk_event(5, 2, 3, {"type": "block-end", "index": 1, "block": {"type": "text", "text": "x"}})) is None
    assert live_block({"type": "assistant/chunk", "seq": 5, "time": 1, "data": None}) is None  # elided by the shim


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_durable_blocks_are_the_turns_own_and_match_the_live_key(dialect):
    b = LogBuilder(dialect)
    add_turn(b, Shape())  # turn 1 reasons too: it must not leak into turn 2
    add_turn(b, Shape(steps=[(1, True, False), (0, True, False)]))
    blocks = durable_blocks(b.events, 2)
    assert [(x.turn, x.step) for x in blocks] == [(2, 1), (2, 2)]
    live = live_block(chunk_event(99, 2, 1, block_end(blocks[0].text)))
    assert live is not None and live.key == blocks[0].key
    assert durable_blocks(b.events, 3) == []


def test_open_turn_blocks_only_while_the_turn_is_open():
    b = LogBuilder(RC8)
    add_turn(b, Shape())
    assert open_turn_blocks(b.events) == []  # ended
    assert [x.turn for x in open_turn_blocks(b.events[:-1])] == [1]
    add_turn(b, Shape(steps=[(0, False, False)]))
    assert open_turn_blocks(b.events[:-1]) == []  # turn 2 is open and has not reasoned


def test_threshold_and_duplicates():
    long, short = ReasoningBlock(1, 1, "x" * 100), ReasoningBlock(1, 2, "x" * 99)
    assert long_blocks([long, short, long], 100) == [long]
    assert long_blocks([ReasoningBlock(1, 1, " " * 500)], 100) == []  # whitespace is not a thought


def test_config_endpoint_needs_a_model():
    with pytest.raises(ValueError, match="thoughtHints.model"):
        ThoughtHintsConfig(baseUrl="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError):
        EngineConfig.model_validate({"thoughtHints": {"minChars": 3}})  # a typo fails the handshake


# -- the service: live, at most once, recovery -----------------------------------------------
def test_a_long_live_block_is_requested_once_and_the_turn_takes_it():
    host, client, config = reasoning_turn_host(), Scripted(), cfg()
    hints = HintService(client.factory)

    async def scenario():
        end = block_end(THOUGHT)
        host.host_append("assistant/chunk", {"turn": 1, "step": 1, "chunk": end})
        host.host_append("assistant/chunk", {"turn": 1, "step": 1, "chunk": end})  # a repeat changes nothing
        host.host_append("assistant/chunk", {"turn": 1, "step": 2, "chunk": block_end("short")})
        forward(host, config, hints)
        await asyncio.sleep(0.01)
        assert len(client.calls) == 1  # started live, before turn/end
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        forward(host, config, hints)  # the turn-end scan finds it already started
        return await hints.take(host.session, 1, host, config.thoughtHints)

    taken = run(scenario())
    assert len(client.calls) == 1
    system, user = client.calls[0]
    assert user == THOUGHT and system == render_prompt("thought-hints", {})
    assert [(h.block.step, h.text) for h in taken] == [(1, "- HINT: lexer drops the last token")]
    assert hints.started(SESSION, 1) == []  # taken hints are dropped, never kept


@pytest.mark.parametrize("assistants, calls", [("auto", 0), ("rewrite", 1)])
def test_on_02_no_hint_is_asked_while_the_workers_keep_the_reasoning_as_it_is(assistants, calls):
    """0.2's default keeps the assistant nodes, reasoning and all: a hint would help no rewrite."""
    host, client = reasoning_turn_host(V02), Scripted()
    config = EngineConfig.model_validate({**cfg().model_dump(), "turns": {"minTurnTokens": 0,
                                                                          "assistantNodes": assistants}})
    hints = HintService(client.factory)

    async def scenario():
        hints.on_stream(host.session, ReasoningBlock(1, 1, THOUGHT), lambda: host, config)  # 0.2's live path
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        forward(host, config, hints)  # and the turn-end scan of the durable messages
        await asyncio.sleep(0.01)

    run(scenario())
    assert len(client.calls) == calls


def test_after_a_restart_the_job_requests_hints_from_the_durable_messages():
    host, client, config = reasoning_turn_host(), Scripted(), cfg()
    host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    hints = HintService(client.factory)

    async def scenario():
        forward(host, config, hints, reset=True)  # a reset replays history: nothing starts
        await asyncio.sleep(0.01)
        assert client.calls == []
        return await hints.take(host.session, 1, host, config.thoughtHints)

    taken = run(scenario())
    assert [c[1] for c in client.calls] == [THOUGHT] and [h.text for h in taken] == [client.reply]


def test_an_engine_connecting_mid_turn_catches_up_on_the_open_turns_thoughts():
    host, client, config = reasoning_turn_host(), Scripted(), cfg()
    hints = HintService(client.factory)

    async def scenario():
        host.host_append("assistant/chunk", {"turn": 1, "step": 2, "chunk": block_end("later thought " * 20)})
        forward(host, config, hints, reset=True)  # the whole log, turn 1 still open
        await asyncio.sleep(0.01)
        assert sorted(c[1][:5] for c in client.calls) == ["I sus", "later"]
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        forward(host, config, hints)
        await asyncio.sleep(0.01)
        assert len(client.calls) == 2  # nothing requested twice

    run(scenario())


def test_turn_end_starts_hints_an_adapter_never_ended_live():
    host, client, config = reasoning_turn_host(), Scripted(delay=0.05), cfg()
    hints = HintService(client.factory)

    async def scenario():
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        forward(host, config, hints)
        await asyncio.sleep(0.01)
        assert len(client.calls) == 1

    run(scenario())


def test_a_hint_for_a_block_the_turn_does_not_keep_is_dropped():
    host, client, config = reasoning_turn_host(), Scripted(), cfg()
    hints = HintService(client.factory)

    async def scenario():
        # a streamed attempt the host retried: its block never reached an assistant/message
        host.host_append("assistant/chunk", {"turn": 1, "step": 1, "chunk": block_end("abandoned attempt " * 20)})
        forward(host, config, hints)
        return await hints.take(host.session, 1, host, config.thoughtHints)

    taken = run(scenario())
    assert [h.block.text for h in taken] == [THOUGHT]


def test_disabled_or_short_reasoning_sends_nothing():
    for config in (cfg(enabled=False), cfg(minimumChars=10_000),
                   EngineConfig.model_validate({"turns": {"enabled": False}, "thoughtHints": {"minimumChars": 100}})):
        host, client = reasoning_turn_host(), Scripted()
        hints = HintService(client.factory)

        # this iteration's host, config and hints passed in, not read from the loop's variables
        async def scenario(host: FakeHost, config: EngineConfig, hints: HintService):
            host.host_append("assistant/chunk", {"turn": 1, "step": 1, "chunk": block_end(THOUGHT)})
            host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
            forward(host, config, hints)
            return await hints.take(host.session, 1, host, config.thoughtHints) if config.turns.enabled else []

        assert run(scenario(host, config, hints)) == [] and client.calls == []


# -- failure paths: the turn never waits past the timeout and just gets no hint ---------------
@pytest.mark.parametrize("client", [
    Scripted(error=RuntimeError("connection refused")),
    Scripted(reply="   \n"),
    Scripted(delay=5.0),
], ids=["error", "empty", "slow"])
def test_a_failed_empty_or_slow_hint_is_simply_missing(client):
    host, config = reasoning_turn_host(), cfg(timeoutS=0.3)
    hints = HintService(client.factory)

    async def scenario():
        started = time.monotonic()
        taken = await hints.take(host.session, 1, host, config.thoughtHints)
        return taken, time.monotonic() - started

    taken, waited = run(scenario())
    assert taken == [] and waited < 1.0


def test_a_route_that_cannot_be_built_is_a_missing_hint():
    host, config = reasoning_turn_host(), cfg()

    def no_route(*_args):
        raise HintFailed("no route for the hint request")

    hints = HintService(no_route)
    assert run(hints.take(host.session, 1, host, config.thoughtHints)) == []


# -- the two routes ------------------------------------------------------------------------
def test_dsh_llm_route_sends_only_the_fixed_prompt_and_the_thought():
    host, config = reasoning_turn_host(), cfg(maxOutputTokens=300)
    client = make_client(config.thoughtHints, host, SESSION, host.session.log)
    assert isinstance(client, DshLlmHints) and (client.provider, client.model) == ("deepseek-official", "deepseek-v4-flash")
    host.llm_script.append(lambda _h: [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "hint model's own thinking"}},
        {"type": "block-end", "index": 1, "block": {"type": "text", "text": "- decided: cache by path"}},
        {"type": "finish", "reason": {"kind": "stop"}}])
    text = run(client.generate("SYSTEM", THOUGHT))
    (request,) = host.llm_requests
    assert text == "- decided: cache by path"
    assert request.system == "SYSTEM" and request.tools is None and request.maxTokens == 300
    assert request.messages == [{"role": "user", "content": [{"type": "text", "text": THOUGHT}]}]
    assert host.llm_tool_history == [False]  # no tool history either


def test_dsh_llm_route_error_finish_fails_the_hint():
    host = reasoning_turn_host()
    client = make_client(cfg(provider="small", model="tiny").thoughtHints, host, SESSION, host.session.log)
    assert (client.provider, client.model) == ("small", "tiny")
    host.llm_script.append(lambda _h: [{"type": "finish", "reason": {"kind": "error", "failure": {"message": "boom"}}}])
    with pytest.raises(HintFailed, match="boom"):
        run(client.generate("SYSTEM", THOUGHT))


def test_endpoint_route_talks_openai_to_the_configured_server(monkeypatch):
    monkeypatch.setenv("HINT_KEY", "sk-hint-secret")
    with FakeModel({"title": ["- HINT via endpoint"]}) as server:
        config = ThoughtHintsConfig(baseUrl=server.base_url + "/v1", model="hint-small", apiKeyEnv="HINT_KEY",
                                    maxOutputTokens=77)
        client = make_client(config, None, SESSION, None)  # type: ignore[arg-type]
        assert isinstance(client, EndpointHints)
        text = run(client.generate("SYSTEM", THOUGHT))
        (request,) = server.requests
    assert text == "- HINT via endpoint"
    assert request.body["model"] == "hint-small" and request.body["max_tokens"] == 77 and "tools" not in request.body
    assert request.messages == [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": THOUGHT}]
    assert request.headers["authorization"].startswith("Bearer sk-hi")


def test_endpoint_down_fails_fast():
    from openai import APIConnectionError  # what the client raises for a refused connection (no retries)

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = EndpointHints(f"http://127.0.0.1:{port}/v1", "k", "m", 10, 5.0)
    started = time.monotonic()
    with pytest.raises(APIConnectionError):
        run(client.generate("SYSTEM", THOUGHT))
    assert time.monotonic() - started < 3.0


# -- the worker prompt ---------------------------------------------------------------------
def test_the_prompt_section_appears_only_with_hints():
    hint = Hint(ReasoningBlock(1, 2, "Let me think about the lexer first. " * 20), "- HINT-A")
    values = {"turn": "1", "turns": "1", "node_count": "3", "catalog": "- n1 · user", "images": "", "part": "",
              "part_nodes": "", "text": ""}
    flags = {"single": True, "batch": False, "spawn": False, "continuing": False, "keep": False, "part": False,
             "images": False}
    with_hints = render_prompt("turn-compression", {**values, "hints": hints_text([hint])}, {**flags, "hints": True})
    without = render_prompt("turn-compression", {**values, "hints": ""}, {**flags, "hints": False})
    assert "Thought hints (navigation only)" in with_hints and "- HINT-A" in with_hints
    assert "Reasoning in step 2" in with_hints and "Let me think about the lexer first." in with_hints
    assert "not a checklist" in with_hints and "against the raw reasoning" in with_hints
    assert "Thought hints" not in without and "HINT" not in without


@pytest.mark.parametrize("client,in_prompt", [
    (Scripted("- HINT-NAV: the lexer drops the last token"), True),
    (Scripted(error=ConnectionError("hint endpoint down")), False),
    (Scripted(delay=5.0), False),
], ids=["hint", "error", "slow"])
def test_the_job_waits_for_the_turns_hints_and_lands_either_way(client, in_prompt):
    host, config = reasoning_turn_host(), cfg(timeoutS=0.3)
    hints = HintService(client.factory)
    service = EngineHarness(hints).turns
    started = attach_workers(host, service, [WorkerScript([FOLD, FINISH])])

    async def scenario():
        host.host_append("assistant/chunk", {"turn": 1, "step": 1, "chunk": block_end(THOUGHT)})
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        forward(host, config, hints, service)
        await asyncio.sleep(0.05)
        host.host_append("turn/start", {"turn": 2})
        host._forward()
        await service.drained(SESSION, 5)  # the job waited for its hints (bounded), then finished
        await service.pre_step(host.session, 2, 1, config)

    run(scenario())
    assert len(client.calls) == 1
    prompt = started[0]["prompt"]
    assert ("Thought hints (navigation only)" in prompt) == in_prompt
    assert ("HINT-NAV: the lexer drops the last token" in prompt) == in_prompt
    nodes = turn_nodes(host.log, 1)
    assert marker_of(host.log.events[nodes[0]]) == ("compression", 1)  # landed, hint or not
    assert hints.started(SESSION, 1) == []


def test_a_turn_whose_assistant_nodes_stay_takes_no_hint():
    """On 0.2 the job keeps the reasoning as it is: its durable blocks start no hint request (a
    relayed run had one for a turn whose reasoning node was `fixed`)."""
    host, client, config = reasoning_turn_host(V02), Scripted(), cfg()
    hints = HintService(client.factory)
    service = EngineHarness(hints).turns
    started = attach_workers(host, service, [WorkerScript([FINISH])])

    async def scenario():
        host.host_append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        forward(host, config, hints, service)
        await asyncio.sleep(0.05)
        host.host_append("turn/start", {"turn": 2})
        host._forward()
        await service.drained(SESSION, 5)

    run(scenario())
    assert client.calls == [] and hints.started(SESSION, 1) == []
    assert "Thought hints" not in started[0]["prompt"] and "Assistant nodes stay as they are" in started[0]["prompt"]


# -- the handshake: the shim keeps exactly the reasoning block-ends, and only when hints are on --
@pytest.mark.parametrize("policy,kept", [({}, True), ({"thoughtHints": {"enabled": False}}, False),
                                         ({"turns": {"enabled": False}}, False)])
def test_the_handshake_asks_the_shim_to_keep_reasoning_block_ends(policy, kept):
    from turn_memory.bridge.protocol import HelloParams
    from turn_memory.bridge.server import Peer
    from turn_memory.engine import Engine

    hello = HelloParams(protocol=1, dshVersion="0.1.0-rc.8", dialect="rc8", secret="s", pid=1,
                        checkpointSource={"kind": "plugin", "plugin": "compact", "compactionId": "probe"}, config=policy)
    result = asyncio.run(_hello(Engine(), Peer(b"p"), hello))
    assert result.elide == ["assistant/chunk"]
    rules = [r.model_dump() for r in result.elideExcept]
    assert rules == ([{"type": "assistant/chunk", "path": ["chunk", "block", "type"], "equals": "reasoning"}] if kept else [])


async def _hello(engine, peer, hello):
    return engine.on_hello(peer, hello)
