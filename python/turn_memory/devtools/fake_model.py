"""A scripted, DeepSeek-style model server for tests and the demo; speaks both DSH wire protocols.

Stdlib only. Point DSH's default ``deepseek-official`` route at it with
``DEEPSEEK_BASE_URL=fake.base_url`` (:meth:`FakeModel.env`):

* DSH 0.1.0-rc.8's adapter speaks OpenAI chat completions: ``POST ${baseURL}/chat/completions``
  (``/v1/chat/completions`` is accepted too); encoder in ``fake_wire_openai``.
* DSH 0.2.1's adapter speaks Anthropic Messages: ``POST ${baseURL}/v1/messages`` (it appends
  ``/v1`` unless the base URL already ends in it; ``/messages`` is accepted too); request
  normalization and encoder in ``fake_wire_messages``, wire facts in docs/v021-messages-route.md.

Either way the request is recorded as one :class:`FakeRequest` whose ``messages`` / ``tools``
are the OpenAI-style view below (``protocol`` and ``path`` tell the two apart, ``body`` is the
wire body as sent), the same script chooses one reply, and the reply is streamed back in the
protocol that asked. ``GET /models`` answers a one-model list.

What DSH sends (read from ``@deepseek-ai/dsh-llm-deepseek/lib/index.js`` and its callers, on
both hosts), and how requests are classified here:

* ``compaction`` - the adapter adds header ``x-deepseek-harness-compact: 1`` exactly when
  ``options.purpose === "compaction"`` (only dsh-compaction-basic's summarizer sets it).
  The body is the conversation plus a final user message with the compaction instruction,
  and it still carries the agent's ``tools``, so the header must be checked first.
* ``title`` - no ``tools`` and not compaction. The session-title plugin sends no tools, a
  "Create a concise title…" system prompt, one user message framing the human messages as
  JSON, and thinking disabled. (A tool-less agent turn would also land here; rules can match
  any kind explicitly.)
* ``turn`` - everything else (an agent step; carries ``tools``).

Other wire facts worth knowing: every request streams; the system prompt is a leading
``role: system`` message (Messages: the top-level ``system``); tool results are ``role: tool``
messages (Messages: ``tool_result`` blocks in a user message); the host appends a user message
"Current runtime context. This snapshot supersedes…" after the user's words on every step,
so :attr:`FakeRequest.last_user_text` skips it. Headers include ``x-deepseek-harness-user-id``
and ``x-deepseek-harness-session-id``. rc.8 rejects a ``stop`` finish with no content
(EMPTY_RESPONSE) and a stream without ``[DONE]`` (STREAM_CLOSED; 0.2.1: without
``message_stop``); an HTTP 400 whose error code/message says the context length was exceeded
becomes ``CONTEXT_WINDOW_EXCEEDED`` on both.

The view (rc.8's chat-completions conventions): ``{"role": "system"|"user"|"assistant"|"tool",
"content": str | [{"type": "text", "text"} | {"type": "image_url", "image_url": {"url"}}]}``,
assistant messages with ``reasoning_content`` and ``tool_calls`` (``[{"id", "type": "function",
"function": {"name", "arguments": str}}]``), tool messages with ``tool_call_id``.

Reply resolution, first hit wins: the ``upstream`` callable, then the Python ``responder``
callable, then rules (in order), then the per-kind ordered queue, then a default reply. Only
``upstream`` runs outside the server's lock, so it may take as long as a real provider does
while other requests are served (``turn-memory eval``'s routing proxy forwards through it).

Script (JSON or dict); a bare list is the ``turn`` queue::

    {"turn": [reply, ...], "title": [...], "compaction": [...],
     "rules": [{"when": {"kind": "turn", "last_user_contains": "...", "tools_include": "x",
                         "system_contains": "..."},
                "reply": {...} | "replies": [{...}, ...],
                "times": 1 | N | "always"}]}

A reply is a string (shorthand for ``{"text": s}``) or a dict with keys from REPLY_KEYS.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping, Union

from turn_memory.devtools import fake_wire_messages, fake_wire_openai

KINDS = ("turn", "title", "compaction")
COMPACT_HEADER = "x-deepseek-harness-compact"
RUNTIME_CONTEXT_PREFIX = "Current runtime context"  # host scaffolding, not user words
FAKE_API_KEY = "sk-fake-turn-memory-0000000000"
SECRET_HEADERS = ("authorization", "x-api-key")  # recorded truncated, never whole
#: what a stream that waits for its upstream sends (an SSE comment: both SDKs skip it)
HEARTBEAT = b": waiting for the model\n\n"

REPLY_KEYS = {
    "text",              # assistant content, streamed in chunk_size pieces
    "reasoning",         # reasoning_content deltas (sent before the text)
    "tool_calls",        # [{"name", "arguments": dict | raw str, "id"?}]
    "finish",            # finish_reason; default "tool_calls" if tool_calls else "stop"
    "status",            # non-2xx HTTP status -> the protocol's error JSON instead of a stream
    "error",             # {"message", "type", "code"?} for status replies, sent as the body's "error"
    "context_overflow",  # True -> 400 "maximum context length" (DSH: CONTEXT_WINDOW_EXCEEDED)
    "delay_ms",          # wait before answering (headers included); replaces the model's ttfb_ms
    "chunk_delay_ms",    # wait between SSE events; replaces the model's tokens_per_s
    "prompt_tokens",     # prompt size (default: ~len(json(messages)) / 4); Messages: input + cache read
    "completion_tokens",
    "cached_tokens",     # of prompt_tokens, cache hits (default 0): prompt_cache_hit_tokens / cache_read_input_tokens
    "truncate",          # True -> close the stream without finish/[DONE] or message_stop (DSH: STREAM_CLOSED)
}
WHEN_KEYS = {"kind", "last_user_contains", "last_user_matches", "system_contains",
             "messages_contain", "tools_include", "tools_exclude", "last_role", "header", "model"}


def is_runtime_context(text: str) -> bool:
    """The host's runtime-context snapshot ("Current runtime context. …" / "…: none. …")."""
    return text.startswith((RUNTIME_CONTEXT_PREFIX + ".", RUNTIME_CONTEXT_PREFIX + ":"))


def _text_of(content: Any) -> str:
    """Wire content is a string, or (with images) a list of {type, text|image_url} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


@dataclass
class FakeRequest:
    """One received request, as recorded in :attr:`FakeModel.requests`.

    ``body`` is the wire body as sent; ``messages`` and ``tools`` are the OpenAI-style view
    (module doc), identical for both protocols, and what every other property reads.
    """
    index: int
    kind: str
    path: str
    headers: dict[str, str]   # lower-cased subset: x-*, anthropic-*, user-agent, accept, content-type; SECRET_HEADERS truncated
    body: dict[str, Any]
    time: float
    reply: dict[str, Any] | None = None   # what was answered
    source: str = ""                      # "upstream" | "responder" | "rule:<name>" | "queue" | "default"
    protocol: str = "openai"              # "openai" (chat completions, rc.8) | "messages" (0.2.1 default route)
    view: dict[str, Any] | None = None    # normalized {"messages", "tools"}; None: body already is the view

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.view if self.view is not None else self.body).get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        """``[{"type": "function", "function": {"name", "description", "parameters"}}]``."""
        return list((self.view if self.view is not None else self.body).get("tools") or [])

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", {}).get("name", "") for t in self.tools]

    @property
    def system_text(self) -> str:
        return "\n".join(_text_of(m.get("content")) for m in self.messages if m.get("role") == "system")

    @property
    def last_user_text(self) -> str:
        """The latest user-authored text, skipping the host's runtime-context snapshots."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                text = _text_of(m.get("content"))
                if not is_runtime_context(text):
                    return text
        return ""

    @property
    def last_role(self) -> str:
        """Role of the last non-scaffolding message: "tool" means a follow-up step.

        Runtime-context snapshots and system messages (0.2.1 sends in-history system-prompt
        updates and developer messages as ``role: system`` after the latest user turn) are
        skipped."""
        for m in reversed(self.messages):
            if m.get("role") == "system" or (
                    m.get("role") == "user" and is_runtime_context(_text_of(m.get("content")))):
                continue
            return str(m.get("role", ""))
        return ""

    def all_text(self) -> str:
        return "\n".join(_text_of(m.get("content")) for m in self.messages)

    def to_json(self) -> dict[str, Any]:
        out = {"index": self.index, "t": self.time, "kind": self.kind, "path": self.path,
               "protocol": self.protocol, "headers": self.headers, "body": self.body,
               "reply": self.reply, "source": self.source}
        if self.view is not None:
            out["view"] = self.view
        return out


Reply = Union[str, Mapping[str, Any]]
Responder = Callable[[FakeRequest], Union[Reply, None]]
Predicate = Callable[[FakeRequest], bool]


def normalize_reply(reply: Reply) -> dict[str, Any]:
    """Validate a reply item early so a typo fails the test, not the DSH run."""
    if isinstance(reply, str):
        return {"text": reply}
    unknown = set(reply) - REPLY_KEYS
    if unknown:
        raise ValueError(f"unknown reply keys {sorted(unknown)}; allowed: {sorted(REPLY_KEYS)}")
    for call in reply.get("tool_calls") or []:
        if "name" not in call:
            raise ValueError(f"tool call without a name: {call!r}")
    return dict(reply)


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _compile_when(when: Mapping[str, Any]) -> Predicate:
    """Turn a `when` mapping into a predicate; every given condition must hold.

    ``kind`` defaults to "turn": a title request embeds the user's words too, and a rule
    meant for the agent must not be spent on it. Use ``"kind": "*"`` to match any kind.
    """
    unknown = set(when) - WHEN_KEYS
    if unknown:
        raise ValueError(f"unknown rule condition(s) {sorted(unknown)}; allowed: {sorted(WHEN_KEYS)}")
    kinds = _as_list(when.get("kind", "turn"))
    pattern = re.compile(when["last_user_matches"], re.S) if "last_user_matches" in when else None

    def pred(r: FakeRequest) -> bool:
        if "*" not in kinds and r.kind not in kinds:
            return False
        if not all(s in r.last_user_text for s in _as_list(when.get("last_user_contains", []))):
            return False
        if pattern is not None and not pattern.search(r.last_user_text):
            return False
        if not all(s in r.system_text for s in _as_list(when.get("system_contains", []))):
            return False
        if not all(s in r.all_text() for s in _as_list(when.get("messages_contain", []))):
            return False
        tools = set(r.tool_names)
        if not all(t in tools for t in _as_list(when.get("tools_include", []))):
            return False
        if any(t in tools for t in _as_list(when.get("tools_exclude", []))):
            return False
        if "last_role" in when and r.last_role != when["last_role"]:
            return False
        if "model" in when and r.body.get("model") != when["model"]:
            return False
        return all(r.headers.get(k.lower()) == v for k, v in (when.get("header") or {}).items())

    return pred


@dataclass
class Rule:
    """A reply (or sequence of replies) for requests matching ``when``, used ``times`` times."""
    when: Predicate
    replies: list[dict[str, Any]]
    times: int | None = 1      # None: unlimited (the last reply repeats)
    name: str = ""
    used: int = 0

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any], name: str = "") -> "Rule":
        if ("reply" in obj) == ("replies" in obj):
            raise ValueError(f"rule needs exactly one of 'reply' / 'replies': {obj!r}")
        replies = [normalize_reply(r) for r in (obj["replies"] if "replies" in obj else [obj["reply"]])]
        if not replies:
            raise ValueError("rule 'replies' is empty")
        times_raw = obj.get("times", len(replies))
        times = None if times_raw in ("always", None) else int(times_raw)
        when = obj.get("when", {})
        pred = when if callable(when) else _compile_when(when)
        return cls(when=pred, replies=replies, times=times, name=str(obj.get("name", name)))

    def take(self, req: FakeRequest) -> dict[str, Any] | None:
        if self.times is not None and self.used >= self.times:
            return None
        if not self.when(req):
            return None
        reply = self.replies[min(self.used, len(self.replies) - 1)]
        self.used += 1
        return reply


@dataclass
class Script:
    queues: dict[str, deque] = field(default_factory=lambda: {k: deque() for k in KINDS})
    rules: list[Rule] = field(default_factory=list)

    @classmethod
    def load(cls, obj: Any) -> "Script":
        """Accept None, a path to a JSON file, a list (turn queue) or a dict."""
        if obj is None:
            return cls()
        if isinstance(obj, Script):
            return obj
        if isinstance(obj, (str, Path)):
            obj = json.loads(Path(obj).read_text())
        if isinstance(obj, list):
            obj = {"turn": obj}
        unknown = set(obj) - {*KINDS, "rules"}
        if unknown:
            raise ValueError(f"unknown script sections {sorted(unknown)}")
        script = cls()
        for kind in KINDS:
            script.queues[kind].extend(normalize_reply(r) for r in obj.get(kind, []))
        for i, r in enumerate(obj.get("rules", [])):
            script.rules.append(r if isinstance(r, Rule) else Rule.from_obj(r, name=str(i)))
        return script


def classify(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    if headers.get(COMPACT_HEADER) == "1":
        return "compaction"
    return "turn" if body.get("tools") else "title"


def default_reply(req: FakeRequest) -> dict[str, Any]:
    if req.kind == "compaction":
        return {"text": f"FAKE-SUMMARY: earlier conversation compacted ({len(req.messages)} messages)."}
    if req.kind == "title":
        return {"text": "Fake session title"}
    return {"text": "FAKE-ACK: " + req.last_user_text[:80]}


# --------------------------------------------------------------------------- HTTP

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, fmt: str, *args: Any) -> None:  # keep test output clean
        if self.server.fake.verbose:
            super().log_message(fmt, *args)

    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self) -> None:
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": "fake-model", "object": "model", "owned_by": "turn-memory"}]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        protocol = protocol_of(self.path)
        if protocol is None:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, _WIRES[protocol].error_body(400, {"error": {
                "message": "body is not JSON", "type": "invalid_request_error"}}))
            return
        fake = self.server.fake
        self._streaming = False
        dispatch = functools.partial(fake._dispatch, self.path, dict(self.headers.items()), body, protocol)
        if fake.heartbeat_s and fake.upstream is not None:
            req, reply = self._with_heartbeat(dispatch, fake.heartbeat_s)
        else:
            req, reply = dispatch()
        wait_ms = reply.get("delay_ms") or fake.ttfb_ms  # a reply's own delay replaces the model's
        if wait_ms:
            time.sleep(wait_ms / 1000)
        status = 400 if reply.get("context_overflow") else int(reply.get("status") or 200)
        if status != 200 and self._streaming:
            # the 200 is on the wire already: the error goes as the protocol's in-stream error event
            self._write(_WIRES[protocol].error_frame(status, reply))
        elif status != 200:
            self._send_json(status, _WIRES[protocol].error_body(status, reply))
        else:
            self._stream(req, reply)

    def _start_stream(self) -> None:
        if self._streaming:
            return
        self._streaming = True
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")  # body ends at EOF; no chunked framing needed
        self.end_headers()
        self.close_connection = True

    def _write(self, data: bytes) -> bool:
        """False once the client is gone (DSH cancels on interrupt); nothing to clean up."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _with_heartbeat(self, dispatch: Callable[[], tuple[FakeRequest, dict]],
                        every_s: float) -> tuple[FakeRequest, dict]:
        """Dispatch; while the upstream takes longer than `every_s`, commit the 200 and send an SSE
        comment every `every_s`. Node's fetch gives up on a response whose headers, or next bytes,
        take 300 s (undici's headersTimeout / bodyTimeout), whatever DSH's own limits are."""
        done = threading.Event()
        out: dict[str, Any] = {}

        def work() -> None:
            try:
                out["result"] = dispatch()
            except BaseException as exc:  # re-raised on the handler's thread
                out["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="fake-model-upstream", daemon=True).start()
        alive = True
        while not done.wait(every_s):
            if alive:
                self._start_stream()
                alive = self._write(HEARTBEAT)
        if "error" in out:
            raise out["error"]
        return out["result"]

    def _stream(self, req: FakeRequest, reply: dict[str, Any]) -> None:
        self._start_stream()
        usage = reply_usage(req, reply)
        frames = list(_WIRES[req.protocol].sse_frames(req.body.get("model", "fake-model"), reply, usage,
                                                      self.server.fake.chunk_size))
        pause_s = (reply["chunk_delay_ms"] / 1000) if reply.get("chunk_delay_ms") else 0.0
        if not pause_s and self.server.fake.tokens_per_s:
            # the model's streaming rate: the reply's output tokens spread over its frames
            pause_s = usage["completion_tokens"] / self.server.fake.tokens_per_s / len(frames)
        for frame in frames:
            if not self._write(frame):
                return
            if pause_s:
                time.sleep(pause_s)


_WIRES = {fake_wire_openai.PROTOCOL: fake_wire_openai, fake_wire_messages.PROTOCOL: fake_wire_messages}


def protocol_of(path: str) -> str | None:
    """Which wire protocol a POST path speaks, or None (404)."""
    route = path.split("?")[0].rstrip("/")
    if route.endswith("/chat/completions"):
        return fake_wire_openai.PROTOCOL
    if route in ("/messages", "/v1/messages"):
        return fake_wire_messages.PROTOCOL
    return None


def _arguments_text(call: Mapping[str, Any]) -> str:
    args = call.get("arguments", {})
    return args if isinstance(args, str) else json.dumps(args)


def reply_usage(req: FakeRequest, reply: Mapping[str, Any]) -> dict[str, int]:
    """The usage one reply reports, protocol-neutral: prompt (cache hits included), completion, cached."""
    calls = reply.get("tool_calls") or []
    pt = int(reply.get("prompt_tokens") or max(1, len(json.dumps(req.messages)) // 4))
    ct = int(reply.get("completion_tokens") or max(1, (len(reply.get("text") or "") + len(reply.get("reasoning") or "")
                                                       + sum(len(_arguments_text(c)) for c in calls)) // 4))
    cached = min(pt, int(reply.get("cached_tokens") or 0))
    return {"prompt_tokens": pt, "completion_tokens": ct, "cached_tokens": cached}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: "FakeModel"


class FakeModel:
    """The scripted model server. Thread-safe; usable as a context manager."""

    def __init__(self, script: Any = None, port: int = 0, *, host: str = "127.0.0.1",
                 responder: Responder | None = None, log_path: str | Path | None = None,
                 chunk_size: int = 16, verbose: bool = False, ttfb_ms: float = 0.0,
                 tokens_per_s: float | None = None, upstream: Responder | None = None,
                 heartbeat_s: float | None = None) -> None:
        """`ttfb_ms` / `tokens_per_s`: a model that answers after that long and streams at that
        rate (output tokens as `reply_usage` counts them), for every reply without its own
        `delay_ms` / `chunk_delay_ms`. Requests are served concurrently, each on its own clock.
        `upstream`: asked first, outside the lock (it may block on a real provider); None
        passes the request on to the responder and the script. `heartbeat_s`: while `upstream`
        takes longer than this, the 200 and an SSE comment every `heartbeat_s` go out (an
        error it then returns goes as the protocol's in-stream error event)."""
        self.script = Script.load(script)
        self.upstream = upstream
        self.heartbeat_s = heartbeat_s
        self.ttfb_ms = ttfb_ms
        self.tokens_per_s = tokens_per_s
        self.responder = responder
        self.log_path = Path(log_path) if log_path else None
        self.chunk_size = chunk_size
        self.verbose = verbose
        self._host, self._port = host, port
        self._lock = threading.RLock()  # re-entrant: a responder may inspect .requests
        self._cond = threading.Condition(self._lock)
        self._requests: list[FakeRequest] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> "FakeModel":
        if self._server is not None:
            return self
        self._server = _Server((self._host, self._port), _Handler)
        self._server.fake = self
        # A short poll interval keeps stop() (shutdown waits one poll) fast in tests.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def __enter__(self) -> "FakeModel":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Foreground serving for the CLI (Ctrl-C stops)."""
        self.start()
        assert self._thread is not None
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeModel is not started")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment that points DSH's deepseek-official route at this server."""
        return {"DEEPSEEK_BASE_URL": self.base_url, "DEEPSEEK_API_KEY": FAKE_API_KEY}

    # -- scripting at runtime
    def add_rule(self, when: Mapping[str, Any] | Predicate, reply: Reply | None = None, *,
                 replies: list[Reply] | None = None, times: int | str | None = None, name: str = "") -> Rule:
        obj: dict[str, Any] = {"when": when, "name": name}
        if replies is not None:
            obj["replies"] = replies
        else:
            obj["reply"] = reply
        if times is not None:
            obj["times"] = times
        rule = Rule.from_obj(obj, name=name or str(len(self.script.rules)))
        with self._lock:
            self.script.rules.append(rule)
        return rule

    def push(self, kind: str, *replies: Reply) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        with self._lock:
            self.script.queues[kind].extend(normalize_reply(r) for r in replies)

    # -- inspection
    @property
    def requests(self) -> list[FakeRequest]:
        with self._lock:
            return list(self._requests)

    def requests_of(self, kind: str) -> list[FakeRequest]:
        return [r for r in self.requests if r.kind == kind]

    def wait_for(self, count: int, kind: str | None = None, timeout: float = 30.0) -> list[FakeRequest]:
        """Block until at least ``count`` requests (of ``kind``) arrived; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [r for r in self._requests if kind is None or r.kind == kind]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"got {len(got)} {kind or 'any'} requests, wanted {count}")
                self._cond.wait(left)

    def pending(self) -> dict[str, int]:
        """Unconsumed queue items per kind (a test can assert its script was used up)."""
        with self._lock:
            return {k: len(q) for k, q in self.script.queues.items()}

    # -- the one place a reply is chosen
    def _dispatch(self, path: str, headers: Mapping[str, str], body: dict[str, Any],
                  protocol: str = fake_wire_openai.PROTOCOL) -> tuple[FakeRequest, dict]:
        lower = {k.lower(): v for k, v in headers.items()}
        kept = {k: v for k, v in lower.items()
                if k.startswith(("x-", "anthropic-")) or k in ("user-agent", "accept", "content-type")}
        for k in SECRET_HEADERS:
            if k in lower:
                kept[k] = lower[k][:12] + "…"
        kind = classify(lower, body)
        view = fake_wire_messages.chat_view(body) if protocol == fake_wire_messages.PROTOCOL else None
        req = FakeRequest(index=-1, kind=kind, path=path, headers=kept, body=body, time=time.time(),
                          protocol=protocol, view=view)
        reply, source = None, ""
        if self.upstream is not None:
            got = self.upstream(req)
            if got is not None:
                reply, source = normalize_reply(got), "upstream"
        with self._lock:
            req.index = len(self._requests)
            if reply is None and self.responder is not None:
                got = self.responder(req)
                if got is not None:
                    reply, source = normalize_reply(got), "responder"
            if reply is None:
                for rule in self.script.rules:
                    got = rule.take(req)
                    if got is not None:
                        reply, source = got, f"rule:{rule.name}"
                        break
            if reply is None and self.script.queues[kind]:
                reply, source = self.script.queues[kind].popleft(), "queue"
            if reply is None:
                reply, source = default_reply(req), "default"
            req.reply, req.source = reply, source
            self._requests.append(req)
            if self.log_path is not None:
                with open(self.log_path, "a") as fh:
                    fh.write(json.dumps(req.to_json()) + "\n")
            self._cond.notify_all()
        return req, reply


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m turn_memory.devtools.fake_model",
                                 description="Scripted DeepSeek-style SSE model server (chat completions and Messages).")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--script", help="JSON script (list = turn replies, or {turn,title,compaction,rules})")
    ap.add_argument("--log", help="append every request (and the reply chosen) as JSONL here")
    ap.add_argument("--verbose", action="store_true", help="log each HTTP request to stderr")
    ap.add_argument("--ttfb-ms", type=float, default=0.0, help="answer every request after this long")
    ap.add_argument("--tokens-per-s", type=float, default=None, help="stream every reply at this rate")
    args = ap.parse_args(argv)
    fake = FakeModel(args.script, args.port, host=args.host, log_path=args.log, verbose=args.verbose,
                     ttfb_ms=args.ttfb_ms, tokens_per_s=args.tokens_per_s)
    fake.start()
    print(f"fake-model listening on {fake.base_url}", flush=True)
    fake.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
