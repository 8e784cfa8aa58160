"""Windows path, exercised here: the bridge over tcp on 127.0.0.1 with a per-run secret."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import zmq

from helpers import NO_TURNS, transactions, turn_tasks

pytestmark = pytest.mark.e2e


def test_compact_over_tcp(home, fake):
    for i in range(3):
        fake.push("turn", f"Answer {i}.")
    fake.push("compaction", "SUMMARY-OVER-TCP")
    run = home.run([*turn_tasks(2), "/compact"], engine_overrides={"engine": {"transport": "tcp"}, **NO_TURNS})
    assert run.returncode == 0, (run.records, run.stderr[-2000:])
    assert run.commands()[0]["result"]["kind"] == "success", run.commands()
    _, events = home.session_log(run.session_id)
    (tx,) = transactions(home, events)
    assert [e["type"] for e in tx] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]


def _hello(secret: str) -> bytes:
    return json.dumps({"v": 1, "kind": "call", "id": "h1", "method": "hello", "params": {
        "protocol": 1, "dshVersion": "0.1.0-rc.8", "dialect": "rc8", "secret": secret, "pid": os.getpid(),
        "checkpointSource": {"kind": "plugin", "plugin": "compact", "compactionId": "probe"}}}).encode()


def _ask(endpoint: str, *frames: bytes) -> dict:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    try:
        sock.send_multipart(list(frames))
        return json.loads(sock.recv_multipart()[0])
    finally:
        sock.close()


def test_client_without_the_secret_is_refused(installed_wheel_venv, tmp_path):
    env = {**os.environ, "TURN_MEMORY_SECRET": "s3cret-for-this-run"}
    engine = subprocess.Popen([str(installed_wheel_venv.python), "-m", "turn_memory", "serve", "--transport", "tcp"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                              cwd=tmp_path)
    try:
        ready = engine.stdout.readline().split()
        assert ready[0] == "TURN_MEMORY_READY" and ready[1].startswith("tcp://127.0.0.1:")
        endpoint = ready[1]
        ping = json.dumps({"v": 1, "kind": "call", "id": "p1", "method": "ping", "params": {}}).encode()
        assert _ask(endpoint, ping)["error"]["code"] == "unauthorized"  # no handshake at all
        assert _ask(endpoint, _hello("wrong"))["error"]["code"] == "unauthorized"
        welcome = _ask(endpoint, _hello("s3cret-for-this-run"))
        assert welcome["result"]["protocol"] == 1 and "error" not in welcome
    finally:
        engine.stdin.close()  # the engine exits when its parent's pipe closes
        assert engine.wait(timeout=10) == 0
