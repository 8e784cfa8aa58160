"""A deterministic stand-in for the model when it plays turn-memory's workers (demo, benchmarks).

It reads the catalog the engine puts in the worker's task prompt and answers with real tool
calls: a turn worker folds the whole turn into the user's request and the assistant's last
answer, then finishes; a session worker replaces its segment's placeholder with the first
request and the answers it saw, then finishes. Either keeps the task's image markers. Plug it
in as a `FakeModel` responder.
"""

from __future__ import annotations

import re
from typing import Any

from turn_memory.devtools.fake_model import FakeRequest
from turn_memory.host.tools import preview

#: a catalog line; a backlog compressed by one worker prefixes every id with its turn (`t4.n1`)
_NODE = re.compile(r"^- ((?:t\d+\.)?(?:n|r)\d+) · (user|assistant|tool) · ([^·]+) · ([^·]+) · capacity \d+ · (.*)$", re.M)
#: a segment's source node: its heading (a user node says what kind it is:
#: `### S2.1 · turn 4 · user · host-context`), then its text up to the next heading
_SOURCE = re.compile(r"^### (S\d+\.\d+)(?: · turn \d+)? · (user|assistant|tool)"
                     r"(?: · (human|host-context|checkpoint|compressed-turn))?\n(.*?)(?=\n\n### S\d|\Z)", re.M | re.S)
#: an image marker the rewrite must keep, character for character
_IMAGE = re.compile(r"<memory-image [^>]*/>")


def _task(req: FakeRequest) -> str:
    """The engine's task prompt: the last user message carrying a catalog."""
    for message in reversed(req.messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])
        if "Current nodes of turn" in text or "Your segment's nodes" in text:
            return text
    return ""


def _last_tool_result(req: FakeRequest) -> str:
    for message in reversed(req.messages):
        if message.get("role") == "tool":
            content = message.get("content")
            return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])
        if message.get("role") == "assistant":
            continue
    return ""


def _with_images(text: str, task: str) -> str:
    """`text` followed by every image marker of the task (a rewrite that drops one cannot finish)."""
    markers = list(dict.fromkeys(_IMAGE.findall(task)))
    return " ".join([text, *markers]) if markers else text


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _turn_worker(req: FakeRequest) -> dict[str, Any]:
    if _last_tool_result(req).startswith("Accepted"):
        return _call("finish_turn_compression", {})
    task = _task(req)
    turns: dict[str, list[tuple[str, str, str, str, str]]] = {}
    for node in _NODE.findall(task):
        turns.setdefault(node[0].rpartition(".")[0], []).append(node)
    calls = []
    for nodes in turns.values():  # each turn of a batch on its own
        if any(state.strip() == "fixed" for _, _, _, state, _ in nodes):
            calls += _in_place(nodes, task)
            continue
        human = next((p for _, role, kind, _, p in nodes if role == "user" and kind.strip() == "human"), nodes[0][4])
        answer = next((p for _, role, _, _, p in reversed(nodes) if role == "assistant"), "")
        if len(nodes) <= 2 and not any("raw reasoning" in kind for _, _, kind, _, _ in nodes):
            continue  # already as short as it usefully gets
        calls.append({"name": "replace_turn_nodes", "arguments": {"from": nodes[0][0], "to": nodes[-1][0], "nodes": [
            {"role": "user", "content": _with_images(human.strip(), task)},
            {"role": "assistant", "content": answer.strip() or "Done."},
        ]}})
    if not calls:
        return _call("finish_turn_compression", {})
    return {"tool_calls": calls}


def _in_place(nodes: list[tuple[str, str, str, str, str]], task: str) -> list[dict[str, Any]]:
    """Assistant nodes fixed (a 0.2 host): the opening user nodes become the person's request,
    each tool result its preview's first words; the image markers ride on the request."""
    calls: list[dict[str, Any]] = []
    head = 0
    while head < len(nodes) and nodes[head][1] == "user":
        head += 1
    if head:
        human = next((p for _, _, kind, _, p in nodes[:head] if kind.strip() == "human"), nodes[0][4])
        text = _with_images(human.strip(), task)
        if head > 1 or text != nodes[0][4].strip():
            calls.append({"name": "replace_turn_nodes", "arguments": {
                "from": nodes[0][0], "to": nodes[head - 1][0], "nodes": [{"role": "user", "content": text}]}})
    for node_id, role, _, state, seen in nodes[head:]:
        short = " ".join(seen.split()[:8])
        if role == "tool" and state.strip() == "unchanged" and len(short) < len(seen.strip()):
            calls.append({"name": "replace_turn_nodes", "arguments": {
                "from": node_id, "to": node_id, "nodes": [{"role": "tool", "content": short}]}})
    return calls


def _whole_words(preview: str) -> str:
    """A catalog preview cut mid-word ("… decode across frames wi…") ends at the last whole word."""
    preview = preview.strip()
    return re.sub(r"\s+\S*…$", "…", preview) if preview.endswith("…") else preview


def _session_worker(req: FakeRequest) -> dict[str, Any]:
    if _last_tool_result(req).startswith("Accepted at revision"):
        return _call("finish_session_segment", {})
    task = _task(req)
    segment = re.search(r"You are assigned segment (\d+)", task)
    revision = re.search(r"the working checkpoint is at revision (\d+)", task)
    sources = _SOURCE.findall(task)
    if not (segment and revision):
        return {"text": "I cannot find my assignment."}
    # a catalog-sized preview of each: the script keeps about as much as it did from previews
    asks = [_whole_words(preview(p)) for _, role, kind, p in sources if role == "user" and kind != "host-context"]
    answers = [_whole_words(preview(p)) for _, role, _, p in sources if role == "assistant"]
    return _call("replace_session_memory", {
        "expected_revision": int(revision.group(1)), "from": f"P{segment.group(1)}",
        "nodes": [{"role": "user", "content": _with_images(" / ".join(asks[:3]) or "Earlier requests.", task)},
                  {"role": "assistant", "content": " / ".join(answers[-3:]) or "Earlier work."}],
    })


def worker_responder(req: FakeRequest) -> dict[str, Any] | None:
    tools = set(req.tool_names)
    if "replace_turn_nodes" in tools:
        return _turn_worker(req)
    if "replace_session_memory" in tools:
        return _session_worker(req)
    return None
