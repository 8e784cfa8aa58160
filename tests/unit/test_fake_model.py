"""The scripted fake model server, exercised over real HTTP with urllib."""
from __future__ import annotations

import json
import time
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

from turn_memory.devtools.fake_model import FakeModel, Rule

RUNTIME_CONTEXT = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\ncwd: /x"
TOOLS = [{"type": "function", "function": {"name": n, "description": "", "parameters": {}}}
         for n in ("bash", "read")]


def turn_body(user: str = "hello", *, tools: list | None = None, system: str = "You are DSH.",
              extra: list | None = None) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user},
                {"role": "user", "content": RUNTIME_CONTEXT}, *(extra or [])]
    return {"model": "deepseek-v4-flash", "messages": messages, "stream": True,
            "stream_options": {"include_usage": True}, "tools": TOOLS if tools is None else tools}


def title_body() -> dict[str, Any]:
    return {"model": "deepseek-v4-flash", "stream": True, "thinking": {"type": "disabled"},
            "messages": [{"role": "system", "content": "Create a concise title for an AI coding-assistant session"},
                         {"role": "user", "content": 'Generate the session title from this JSON array of human messages:\n["hello"]'}]}


def post(fake: FakeModel, body: dict, headers: dict | None = None,
         path: str = "/chat/completions") -> tuple[int, str, bytes]:
    req = urllib.request.Request(fake.base_url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", "authorization": "Bearer sk-secret-123456",
                                          "x-deepseek-harness-session-id": "session-1", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("content-type", ""), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("content-type", ""), err.read()


def sse(raw: bytes) -> list[Any]:
    """SSE payloads, JSON-decoded except the final [DONE] sentinel."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def content_of(events: list[Any], key: str = "content") -> str:
    return "".join(e["choices"][0]["delta"].get(key) or "" for e in events[:-1] if e != "[DONE]" and e["choices"])


@pytest.fixture
def fake():
    with FakeModel() as f:
        yield f


def test_default_turn_reply_has_deepseek_sse_shape(fake: FakeModel) -> None:
    status, ctype, raw = post(fake, turn_body("please list the workspace"))
    assert status == 200 and ctype.startswith("text/event-stream")
    events = sse(raw)
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "deepseek-v4-flash" for e in events[:-1])
    # the runtime-context snapshot after the user's words is skipped
    assert content_of(events) == "FAKE-ACK: please list the workspace"
    finish = [e for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert [f["choices"][0]["finish_reason"] for f in finish] == ["stop"]
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == (
        usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"])


def test_reasoning_text_and_tool_calls_stream_in_pieces() -> None:
    script = [{"reasoning": "think " * 10, "text": "Let me look.",
               "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la /tmp/some/long/path"}},
                              {"name": "read", "arguments": '{"path": "a.txt"}', "id": "call_fixed"}],
               "prompt_tokens": 1234}]
    with FakeModel(script, chunk_size=8) as fake:
        events = sse(post(fake, turn_body())[2])
    assert content_of(events, "reasoning_content") == "think " * 10
    assert content_of(events) == "Let me look."
    calls: dict[int, dict] = {}
    for e in events[:-1]:
        for tc in (e["choices"][0]["delta"].get("tool_calls") or []) if e["choices"] else []:
            c = calls.setdefault(tc["index"], {"args": "", "deltas": 0})
            c["deltas"] += 1
            if "id" in tc:  # first delta of a call names it, with empty arguments
                assert tc["type"] == "function" and tc["function"]["arguments"] == ""
                c["id"], c["name"] = tc["id"], tc["function"]["name"]
            else:
                c["args"] += tc["function"]["arguments"]
    assert calls[0]["name"] == "bash" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["args"]) == {"command": "ls -la /tmp/some/long/path"}
    assert calls[0]["deltas"] > 2  # arguments arrive as several fragments
    assert (calls[1]["id"], calls[1]["name"], calls[1]["args"]) == ("call_fixed", "read", '{"path": "a.txt"}')
    finish = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert finish == ["tool_calls"]
    assert events[-2]["usage"]["prompt_tokens"] == 1234


def test_rules_are_checked_before_the_queue() -> None:
    script = {
        "turn": ["queued-1", "queued-2"],
        "rules": [
            {"when": {"last_user_contains": "summarize turns", "tools_include": "list_turn_nodes",
                      "system_contains": "memory worker"},
             "replies": [{"tool_calls": [{"name": "list_turn_nodes", "arguments": {}}]}, "worker done"]},
            {"when": {"last_user_contains": "ping"}, "reply": "pong", "times": "always"},
        ],
    }
    worker_tools = [{"type": "function", "function": {"name": "list_turn_nodes", "parameters": {}}}]
    with FakeModel(script) as fake:
        # a title request quoting the user's words must not spend a turn rule
        assert content_of(sse(post(fake, {**title_body(), "messages": [
            {"role": "user", "content": "ping"}]})[2])) == "Fake session title"
        assert content_of(sse(post(fake, turn_body("ping"))[2])) == "pong"
        assert content_of(sse(post(fake, turn_body("main task"))[2])) == "queued-1"
        worker = turn_body("please summarize turns 1-3", tools=worker_tools, system="You are a memory worker.")
        first = sse(post(fake, worker)[2])
        assert first[-3]["choices"][0]["finish_reason"] == "tool_calls"
        assert content_of(sse(post(fake, worker)[2])) == "worker done"
        # the worker rule is used up (2 replies -> times 2); the queue continues
        assert content_of(sse(post(fake, worker)[2])) == "queued-2"
        assert content_of(sse(post(fake, turn_body("ping"))[2])) == "pong"  # "always"
        assert content_of(sse(post(fake, turn_body("after"))[2])) == "FAKE-ACK: after"
        sources = [r.source for r in fake.requests]
    assert sources == ["default", "rule:1", "queue", "rule:0", "rule:0", "queue", "rule:1", "default"]


def test_context_overflow_and_scripted_http_errors() -> None:
    script = [{"context_overflow": True}, {"status": 503}, {"status": 429, "error": {"message": "slow down", "type": "rate"}}]
    with FakeModel(script) as fake:
        status, ctype, raw = post(fake, turn_body())
        assert status == 400 and ctype == "application/json"
        err = json.loads(raw)["error"]
        assert err["code"] == "context_length_exceeded" and "maximum context length" in err["message"]
        status, _, raw = post(fake, turn_body())
        assert status == 503 and json.loads(raw)["error"]["type"] == "server_error"
        status, _, raw = post(fake, turn_body())
        assert (status, json.loads(raw)) == (429, {"error": {"message": "slow down", "type": "rate"}})


def test_requests_are_classified_and_recorded(tmp_path) -> None:
    log = tmp_path / "requests.jsonl"
    with FakeModel(log_path=log) as fake:
        post(fake, turn_body("do it"))
        post(fake, title_body())
        status, _, raw = post(fake, turn_body("do it"), headers={"x-deepseek-harness-compact": "1"})
        assert content_of(sse(raw)).startswith("FAKE-SUMMARY:")
        post(fake, turn_body("via v1"), path="/v1/chat/completions")
        got = fake.wait_for(4, timeout=5)
        assert [r.kind for r in got] == ["turn", "title", "compaction", "turn"]
        assert fake.requests_of("title")[0].reply == {"text": "Fake session title"}
        first = got[0]
        assert first.tool_names == ["bash", "read"] and first.last_user_text == "do it"
        assert first.last_role == "user" and first.system_text == "You are DSH."
        assert first.headers["x-deepseek-harness-session-id"] == "session-1"
        assert first.headers["authorization"] == "Bearer sk-se…"  # never the whole key
        assert got[3].path == "/v1/chat/completions"
        assert got[0].time <= got[1].time <= got[2].time
        with pytest.raises(TimeoutError):
            fake.wait_for(1, kind="nope", timeout=0.1)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["turn", "title", "compaction", "turn"]
    assert lines[0]["body"]["messages"][1]["content"] == "do it"


def test_follow_up_step_and_callable_responder() -> None:
    def responder(req):
        if req.last_role == "tool":
            return f"saw {req.messages[-1]['content']}"
        return None

    extra = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "file.txt"}]
    with FakeModel(["from queue"], responder=responder) as fake:
        assert content_of(sse(post(fake, turn_body("x", extra=extra))[2])) == "saw file.txt"
        assert content_of(sse(post(fake, turn_body("x"))[2])) == "from queue"
        fake.add_rule(lambda r: "magic" in r.last_user_text, "abracadabra")
        assert content_of(sse(post(fake, turn_body("magic word"))[2])) == "abracadabra"
        fake.push("turn", {"text": "pushed"})
        assert fake.pending() == {"turn": 1, "title": 0, "compaction": 0}
        assert content_of(sse(post(fake, turn_body("y"))[2])) == "pushed"


def test_truncate_and_models_and_unknown_routes(fake: FakeModel) -> None:
    fake.push("turn", {"text": "cut off", "truncate": True})
    events = sse(post(fake, turn_body())[2])
    assert "[DONE]" not in events and content_of(events + ["[DONE]"]) == "cut off"
    with urllib.request.urlopen(fake.base_url + "/models", timeout=5) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "fake-model"
    assert post(fake, turn_body(), path="/completions")[0] == 404


def test_script_typos_fail_early() -> None:
    with pytest.raises(ValueError, match="unknown reply keys"):
        FakeModel([{"txt": "oops"}])
    with pytest.raises(ValueError, match="unknown rule condition"):
        FakeModel({"rules": [{"when": {"last_user_contain": "x"}, "reply": "y"}]})
    with pytest.raises(ValueError, match="unknown script sections"):
        FakeModel({"turns": []})
    with pytest.raises(ValueError, match="exactly one"):
        Rule.from_obj({"when": {}})


def test_standalone_cli(tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["from the cli"]))
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "turn_memory.devtools.fake_model", "--port", "0",
                             "--script", str(script), "--log", str(log)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("fake-model listening on http://127.0.0.1:")
        url = line.split()[-1]
        req = urllib.request.Request(url + "/chat/completions", data=json.dumps(turn_body()).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert content_of(sse(resp.read())) == "from the cli"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert json.loads(log.read_text())["source"] == "queue"


# --------------------------------------------------------------------------- the Messages route (DSH 0.2.1)
# What 0.2.1's default deepseek-official route sends and parses: docs/v021-messages-route.md.

MESSAGES_TOOLS = [{"name": n, "description": "", "input_schema": {}} for n in ("bash", "read")]
PNG_URL = "data:image/png;base64,iVBORw0KGgo="


def messages_body(user: str = "hello", *, tools: list | None = None, system: str = "You are DSH.",
                  extra: list | None = None, thinking: str = "enabled") -> dict[str, Any]:
    """A 0.2.1-shaped request: top-level system, the user's words and the runtime-context
    snapshot merged into one user message, Anthropic-style tools."""
    body: dict[str, Any] = {
        "model": "deepseek-flash", "stream": True, "max_tokens": 256000, "thinking": {"type": thinking},
        "system": system,
        "messages": [{"role": "user", "content": [{"type": "text", "text": user},
                                                  {"type": "text", "text": RUNTIME_CONTEXT}]}, *(extra or [])],
        "tools": MESSAGES_TOOLS if tools is None else tools}
    if not body["tools"]:
        del body["tools"]
    return body


def post_messages(fake: FakeModel, body: dict, headers: dict | None = None,
                  path: str = "/v1/messages") -> tuple[int, str, bytes]:
    return post(fake, body, {"x-api-key": "sk-secret-123456", "anthropic-version": "2023-06-01",
                             "accept": "text/event-stream", **(headers or {})}, path=path)


def message_events(raw: bytes) -> list[dict[str, Any]]:
    """Messages SSE frames; each frame's `event:` line must name its data's type (0.2.1 checks)."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        event_line, data_line = block.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: "), block
        data = json.loads(data_line[len("data: "):])
        assert data["type"] == event_line[len("event: "):]
        out.append(data)
    return out


def block_texts(events: list[dict]) -> list[tuple[str, str]]:
    """(block type, reassembled text / thinking / partial_json) per content block, in order."""
    blocks: dict[int, list] = {}
    for e in events:
        if e["type"] == "content_block_start":
            blocks[e["index"]] = [e["content_block"]["type"], ""]
        elif e["type"] == "content_block_delta" and e["delta"]["type"] != "signature_delta":
            d = e["delta"]
            blocks[e["index"]][1] += d.get("text") or d.get("thinking") or d.get("partial_json") or ""
    return [tuple(blocks[i]) for i in sorted(blocks)]


def v021_failure_code(status: int, body: dict) -> str:
    """0.2.1's classification of a non-2xx Messages answer, ported from
    @deepseek-ai/dsh-llm-deepseek/lib/index.js providerError (1756-1777) and
    @deepseek-ai/dsh-llm/lib/index.js isContextWindowExceededError / isQuotaExceededError (160-182)."""
    import re
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = error.get("message") if isinstance(error.get("message"), str) else f"DeepSeek Messages request failed ({status})"
    etype = error.get("type") if isinstance(error.get("type"), str) else ""
    detail = f"{etype} {error.get('code') if isinstance(error.get('code'), str) else ''} {message}"
    overflow = (re.search(r"(?:^|[^a-z0-9])context[\s_-](?:length|window)[\s_-](?:exceed(?:ed|s)?|overflow(?:ed)?"
                          r"|limit[\s_-]exceeded)(?:$|[^a-z0-9])", detail, re.I)
                or re.search(r"\b(?:maximum|max)(?:\s+(?:allowed|supported))?\s+context\s+(?:length|window)\b", detail, re.I)
                or re.search(r"\b(?:input|prompt|request)\s+(?:is\s+)?too\s+(?:long|large)\s+for\s+(?:this|the)\s+model\b",
                             detail, re.I))
    quota = re.search(r"\binsufficient[\s_-]+(?:quota|balance|credits?)\b|\b(?:quota|usage[\s_-]+limit)[\s_-]+"
                      r"(?:exceeded|exhausted|reached)\b", detail, re.I)
    if status in (401, 403) or etype in ("authentication_error", "permission_error"):
        return "AUTH"
    if quota or status == 402:
        return "QUOTA"
    if status == 429 or etype == "rate_limit_error":
        return "RATE_LIMIT"
    if overflow:
        return "CONTEXT_WINDOW_EXCEEDED"
    if status in (400, 413) or etype == "invalid_request_error":
        return "INVALID_REQUEST"
    if status >= 500 or etype in ("api_error", "overloaded_error"):
        return "SERVER"
    return f"HTTP_{status}"


def test_both_protocols_normalize_to_the_same_view() -> None:
    """One conversation (text, reasoning, a tool call and its result, an image, a trailing
    system update) as rc.8 sends it and as 0.2.1 sends it: the same FakeRequest view."""
    args = {"command": "ls"}
    openai = turn_body("please list the workspace", extra=[
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "I should run ls.",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "file.txt"},
        {"role": "user", "content": [{"type": "text", "text": "and this image?"},
                                     {"type": "image_url", "image_url": {"url": PNG_URL}}]},
        {"role": "user", "content": RUNTIME_CONTEXT + " (2)"},
        {"role": "system", "content": "System update."}])
    messages = messages_body("please list the workspace", extra=[
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should run ls.", "signature": "sig"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "c1", "name": "bash", "input": args}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "file.txt"}], "is_error": False},
            {"type": "text", "text": "and this image?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "text", "text": RUNTIME_CONTEXT + " (2)"}]},
        {"role": "system", "content": [{"type": "text", "text": "System update."}]}])
    with FakeModel() as fake:
        post(fake, openai)
        post_messages(fake, messages)
        a, m = fake.wait_for(2, timeout=5)
    assert (a.protocol, a.path, m.protocol, m.path) == ("openai", "/chat/completions", "messages", "/v1/messages")
    assert m.body == messages and a.view is None and m.view is not None  # body: the wire body as sent
    assert m.messages == a.messages
    assert m.tools == a.tools and m.tool_names == ["bash", "read"]
    for view in ("kind", "system_text", "last_user_text", "last_role"):
        assert getattr(m, view) == getattr(a, view), view
    assert (m.kind, m.last_user_text, m.last_role) == ("turn", "and this image?", "user")
    assert m.system_text == "You are DSH.\nSystem update."
    assert m.all_text() == a.all_text()


def test_messages_view_details() -> None:
    """Image handles stay with their image, tool results split out, errors and images in tool
    results survive, a compaction instruction merged after the user's words is its own message."""
    handle = "Image sha256:ab; request preview 2x2px."
    img = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    body = messages_body("look", extra=[
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}},
                                          {"type": "tool_use", "id": "t2", "name": "read", "input": {"path": "x"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [], "is_error": True},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": handle}, img]},
            {"type": "text", "text": "and this one:"}, {"type": "text", "text": handle}, img,
            {"type": "text", "text": "You are now acting as a compaction engine."}]}])
    with FakeModel() as fake:
        post_messages(fake, body, headers={"x-deepseek-harness-compact": "1"})
        req = fake.wait_for(1, timeout=5)[0]
    parts = [{"type": "text", "text": handle}, {"type": "image_url", "image_url": {"url": PNG_URL}}]
    assert req.messages[3:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "read", "arguments": "{}"}},
            {"id": "t2", "type": "function", "function": {"name": "read", "arguments": '{"path": "x"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "", "is_error": True},
        {"role": "tool", "tool_call_id": "t2", "content": parts},
        {"role": "user", "content": [{"type": "text", "text": "and this one:"}, *parts]},
        {"role": "user", "content": "You are now acting as a compaction engine."}]
    assert req.kind == "compaction" and req.last_user_text == "You are now acting as a compaction engine."
    assert req.headers["x-api-key"] == "sk-secret-12…" and req.headers["anthropic-version"] == "2023-06-01"


def test_messages_requests_classify_and_drive_scripted_workers_like_chat_completions() -> None:
    from turn_memory.devtools.scripted_workers import worker_responder

    worker_tools = ["list_turn_nodes", "replace_turn_nodes", "finish_turn_compression"]
    task = ("You are a memory worker.\nCurrent nodes of turn 1:\n"
            "- n1 · user · human · 10 tok · capacity 40 · please list the workspace\n"
            "- n2 · assistant · text · 10 tok · capacity 40 · Let me look.\n"
            "- n3 · assistant · text · 10 tok · capacity 40 · It holds file.txt.")
    first = {"model": "deepseek-flash", "stream": True, "max_tokens": 1000, "system": "You compress turns.",
             "messages": [{"role": "user", "content": [{"type": "text", "text": task}]}],
             "tools": [{"name": n, "description": "", "input_schema": {}} for n in worker_tools]}
    second = {**first, "messages": [*first["messages"],
                                    {"role": "assistant", "content": [{"type": "tool_use", "id": "w1", "name": "replace_turn_nodes", "input": {}}]},
                                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "w1",
                                                                  "content": [{"type": "text", "text": "Accepted: n1-n3"}]}]}]}
    title = {"model": "deepseek-flash", "stream": True, "max_tokens": 4096, "thinking": {"type": "disabled"},
             "system": "Create a concise title for an AI coding-assistant session",
             "messages": [{"role": "user", "content": [{"type": "text", "text": 'Generate the session title from this JSON array of human messages:\n["hi"]'}]}]}
    with FakeModel(responder=worker_responder) as fake:
        calls = [block_texts(message_events(post_messages(fake, b)[2])) for b in (first, second)]
        assert block_texts(message_events(post_messages(fake, title)[2])) == [("text", "Fake session title")]
        reqs = fake.wait_for(3, timeout=5)
    assert [r.kind for r in reqs] == ["turn", "turn", "title"]
    assert [r.source for r in reqs] == ["responder", "responder", "default"]
    assert calls[0][0][0] == "tool_use" and json.loads(calls[0][0][1])["from"] == "n1"
    assert reqs[0].reply["tool_calls"][0]["name"] == "replace_turn_nodes"
    assert reqs[1].last_role == "tool" and reqs[1].reply["tool_calls"][0]["name"] == "finish_turn_compression"


def test_messages_sse_text_reasoning_tool_use_and_usage() -> None:
    script = [{"reasoning": "think " * 5, "text": "Let me look.",
               "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la /tmp/some/long/path"}},
                              {"name": "read", "arguments": '{"path": "a.txt"}', "id": "toolu_fixed"}],
               "prompt_tokens": 1234, "cached_tokens": 200, "completion_tokens": 56}]
    with FakeModel(script, chunk_size=8) as fake:
        status, ctype, raw = post_messages(fake, messages_body())
    assert status == 200 and ctype.startswith("text/event-stream")
    events = message_events(raw)
    types = [e["type"] if not e["type"].startswith("content_block_delta") else e["delta"]["type"] for e in events]
    squeezed = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]
    assert squeezed == ["message_start", "ping",
                        "content_block_start", "thinking_delta", "signature_delta", "content_block_stop",
                        "content_block_start", "text_delta", "content_block_stop",
                        "content_block_start", "input_json_delta", "content_block_stop",
                        "content_block_start", "input_json_delta", "content_block_stop",
                        "message_delta", "message_stop"]
    assert types.count("thinking_delta") > 1 and types.count("input_json_delta") > 2  # streamed in pieces
    start = events[0]["message"]
    assert (start["role"], start["model"], start["content"], start["stop_reason"]) == ("assistant", "deepseek-flash", [], None)
    # Anthropic semantics: input_tokens excludes the cache hits, which come as cache_read_input_tokens
    assert start["usage"] == {"input_tokens": 1034, "output_tokens": 0, "cache_read_input_tokens": 200,
                              "cache_creation_input_tokens": 0}
    blocks = block_texts(events)
    assert blocks[:2] == [("thinking", "think " * 5), ("text", "Let me look.")]
    assert [b[0] for b in blocks[2:]] == ["tool_use", "tool_use"]
    assert json.loads(blocks[2][1]) == {"command": "ls -la /tmp/some/long/path"} and blocks[3][1] == '{"path": "a.txt"}'
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [e["index"] for e in starts] == [0, 1, 2, 3]
    assert starts[0]["content_block"] == {"type": "thinking", "thinking": ""}
    assert starts[2]["content_block"]["id"].startswith("toolu_") and starts[2]["content_block"]["name"] == "bash"
    assert starts[3]["content_block"] == {"type": "tool_use", "id": "toolu_fixed", "name": "read", "input": {}}
    signature = [e["delta"]["signature"] for e in events if e["type"] == "content_block_delta"
                 and e["delta"]["type"] == "signature_delta"]
    assert len(signature) == 1 and signature[0].startswith("fake-sig-")
    assert events[-2] == {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                          "usage": {"output_tokens": 56}}


def test_messages_default_reply_finish_mapping_and_truncation(fake: FakeModel) -> None:
    events = message_events(post_messages(fake, messages_body("please list the workspace"))[2])
    assert block_texts(events) == [("text", "FAKE-ACK: please list the workspace")]
    assert events[-2]["delta"]["stop_reason"] == "end_turn" and events[-1] == {"type": "message_stop"}
    fake.push("turn", {"text": "cut", "finish": "length"}, {"text": "cut off", "truncate": True},
              {"text": "x", "finish": "stop_sequence"})
    assert message_events(post_messages(fake, messages_body())[2])[-2]["delta"]["stop_reason"] == "max_tokens"
    cut = message_events(post_messages(fake, messages_body(), path="/messages")[2])
    assert block_texts(cut) == [("text", "cut off")]  # blocks close, but no message_delta / message_stop
    assert cut[-1]["type"] == "content_block_stop" and not {"message_delta", "message_stop"} & {e["type"] for e in cut}
    assert message_events(post_messages(fake, messages_body())[2])[-2]["delta"]["stop_reason"] == "stop_sequence"
    assert [r.path for r in fake.requests] == ["/v1/messages", "/v1/messages", "/messages", "/v1/messages"]
    assert post_messages(fake, messages_body(), path="/v1/messages/count_tokens")[0] == 404


def test_messages_errors_and_context_overflow() -> None:
    """Scripted failures in the Messages error envelope, and how 0.2.1 classifies each."""
    script = [{"context_overflow": True}, {"status": 429}, {"status": 503}, {"status": 529}, {"status": 401},
              {"status": 400}, {"status": 409}, {"status": 500, "error": {"type": "overloaded_error", "message": "busy"}}]
    with FakeModel(script) as fake:
        answers = [post_messages(fake, messages_body()) for _ in script]
        bad_json = urllib.request.Request(fake.base_url + "/v1/messages", data=b"{not json", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad_json, timeout=5)
    assert all(ctype == "application/json" for _, ctype, _ in answers)
    bodies = [json.loads(raw) for _, _, raw in answers]
    assert all(b["type"] == "error" and set(b["error"]) == {"type", "message"} for b in bodies)
    assert answers[0][0] == 400 and bodies[0]["error"]["type"] == "invalid_request_error"
    assert "maximum context length" in bodies[0]["error"]["message"]
    assert bodies[7]["error"] == {"type": "overloaded_error", "message": "busy"}
    codes = [v021_failure_code(status, body) for (status, _, _), body in zip(answers, bodies)]
    assert codes == ["CONTEXT_WINDOW_EXCEEDED", "RATE_LIMIT", "SERVER", "SERVER", "AUTH",
                     "INVALID_REQUEST", "HTTP_409", "SERVER"]
    assert err.value.code == 400 and json.loads(err.value.read())["type"] == "error"


def test_chat_completions_report_cached_tokens(fake: FakeModel) -> None:
    fake.push("turn", {"text": "ok", "prompt_tokens": 100, "cached_tokens": 30})
    usage = sse(post(fake, turn_body())[2])[-2]["usage"]
    assert (usage["prompt_tokens"], usage["prompt_cache_hit_tokens"], usage["prompt_cache_miss_tokens"]) == (100, 30, 70)


def test_request_log_records_protocol_and_view(tmp_path) -> None:
    log = tmp_path / "requests.jsonl"
    with FakeModel(log_path=log) as fake:
        post(fake, turn_body("via chat"))
        post_messages(fake, messages_body("via messages"))
        fake.wait_for(2, timeout=5)
    chat, messages = [json.loads(line) for line in log.read_text().splitlines()]
    assert (chat["protocol"], "view" in chat) == ("openai", False)
    assert messages["protocol"] == "messages" and messages["path"] == "/v1/messages"
    assert messages["body"]["messages"][0]["content"][0]["text"] == "via messages"
    assert messages["view"]["messages"][1] == {"role": "user", "content": "via messages"}


def test_model_latency_delays_the_first_byte_and_paces_the_stream() -> None:
    # 400 output tokens at 2000 tok/s stream for about 0.2 s, after a 0.3 s first byte
    with FakeModel([{"text": "x" * 1600}], ttfb_ms=300, tokens_per_s=2000) as fake:
        started = time.monotonic()
        status, _, raw = post(fake, turn_body())
        took = time.monotonic() - started
    assert status == 200 and content_of(sse(raw)) == "x" * 1600
    assert took >= 0.5  # lower bounds only: a busy machine may add, never remove
    with FakeModel([{"text": "x" * 1600, "delay_ms": 1}]) as fake:  # no latency unless asked
        started = time.monotonic()
        post(fake, turn_body())
        assert time.monotonic() - started < took
