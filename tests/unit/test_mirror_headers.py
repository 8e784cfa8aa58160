"""The mirror keeps one copy of a request/header the host writes again unchanged (bench/soak.py:
DSH 0.2 rewrote its ~23 KB header, tool schemas and all, at most turns of a 300-turn session; the
copies were half of the log and most of the engine's growth)."""

from __future__ import annotations

import json

from session_builders import SessionBuilder
from turn_memory.bridge.protocol import SessionEventsParams
from turn_memory.host.dialects import RC8
from turn_memory.runtime.mirror import SessionMirror

TOOLS = [{"name": f"tool_{k}", "description": "does a thing " * 40, "parameters": {"type": "object"}} for k in range(8)]


def test_an_unchanged_request_header_shares_the_one_before_it_and_a_changed_one_is_kept_whole():
    b = SessionBuilder(RC8)
    b.preamble()
    first = b.header(tools=TOOLS)
    b.work_turn()
    again = b.header(tools=TOOLS)
    b.work_turn()
    changed = b.header(tools=TOOLS[:3])
    b.work_turn(close=False)
    events = b.events
    mirror = SessionMirror()
    cut = again + 1  # two batches: the sharing holds across them
    assert mirror.receive(None, RC8, SessionEventsParams(sessionId="s", start=0, count=cut, reset=True),
                          json.dumps(events[:cut]).encode()) is not None
    assert mirror.receive(None, RC8, SessionEventsParams(sessionId="s", start=cut, count=len(events) - cut),
                          json.dumps(events[cut:]).encode()) is not None
    kept = mirror.sessions["s"].log.events
    assert kept == events  # the same log, event for event
    header = lambda seq: kept[seq]["data"]["header"]  # noqa: E731
    assert header(again) is header(first)
    assert header(changed) is not header(first) and len(header(changed)["tools"]) == 3
    # a reset (the shim resends the whole log) starts over
    assert mirror.receive(None, RC8, SessionEventsParams(sessionId="s", start=0, count=len(events), reset=True),
                          json.dumps(events).encode()) is not None
    kept = mirror.sessions["s"].log.events
    assert kept == events and header(again) is header(first) and header(changed) is not header(first)
