"""The scripted fake model server, exercised over real HTTP with urllib."""
from __future__ import annotations

import json
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
