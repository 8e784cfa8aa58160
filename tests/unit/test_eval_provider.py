"""The eval's provider client against a local OpenAI-compatible scripted server, and the
scripted server's `upstream` hook the eval proxy forwards through."""

from __future__ import annotations

import threading
import time
import urllib.request

from turn_memory.devtools.fake_model import FakeModel
from turn_memory.eval.provider import IMAGE_NOTE, ChatRequest, OpenAIProvider, ProviderError, Usage, text_only

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
