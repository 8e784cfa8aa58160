"""The eval's provider client against a local OpenAI-compatible scripted server, and the
scripted server's `upstream` hook the eval proxy forwards through."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from collections import Counter

import pytest

from turn_memory.devtools.fake_model import HEARTBEAT, FakeModel
from turn_memory.eval.provider import (IMAGE_NOTE, ChatRequest, OpenAIProvider, ProviderDown, ProviderError, Usage,
                                       is_local, text_only, unreachable)

BASH = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def test_a_streamed_reply_becomes_text_reasoning_tool_calls_and_reported_usage():
    script = {"turn": [{"text": "Let me look.", "reasoning": "the log first", "tool_calls": [
        {"name": "bash", "arguments": {"command": "ls"}, "id": "call_1"}],
        "prompt_tokens": 1200, "cached_tokens": 800, "completion_tokens": 30}], "title": ['{"score": 4}']}
    with FakeModel(script) as server:
        provider = OpenAIProvider(server.base_url + "/v1", "sk-test", "worker-model", "judge-model")
        done = provider.complete(ChatRequest("turn-worker", [{"role": "user", "content": "task"}], BASH))
        verdict = provider.complete(ChatRequest("judge", [{"role": "user", "content": "grade"}], max_tokens=400))
        bodies = [r.body for r in server.requests]
    assert (done.text, done.reasoning) == ("Let me look.", "the log first")
    assert done.tool_calls == [{"id": "call_1", "name": "bash", "arguments": '{"command": "ls"}'}]
    assert done.usage == Usage(1200, 30, 800)
    assert verdict.text == '{"score": 4}'
    assert [(b["model"], b.get("max_tokens"), bool(b.get("tools"))) for b in bodies] == [
        ("worker-model", None, True), ("judge-model", 400, False)]
    assert done.reply()["tool_calls"] == [{"id": "call_1", "name": "bash", "arguments": '{"command": "ls"}'}]


def test_an_http_error_is_a_provider_error_naming_the_endpoint():
    with FakeModel({"title": [{"status": 401, "error": {"message": "bad key", "type": "auth"}}]}) as server:
        provider = OpenAIProvider(server.base_url + "/v1", "sk-wrong", "m", "m")
        try:
            provider.complete(ChatRequest("hint", [{"role": "user", "content": "x"}]))
        except ProviderError as exc:
            assert str(exc).startswith(f"{server.base_url}/v1 m: ") and "bad key" in str(exc)
        else:
            raise AssertionError("no ProviderError")


def test_images_become_a_text_note_for_a_text_only_provider():
    messages = [{"role": "user", "content": [{"type": "text", "text": "look"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
                {"role": "assistant", "content": "seen"}]
    assert text_only(messages) == [{"role": "user", "content": [{"type": "text", "text": "look"},
                                                                {"type": "text", "text": IMAGE_NOTE}]},
                                   {"role": "assistant", "content": "seen"}]


def test_the_upstream_hook_answers_first_and_outside_the_lock():
    """A slow upstream (a real provider) must not hold up other requests."""
    release = threading.Event()

    def upstream(req):
        if "slow" in req.last_user_text:
            release.wait(10)
            return {"text": "slow answer"}
        return None  # the script answers

    def ask(server: FakeModel, text: str) -> None:
        data = ('{"model": "m", "stream": true, "tools": [{"type": "function", "function": {"name": "bash"}}], '
                '"messages": [{"role": "user", "content": "%s"}]}' % text).encode()
        urllib.request.urlopen(urllib.request.Request(server.base_url + "/v1/chat/completions", data=data,
                                                      headers={"content-type": "application/json"}), timeout=20).read()

    with FakeModel(["fast answer"], upstream=upstream) as server:
        slow = threading.Thread(target=ask, args=(server, "slow please"))
        slow.start()
        time.sleep(0.2)
        ask(server, "fast please")  # answered while the slow one still waits upstream
        fast = [(r.source, r.reply["text"]) for r in server.requests]
        release.set()
        slow.join(10)
        assert fast == [("queue", "fast answer")]
        assert [(r.source, r.reply["text"]) for r in server.requests] == [("queue", "fast answer"), ("upstream", "slow answer")]


def test_a_failed_request_is_sent_again_up_to_retries_times_and_each_retry_is_counted():
    failure = {"status": 503, "error": {"message": "overloaded", "type": "server_error"}}
    with FakeModel({"title": [failure, {**failure, "status": 429}, "third time"]}) as server:
        provider = OpenAIProvider(server.base_url + "/v1", "sk-test", "m", "m", retries=2)
        done = provider.complete(ChatRequest("hint", [{"role": "user", "content": "x"}]))
        assert (done.text, len(server.requests), provider.retried) == ("third time", 3, Counter({"hint": 2}))


@pytest.mark.parametrize("script, retries, attempts, message", [
    ([{"status": 503}] * 2, 1, 2, "scripted failure (HTTP 503) (after 2 attempts)"),
    ([{"status": 401, "error": {"message": "bad key", "type": "auth"}}], 2, 1, "bad key"),  # no use asking again
    ([{"text": "late", "delay_ms": 1500}], 0, 1, "no answer within 0.5s"),
])
def test_what_the_provider_did_not_answer_is_a_provider_error_after_the_retries_that_help(script, retries, attempts,
                                                                                          message):
    with FakeModel({"title": script}) as server:
        provider = OpenAIProvider(server.base_url + "/v1", "sk-test", "m", "m", timeout_s=0.5, retries=retries)
        with pytest.raises(ProviderError) as raised:
            provider.complete(ChatRequest("summary", [{"role": "user", "content": "x"}]))
        assert str(raised.value).startswith(f"{server.base_url}/v1 m: ") and str(raised.value).endswith(message)
        assert len(server.requests) == attempts and sum(provider.retried.values()) == attempts - 1


def _post(server: FakeModel, text: str) -> tuple[float, int, bytes, float]:
    """(seconds to the response's headers, status, body, seconds to its end) of one streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    started = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=json.dumps({
        "model": "m", "stream": True, "tools": BASH, "messages": [{"role": "user", "content": text}]}),
        headers={"content-type": "application/json"})
    response = conn.getresponse()
    headers_s = time.monotonic() - started
    body = response.read()
    conn.close()
    return headers_s, response.status, body, time.monotonic() - started


def test_while_the_upstream_works_the_stream_is_kept_alive_and_a_late_error_goes_inside_it():
    """Node's fetch gives up on a response whose headers or next bytes take 300 s: the proxy sends its
    headers and an SSE comment every heartbeat while the provider works (e2e: the same with Node)."""
    def upstream(req):
        time.sleep(1.0)
        if "fail" in req.last_user_text:
            return {"status": 503, "error": {"message": "the provider failed", "type": "upstream_error"}}
        return {"text": "slow answer"}

    with FakeModel(upstream=upstream, heartbeat_s=0.2) as server:
        headers_s, status, body, total_s = _post(server, "slow please")
        assert status == 200 and headers_s < 0.9 <= total_s  # the headers went out before the answer
        comments, _, rest = body.partition(b"data: ")
        beats = len(comments) // len(HEARTBEAT)
        assert comments == HEARTBEAT * beats and beats >= 2  # about every 0.2 s until the answer, at 1 s
        assert b"slow answer" in rest and rest.endswith(b"data: [DONE]\n\n")
        _, status, body, _ = _post(server, "fail please")
        assert status == 200 and body.endswith(
            b'data: {"error": {"message": "the provider failed", "type": "upstream_error"}}\n\n')
        # the OpenAI client reads the comments as nothing and the late error as the provider's error (not retried)
        provider = OpenAIProvider(server.base_url + "/v1", "sk-test", "m", "m", retries=2)
        assert provider.complete(ChatRequest("hint", [{"role": "user", "content": "slow"}], BASH)).text == "slow answer"
        with pytest.raises(ProviderError, match="the provider failed$"):
            provider.complete(ChatRequest("hint", [{"role": "user", "content": "fail"}], BASH))
        assert provider.retried == Counter()


def test_an_upstream_that_answers_within_the_heartbeat_keeps_its_http_status():
    with FakeModel(upstream=lambda req: {"status": 429, "error": {"message": "slow down", "type": "rate"}},
                   heartbeat_s=5) as server:
        headers_s, status, body, _ = _post(server, "now")
        assert (status, json.loads(body)) == (429, {"error": {"message": "slow down", "type": "rate"}})


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_provider_no_connection_reaches_is_down_with_the_fix_after_the_retries():
    port = _closed_port()
    provider = OpenAIProvider(f"http://127.0.0.1:{port}/v1", "sk-test", "m", "m", retries=1)
    with pytest.raises(ProviderDown) as raised:
        provider.complete(ChatRequest("turn-worker", [{"role": "user", "content": "x"}]))
    assert str(raised.value) == f"http://127.0.0.1:{port}/v1 m: Connection error. (after 2 attempts)"
    assert raised.value.fix == "check --base-url, that the server runs and this machine can reach it; or try --model scripted"
    assert provider.retried == Counter({"turn-worker": 1})


@pytest.mark.parametrize("status, fix", [(401, "check the key in --api-key-env's variable"),
                                         (404, "check --base-url and the model names (--model, --judge-model)")])
def test_a_refused_key_or_model_is_down_too_and_a_busy_provider_is_not(status, fix):
    script = [{"status": status, "error": {"message": "no", "type": "x"}}, {"status": 503}]
    with FakeModel({"title": script}) as server:
        provider = OpenAIProvider(server.base_url + "/v1", "sk-test", "m", "m", retries=0)
        with pytest.raises(ProviderDown) as raised:
            provider.complete(ChatRequest("summary", [{"role": "user", "content": "x"}]))
        assert raised.value.fix == fix
        with pytest.raises(ProviderError) as busy:  # 503: this request failed, the next may not
            provider.complete(ChatRequest("summary", [{"role": "user", "content": "x"}]))
        assert not isinstance(busy.value, ProviderDown)


def test_local_endpoints_and_the_reachability_check():
    assert [is_local(u) for u in ("http://127.0.0.1:8899/v1", "http://localhost/v1", "http://[::1]:1/v1",
                                  "http://127.1.2.3/v1", "https://api.deepseek.com", "http://10.0.0.5/v1")] == \
        [True, True, True, True, False, False]
    port = _closed_port()
    assert unreachable(f"http://127.0.0.1:{port}/v1") == f"cannot connect to 127.0.0.1:{port}: Connection refused"
    assert unreachable("ftp://example.com") == "'ftp://example.com' is not an http(s) URL"
    with FakeModel([]) as server:
        assert unreachable(server.base_url + "/v1") is None
