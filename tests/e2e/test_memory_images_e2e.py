"""Lazy images on each real DSH host (0.1.0-rc.8, 0.2.1-rc.2): an image turn lands with its marker,
read_memory_image returns the image, forged ids and text-only models are refused, and a
worker that drops the marker cannot finish."""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from typing import Any

import pytest

from helpers import reload, text_of
from turn_memory.host.surface import SessionLog
from turn_memory.turns.recovery import turn_nodes

pytestmark = pytest.mark.e2e

WORKER_TOOLS = {"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression"}
IS_WORKER = {"tools_include": "replace_turn_nodes"}
FINISH = {"tool_calls": [{"name": "finish_turn_compression", "arguments": {}}]}
TASK_TEXT = "Here is a screenshot of the broken chart; remember what it shows. " * 3
FORGED = "sha256:" + "0" * 64


def tiny_png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = tiny_png()
SHOT = "sha256:" + hashlib.sha256(PNG).hexdigest()  # DSH's local attachment store is content-addressed
MARKER = f'<memory-image ref="{SHOT}" type="image/png" size="2x2" bytes="{len(PNG)}" name="shot.png" />'


def fold(user: str, home: Any) -> dict[str, Any]:
    """Turn 1 = user (text + image), runtime snapshot, assistant answer: the user node and the
    snapshot become `user`, and where the host's workers may rewrite assistants (rc8) the answer
    too; on 0.2 it stays as it is (`turns.assistantNodes`)."""
    if home.dialect.keeps_assistants("auto"):
        return {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n2", "nodes": [
            {"role": "user", "content": user}]}}]}
    return {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "n1", "to": "n3", "nodes": [
        {"role": "user", "content": user},
        {"role": "assistant", "content": "COMPRESSED-ASSISTANT: the screenshot shows a red square."}]}}]}


def read_image(ref: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "read_memory_image", "arguments": {"ref": ref}}]}


def is_worker(request) -> bool:
    return bool(WORKER_TOOLS & set(request.tool_names))


def agent_requests(fake):
    return [r for r in fake.requests if r.kind == "turn" and not is_worker(r)]


def image_urls(request) -> list[str]:
    return [part["image_url"]["url"] for m in request.messages if isinstance(m.get("content"), list)
            for part in m["content"] if isinstance(part, dict) and part.get("type") == "image_url"]


def tool_texts(request) -> list[str]:
    return [text_of(m) for m in request.messages if m["role"] == "tool"]


def with_image(home):
    """An image-capable route, the PNG in the workspace, and workers that never eat agent replies."""
    home.image_input = True
    (home.workspace / "shot.png").write_bytes(PNG)
    return {"image": str(home.workspace / "shot.png"), "text": TASK_TEXT}


def test_an_image_turn_lands_with_its_marker_and_read_memory_image_returns_it(home, fake):
    task = with_image(home)
    fake.push("turn", "I see a red square on the chart. IMAGE-SEEN",
              read_image(SHOT), read_image(FORGED), "The square was red. SECOND-DONE")
    # the first worker drops the marker: its finish is refused; it puts the marker back and finishes
    fake.add_rule(IS_WORKER, replies=[fold("COMPRESSED-USER: a screenshot of the broken chart.", home), FINISH,
                                      {"tool_calls": [{"name": "replace_turn_nodes", "arguments": {"from": "r1", "nodes": [
                                          {"role": "user", "content": f"COMPRESSED-USER: screenshot {MARKER}"}]}}]},
                                      FINISH])
    fake.add_rule(IS_WORKER, reply="nothing to do", times="always")  # later turns stay raw
    # the landing barrier: turn 2's first request already carries turn 1 compressed
    run = home.run([task, "What colour was the square? Look again."], engine_overrides={"turns": {"landingBarrier": True}})
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    first = run.tasks()[0]
    assert first["image"]["attachmentId"] == SHOT and first["image"]["name"] == "shot.png"
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed", "completed"]

    # the worker saw the marker in its prompt, has read_memory_image in its scope, and its
    # finish without the marker came back as an error naming it
    workers = [r for r in fake.requests if r.kind == "turn" and is_worker(r)]
    assert MARKER in workers[0].all_text() and "read_memory_image" in workers[0].tool_names
    refusal = next(t for r in workers for t in tool_texts(r) if "cannot finish yet" in t)
    assert "image markers were dropped" in refusal and MARKER in refusal

    # turn 1 landed with the marker; the raw image is gone from the surface
    _, events = home.session_log(run.session_id)
    reload(home, events)
    log = SessionLog(home.dialect, events)
    landed = [log.message_of(s) for s in turn_nodes(log, 1)]
    assert [m["role"] for m in landed] == ["user", "assistant"]
    assert MARKER in text_of(landed[0]) and all(b["type"] == "text" for m in landed for b in m["content"])

    agent = agent_requests(fake)
    turn2 = [r for r in agent if "Look again" in r.all_text()]
    # turn 2 starts lazy: the marker, no pixels
    assert MARKER in turn2[0].all_text() and image_urls(turn2[0]) == []
    # read_memory_image brought the image back into the next request, verified by DSH's store
    assert image_urls(turn2[1]) == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert any(MARKER in t for t in tool_texts(turn2[1]))
    # a forged id is refused with an error result and no image
    assert any("no image with ref" in t and FORGED in t for t in tool_texts(turn2[2]))
    assert len(image_urls(turn2[2])) == 1  # still only the one legitimately read
    # the main agent's catalog has read_memory_image (from the request carrying the landed
    # marker on) and none of the worker tools
    assert all("read_memory_image" in r.tool_names for r in turn2) and not is_worker(turn2[-1])


def test_read_memory_image_on_a_text_only_model_is_refused(home, fake):
    task = with_image(home)
    fake.push("turn", "I see a red square. IMAGE-SEEN", "Noted. SECOND-DONE")
    fake.add_rule(IS_WORKER, replies=[fold(f"COMPRESSED-USER: screenshot {MARKER}", home), FINISH])
    fake.add_rule(IS_WORKER, reply="nothing to do", times="always")
    run = home.run([task, "Thanks."], engine_overrides={"turns": {"landingBarrier": True}})  # turn 1 lands in turn 2
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    seen = len(fake.requests)

    # the same session reopened on a text-only model: the marker is text, the image is refused
    home.route_model = "fake-text-model"
    fake.push("turn", read_image(SHOT), "I cannot look at it again. TEXT-DONE")
    again = home.run(["Which colour exactly? Look at the screenshot."], resume=run.session_id)
    assert again.returncode == 0, (again.records, again.stderr[-3000:])
    later = [r for r in agent_requests(fake) if r.index >= seen]
    assert later and all(r.body.get("model") == "fake-text-model" for r in later)
    refusal = next(t for r in later for t in tool_texts(r) if "read_memory_image" in t or "image input" in t)
    assert "does not accept image input" in refusal
    assert not any(image_urls(r) for r in later)
