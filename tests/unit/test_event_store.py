"""A log keeps the events it reads rarely compact (`host.event_store`: elided chunks as their time,
the rest off the surface as JSON text, deflated when long) and answers exactly as it did when it
kept every event as the dict it arrived as (bench/soak.py: the mirror's dicts were most of the
engine's growth over a 300-turn rc8 session)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from turn_builders import Shape, completed_turn_log
from turn_memory.bridge.protocol import SessionEventsParams
from turn_memory.devtools.synthetic_log import write_synthetic_log
from turn_memory.host.dialect import is_runtime_context
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.event_store import DEFLATE_FROM, EventStore
from turn_memory.host.surface import SessionLog, SurfaceError
from turn_memory.logs.reader import read_session_log
from turn_memory.runtime.land import validate
from turn_memory.runtime.mirror import SessionMirror
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import LandingContext, _retained_snapshot, plan_landing
from turn_memory.turns.nodes import original_nodes


def chunk(seq: int, time: int = 1_790_000_000_123) -> dict[str, Any]:
    """An elided chunk, as the shim sends it."""
    return {"type": "assistant/chunk", "seq": seq, "time": time, "data": None}


def exact(events: Any) -> list[str]:
    """Events as JSON text: equal values, equal types and the same key order."""
    return [json.dumps(e) for e in events]


# -- the store itself ------------------------------------------------------------------------

def test_an_elided_chunk_is_kept_as_its_time_and_reads_back_exactly():
    store = EventStore()
    store.append(chunk(0, 1_790_000_000_123))
    assert store.is_compact(0) and store._items[0] == 1_790_000_000_123
    assert exact([store[0]]) == ['{"type": "assistant/chunk", "seq": 0, "time": 1790000000123, "data": null}']
    # anything else about a chunk keeps it whole: its data (a reasoning block-end), a float or
    # missing time, another key order
    for seq, event in enumerate([
        {"type": "assistant/chunk", "seq": 1, "time": 5, "data": {"turn": 1, "step": 1, "chunk": {"type": "finish"}}},
        {"type": "assistant/chunk", "seq": 2, "time": 5.5, "data": None},
        {"type": "assistant/chunk", "seq": 3, "data": None},
        {"seq": 4, "type": "assistant/chunk", "time": 5, "data": None},
        {"type": "assistant/chunk", "seq": True, "time": 5, "data": None},
    ], start=1):
        store.append(event)
        assert not store.is_compact(seq) and store[seq] is event


def test_a_compacted_event_reads_back_equal_with_its_key_order_as_a_fresh_dict():
    store = EventStore()
    small = {"type": "step/start", "seq": 0, "time": 7, "data": {"turn": 3, "step": 1, "x": [1.5, -0.0, True, None]}}
    text = "déjà vu \ud800 " + "line of output\n" * 200  # non-ASCII, a lone surrogate, long
    big = {"type": "tool/result", "seq": 1, "time": 8, "surfaceOp": "append",
           "data": {"turn": 3, "step": 1, "message": {"content": [{"type": "text", "text": text}]}}}
    store.append(small)
    store.append(big)
    before = exact([small, big])
    store.compact(0)
    store.compact(1)
    assert store.is_compact(0) and store.is_compact(1)
    assert store._items[0][:1] == b"{" and store._items[1][:1] != b"{"  # the long one deflated
    assert len(json.dumps(big)) >= DEFLATE_FROM > len(store._items[1])
    assert exact(store) == before and store[0] == small and store[1] == big
    read = store[1]
    assert read is not big and read is not store[1]  # each read builds its own dict
    read["data"]["message"]["content"][0]["text"] = "changed"
    assert store[1] == big  # so nothing changes the log through one


def test_an_event_whose_json_would_not_read_back_equal_stays_a_dict():
    store = EventStore()
    odd = [
        {"type": "x", "seq": 0, "time": 1, "data": {"pair": (1, 2)}},  # a tuple reads back a list
        {"type": "x", "seq": 1, "time": 1, "data": {1: "int key"}},
        {"type": "x", "seq": 2, "time": 1, "data": float("nan")},
        {"type": "x", "seq": 3, "time": 1, "data": {1, 2}},  # not JSON at all
    ]
    for seq, event in enumerate(odd):
        store.append(event)
        store.compact(seq)
        assert not store.is_compact(seq) and store[seq] is event


def test_the_store_reads_as_the_list_it_replaces():
    events = [chunk(0), {"type": "turn/start", "seq": 1, "time": 2, "data": {"turn": 1}}, chunk(2, 9),
              {"type": "turn/end", "seq": 3, "time": 4, "data": {"turn": 1, "reason": {"kind": "completed"}}}]
    store = EventStore()
    for event in events:
        store.append(event)
    store.compact(1)
    assert len(store) == 4 and store == events and events == store and store != events[:3]
    assert exact(store[-1:]) == exact(events[-1:]) and exact([store[-2]]) == exact([events[-2]])
    for cut in (slice(None), slice(1, 3), slice(None, None, -1), slice(-3, None, 2), slice(5, 9)):
        assert exact(store[cut]) == exact(events[cut]), cut
    assert exact(reversed(store)) == exact(reversed(events)) and exact(iter(store)) == exact(events)
    assert store.index(events[2]) == 2 and events[3] in store
    with pytest.raises(IndexError):
        store[4]


# -- a log with its store answers exactly what one keeping every dict answers ----------------

def answers(log: SessionLog) -> dict[str, Any]:
    """Every fact a log offers the engine, as plain values."""
    index = log.index
    turns = sorted(index.turn_starts)
    return {
        "events": exact(log.events), "nodes": list(log.nodes), "replaced": log.replace_generation,
        "reload": list(log.reload_problems), "messages": log.surface_messages(),
        "prices": [log.price(s) for s in log.nodes], "tokens": log.tokens(),
        "balanced": [(log.balanced_before(s), log.balanced_after(s)) for s in log.nodes],
        "origins": dict(index.origins), "turn_nodes": {t: index.turn_nodes(t) for t in turns},
        "reasoning": {t: index.has_raw_reasoning(t) for t in turns}, "spans": {t: index.turn_span(t) for t in turns},
        "steps": dict(index.steps), "pending": set(index.pending), "landed": set(index.landed),
        "kept": set(index.kept_assistants), "lifecycle": index.lifecycle, "open_step": index.open_step,
        "rewritten": index.rewritten, "tool_results": index.tool_results,
    }


def whole(monkeypatch: pytest.MonkeyPatch, fold: Any) -> Any:
    """`fold()` with every event kept as the dict it arrived as (the store before compaction)."""
    with monkeypatch.context() as m:
        m.setattr(EventStore, "compact", lambda self, seq: None)
        m.setattr(EventStore, "append", lambda self, event: self._items.append(event))
        return fold()


def synthetic_rc8(tmp_path: Any) -> list[dict[str, Any]]:
    """A long rc8 log with landings and checkpoints, its chunks elided as the shim sends them
    (one reasoning block-end whole, as it sends that when thought hints are on)."""
    write_synthetic_log(tmp_path / "s.jsonl.zstd", turns=45, checkpoint_every=12)
    _, events = read_session_log(tmp_path / "s.jsonl.zstd")
    kept = next(e["seq"] for e in events if e["type"] == "assistant/chunk")
    return [e if e["type"] != "assistant/chunk" or e["seq"] == kept else {**e, "data": None} for e in events]


def test_a_long_rc8_log_answers_exactly_as_with_every_event_whole(tmp_path, monkeypatch):
    events = synthetic_rc8(tmp_path)
    log = SessionLog(RC8, events)
    baseline = whole(monkeypatch, lambda: SessionLog(RC8, events))
    assert answers(log) == answers(baseline)
    assert exact(log.events) == exact(events)
    # kept whole: the surface's nodes and the request headers, the very dicts appended
    whole_seqs = {s for s in range(len(log)) if not log.events.is_compact(s)}
    headers = {e["seq"] for e in events if e["type"] == "request/header"}
    assert whole_seqs == set(log.nodes) | headers
    assert all(log.events[s] is events[s] for s in whole_seqs)
    chunks = [e["seq"] for e in events if e["type"] == "assistant/chunk" and e["data"] is None]
    assert len(chunks) > len(events) / 2 and all(type(log.events._items[s]) is int for s in chunks)
    # a plan is judged the same: a replacement of a shadowed node, and one of a current node
    shadowed = next(s for s in log.index.origins if not log.on_surface(s))
    for target in (shadowed, log.nodes[-1]):
        plan = [{"type": "user/message", "seq": len(log), "time": 1, "data": {"id": "u", "role": "user",
                 "source": {"kind": "user"}, "content": [{"type": "text", "text": "x"}]},
                 "surfaceOp": {"op": "replace", **dict(zip(RC8.replace_keys, (target, target)))},
                 "sourceEventSeqs": [target]}]
        outcomes = []
        for judged in (log, baseline):
            try:
                judged.check_plan(plan)
                outcomes.append("accepted")
            except SurfaceError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], target


def test_the_mirror_keeps_the_same_log_in_batches_and_across_a_reset(tmp_path, monkeypatch):
    events = synthetic_rc8(tmp_path)

    def mirrored() -> SessionLog:
        mirror = SessionMirror()
        for _ in range(2):  # the second time the shim resends the whole log (a reconnect)
            for start in range(0, len(events), 7):
                batch = events[start:start + 7]
                params = SessionEventsParams(sessionId="s", start=start, count=len(batch), reset=start == 0)
                assert mirror.receive(None, RC8, params, json.dumps(batch).encode()) is not None
        return mirror.sessions["s"].log

    assert answers(mirrored()) == answers(whole(monkeypatch, mirrored))


@pytest.mark.parametrize("dialect", [RC8, V02], ids=["rc8", "v02"])
def test_a_landed_turn_leaves_its_originals_compact_and_the_log_answers_the_same(dialect, monkeypatch):
    shape = Shape(steps=[(1, True, False), (1, False, True), (0, False, False)])
    log, positions = completed_turn_log(dialect, shape, prior_turns=2)
    editor = TurnNodeEditor(3, original_nodes(log, positions))
    editor.replace("n2", f"n{len(positions)}", [Output("assistant", "Fixed the parser and the lexer.")])
    for event in validate(log, plan_landing(log, editor, positions, LandingContext(3, 4, 1, ("fork",)))):
        assert not log.append(event)
    events = list(log.events)  # the landing's ids are random: the same events, folded with every dict whole
    assert answers(log) == answers(whole(monkeypatch, lambda: SessionLog(dialect, events)))
    gone = [s for s in log.index.origins if not log.on_surface(s)]
    assert gone and all(log.events.is_compact(s) for s in gone)
    assert all(not log.events.is_compact(s) for s in log.nodes)


def test_the_retained_snapshot_is_found_on_the_surface_as_a_scan_back_through_the_log_found_it(tmp_path):
    """A landing looks up the snapshot the host retains over the surface (the log off it is
    compact): the same seq the scan back through every event found, at every point of the log."""
    def scanned(log: SessionLog) -> int | None:
        on_surface = set(log.nodes)
        for event in reversed(log.events):
            if event["type"] == "user/message" and is_runtime_context((event.get("data") or {}).get("source")):
                if event["seq"] in on_surface:
                    return int(event["seq"])
        return None

    log = SessionLog(RC8)
    found = set()
    for event in synthetic_rc8(tmp_path):
        log.append(event)
        if event["type"] in ("user/message", "turn/end", "compaction/end"):
            assert _retained_snapshot(log) == scanned(log), event["seq"]
            found.add(_retained_snapshot(log))
    assert len(found) > 10 and None in found  # many snapshots retained in turn, and none at the start
