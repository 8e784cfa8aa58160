"""The model server DSH talks to during a replay: it answers the agent from the transcript
and forwards what shapes the memory to the provider.

It is the scripted `FakeModel` with an `upstream` hook, so DSH's two wire protocols, the
request log and the streaming are the ones every test uses. After the memory snapshot is
taken (the capture request) nothing more is forwarded: the late work of the finished
session (compressing the snapshot turn) is answered by the scripted stand-in at no cost.
A provider that is down (`ProviderDown`) sets `down`, and the replay stops at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turn_memory.devtools.fake_model import FakeModel, FakeRequest
from turn_memory.eval import routing
from turn_memory.eval.provider import ChatRequest, Provider, ProviderDown, ProviderError, Usage
from turn_memory.eval.replay import Replay
from turn_memory.eval.scenario import Scenario
from turn_memory.eval.scripted import ScriptedProvider
from turn_memory.prompts import render_prompt

#: the user message of the turn whose first request is the memory snapshot
CAPTURE_TEXT = "Before we go on, I have a few questions about this session."
CAPTURE_REPLY = "Sure, ask away."
#: while the provider works on a request, the proxy sends DSH a keep-alive this often (Node's
#: fetch gives up on a response that sends nothing for 300 s)
HEARTBEAT_S = 15.0


@dataclass
class Forwarded:
    purpose: str
    usage: Usage
    messages: list[dict[str, Any]]
    error: str | None = None


@dataclass
class EvalProxy:
    scenario: Scenario
    provider: Provider
    replay: Replay = field(init=False)
    forwarded: list[Forwarded] = field(default_factory=list)
    #: purpose -> requests DSH sent, answered here or forwarded
    counts: dict[str, int] = field(default_factory=dict)
    captured: FakeRequest | None = None
    #: append every request and its answer here as JSON lines (kept with `--workdir`)
    log_path: Path | None = None
    #: the first request the provider could not answer for good; `stopped` is set with it
    down: ProviderDown | None = None
    stopped: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.replay = Replay(self.scenario)
        self._hint_system = render_prompt("thought-hints", {})
        self._lock = threading.Lock()
        self._local = ScriptedProvider()
        self.fake = FakeModel(upstream=self._route, log_path=self.log_path, heartbeat_s=HEARTBEAT_S)

    def start(self) -> "EvalProxy":
        self.fake.start()
        return self

    def stop(self) -> None:
        self.fake.stop()

    @property
    def base_url(self) -> str:
        return self.fake.base_url

    def _route(self, req: FakeRequest) -> dict[str, Any]:
        purpose = routing.purpose_of(req, user_texts=self.scenario.user_texts, capture_text=CAPTURE_TEXT,
                                     hint_system=self._hint_system)
        with self._lock:
            self.counts[purpose] = self.counts.get(purpose, 0) + 1
            closed = self.captured is not None
            if purpose == routing.CAPTURE and self.captured is None:
                self.captured = req
        if purpose == routing.AGENT:
            return self.replay.reply(req.messages)
        if purpose in (routing.CAPTURE, routing.TITLE):
            return {"text": CAPTURE_REPLY if purpose == routing.CAPTURE else self.scenario.title}
        request = ChatRequest(purpose, req.messages, req.tools)
        if closed:  # the session is over: nothing here is measured, nothing is spent
            return self._local.complete(request).reply()
        if self.down is not None:  # the replay is being stopped: nothing more goes to a provider that is down
            return {"status": 502, "error": {"message": f"turn-memory eval: the provider failed: {self.down}",
                                             "type": "upstream_error"}}
        try:
            completion = self.provider.complete(request)
        except ProviderError as exc:
            with self._lock:
                self.forwarded.append(Forwarded(purpose, Usage(), req.messages, str(exc)))
                if isinstance(exc, ProviderDown) and self.down is None:
                    self.down = exc
                    self.stopped.set()
            return {"status": 502, "error": {"message": f"turn-memory eval: the provider failed: {exc}",
                                             "type": "upstream_error"}}
        with self._lock:
            self.forwarded.append(Forwarded(purpose, completion.usage, req.messages))
        return completion.reply()

    def worker_messages(self, purpose: str) -> list[list[dict[str, Any]]]:
        return [f.messages for f in self.forwarded if f.purpose == purpose]
