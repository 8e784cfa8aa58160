#!/usr/bin/env python3
"""A model played by someone else: an OpenAI-compatible endpoint that hands every request to a
folder and answers with what is written back (a person, or another agent playing the model).

`python bench/relay.py DIR [--port 8899]`, then point a client at `http://127.0.0.1:8899/v1`
(e.g. `turn-memory eval --base-url http://127.0.0.1:8899/v1 --model relay --api-key-env X`).

For request N it writes `DIR/N.request.json` (the body as sent) and `DIR/N.request.md` (the
same, readable: each message with its role, then the tool names), and waits for
`DIR/N.reply.json`: `{"content": "...", "tool_calls": [{"name": "...", "arguments": {...}}]}`
(either key may be left out). Streamed and plain requests are both answered. Standard
library only; several requests may be open at once (parallel workers): each waits for its own reply.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_numbers = itertools.count(1)
_lock = threading.Lock()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content or [])


def readable(body: dict[str, Any]) -> str:
    out = []
    for i, m in enumerate(body.get("messages") or []):
        calls = "".join(f"\n[tool call {c.get('id')}: {c.get('function', {}).get('name')} "
                        f"{c.get('function', {}).get('arguments')}]" for c in m.get("tool_calls") or [])
        answers = f" (answers {m['tool_call_id']})" if m.get("tool_call_id") else ""
        out.append(f"## {i} {m.get('role')}{answers}\n{_text(m.get('content'))}{calls}")
    tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
    out.append("## tools: " + (", ".join(str(t) for t in tools) if tools else "none"))
    return "\n\n".join(out) + "\n"


def _message(reply: dict[str, Any]) -> dict[str, Any]:
    calls = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
              "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})}}
             for c in reply.get("tool_calls") or []]
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
    if calls:
        message["tool_calls"] = calls
    return message


class Relay(BaseHTTPRequestHandler):
    folder: Path

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._json({"object": "list", "data": [{"id": "relay", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        with _lock:
            n = next(_numbers)
        (self.folder / f"{n:04d}.request.json").write_text(json.dumps(body, indent=1, ensure_ascii=False))
        (self.folder / f"{n:04d}.request.md").write_text(readable(body))
        reply_file = self.folder / f"{n:04d}.reply.json"
        stream = bool(body.get("stream"))
        if stream:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
        while not reply_file.exists():
            time.sleep(1)
            if stream:  # a comment line keeps the connection's idle timers from firing
                self.wfile.write(b": waiting\n\n")
                self.wfile.flush()
        time.sleep(0.2)  # the writer may still be writing
        reply = json.loads(reply_file.read_text())
        message = _message(reply)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if not stream:
            self._json({"id": f"relay-{n}", "object": "chat.completion", "model": "relay", "usage": usage,
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
            return
        delta: dict[str, Any] = {"role": "assistant", "content": message["content"]}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(message["tool_calls"])]
        for chunk in ({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}):
            data = {"id": f"relay-{n}", "object": "chat.completion.chunk", "model": "relay", **chunk}
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _json(self, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--port", type=int, default=8899)
    args = ap.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    Relay.folder = args.folder
    print(f"relay on http://127.0.0.1:{args.port}/v1, requests in {args.folder}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), Relay).serve_forever()


if __name__ == "__main__":
    main()
