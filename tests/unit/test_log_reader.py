"""The on-disk DSH session log reader, on logs built here in the exact on-disk format."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import zstandard

from turn_memory.logs.reader import (
    SessionLogError,
    UnknownDialect,
    expand_chunk_row,
    log_dialect,
    find_session_logs,
    read_session_header,
    read_session_log,
    session_log_for,
)
from turn_memory.host.session_dirs import encode_segment

HEADER = {"type": "session", "version": 0, "id": "session-abc", "createdAt": 1796000000000,
          "cwd": "/tmp/ws", "delegationDepth": 0}


def chunk(seq: int, time: int, kind: str, index: int, payload: str, **call: str) -> dict[str, Any]:
    if kind == "tool-call-delta":
        c = {"type": kind, "index": index, "id": call["id"], **({"name": call["name"]} if "name" in call else {}),
             "argumentsDelta": payload}
    else:
        c = {"type": kind, "index": index, "text": payload}
    return {"type": "assistant/chunk", "seq": seq, "time": time, "data": {"turn": 1, "step": 1, "chunk": c}}


def sample_events() -> list[dict[str, Any]]:
    """A turn with reasoning, text and a tool call streamed as deltas (what DSH logs)."""
    ev: list[dict[str, Any]] = [
        {"type": "turn/start", "seq": 0, "time": 1000, "data": {"turn": 1}},
        {"type": "user/message", "seq": 1, "time": 1001, "data": {"turn": 1, "message": {"role": "user"}}},
        {"type": "step/start", "seq": 2, "time": 1002, "data": {"turn": 1, "step": 1}},
    ]
    t = 1010
    for text in ("I ", "should ", "look", "."):
        ev.append(chunk(len(ev), t, "reasoning-delta", 0, text))
        t += 3
    for text in ("Let ", "me ", "check."):
        ev.append(chunk(len(ev), t, "text-delta", 1, text))
        t += 1
    ev.append(chunk(len(ev), t, "tool-call-delta", 2, "", id="call_1", name="bash"))
    t += 2
    for args in ('{"comm', 'and": "l', 's"}'):
        ev.append(chunk(len(ev), t, "tool-call-delta", 2, args, id="call_1"))
        t += 2
    ev.append({"type": "assistant/message", "seq": len(ev), "time": t, "data": {"turn": 1, "step": 1}})
    ev.append({"type": "turn/end", "seq": len(ev), "time": t + 5, "data": {"turn": 1}})
    return ev


def pack(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Test-side packer: the exact rows DSH's packChunkRuns writes for sample_events()."""
    def row(tag: str, run: list[dict], payload_key: str, extra: dict) -> dict:
        first = run[0]
        return {"type": tag, "seq0": first["seq"], "time0": first["time"], "data": {
            "turn": 1, "step": 1, "index": first["data"]["chunk"]["index"],
            "dt": [b["time"] - a["time"] for a, b in zip(run, run[1:])], **extra,
            payload_key: [e["data"]["chunk"]["text" if payload_key == "texts" else "argumentsDelta"] for e in run]}}

    by_seq = {e["seq"]: e for e in events}
    return [by_seq[0], by_seq[1], by_seq[2],
            row("reasoning-chunks", [by_seq[s] for s in range(3, 7)], "texts", {}),
            row("text-chunks", [by_seq[s] for s in range(7, 10)], "texts", {}),
            by_seq[10],  # the naming delta differs in shape (has name) -> starts no run of its own here
            row("tool-call-chunks", [by_seq[s] for s in range(11, 14)], "args", {"id": "call_1"}),
            by_seq[14], by_seq[15]]


def frame(records: list[dict[str, Any]]) -> bytes:
    """One independent, checksummed frame without a content size, like Node's streaming zstd."""
    cobj = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    text = "".join(json.dumps(r) + "\n" for r in records).encode()
    return cobj.compress(text) + cobj.flush()


def write_log(path: Path, batches: list[list[dict[str, Any]]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(frame([HEADER]) + b"".join(frame(b) for b in batches))
    return path


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    rows = pack(sample_events())
    # header frame + three append batches (a row never spans batches, as in DSH)
    return write_log(tmp_path / "sessions" / "--tmp-ws--" / "session-abc" / "session.jsonl.zstd",
                     [rows[:3], rows[3:6], rows[6:]])


def test_reads_every_frame_and_expands_chunk_rows(log_path: Path) -> None:
    raw = log_path.read_bytes()
    # the trap this reader exists for: one-shot decompress stops after the header frame
    assert zstandard.ZstdDecompressor().decompressobj().decompress(raw).count(b"\n") == 1
    header, events = read_session_log(log_path)
    assert header == HEADER
    assert events == sample_events()
    assert read_session_header(log_path) == HEADER


def test_expand_row_semantics() -> None:
    row = {"type": "tool-call-chunks", "seq0": 7, "time0": 100,
           "data": {"turn": 2, "step": 3, "index": 1, "id": "c", "name": "read", "dt": [0, 5], "args": ["{", "}", ""]}}
    events = expand_chunk_row(row)
    assert [(e["seq"], e["time"]) for e in events] == [(7, 100), (8, 100), (9, 105)]
    assert events[0]["data"] == {"turn": 2, "step": 3, "chunk": {
        "type": "tool-call-delta", "index": 1, "id": "c", "name": "read", "argumentsDelta": "{"}}
    nameless = {**row, "data": {k: v for k, v in row["data"].items() if k != "name"}}
    assert "name" not in expand_chunk_row(nameless)[0]["data"]["chunk"]


@pytest.mark.parametrize("mutate, why", [
    (lambda r: r["data"].update(dt=[1]), "dt must be"),
    (lambda r: r["data"].update(texts=[]), "non-empty string array"),
    (lambda r: r.update(extra=1), "envelope"),
    (lambda r: r["data"].update(name="x"), "exactly {turn, step, index, dt, texts}"),
    (lambda r: r.update(seq0=-1), "seq0"),
    (lambda r: r["data"].update(dt=[1, 1.5]), "dt must be 2 integers"),
    (lambda r: r["data"].update(dt=[1, "2"]), "dt must be 2 integers"),
    (lambda r: r["data"].update(texts=["a", 1, "c"]), "non-empty string array"),
])
def test_malformed_rows_raise(tmp_path: Path, mutate, why: str) -> None:
    row = {"type": "text-chunks", "seq0": 0, "time0": 5, "data": {"turn": 1, "step": 1, "index": 0,
                                                                   "dt": [1, 1], "texts": ["a", "b", "c"]}}
    mutate(row)
    path = write_log(tmp_path / "session.jsonl.zstd", [[row]])
    with pytest.raises(SessionLogError, match=why):
        read_session_log(path)


def test_seq_gap_is_an_error(tmp_path: Path) -> None:
    events = sample_events()
    del events[5]
    path = write_log(tmp_path / "session.jsonl.zstd", [events])
    with pytest.raises(SessionLogError, match="expected seq 5, got 6"):
        read_session_log(path)


def test_torn_tail_is_dropped_but_corruption_raises(tmp_path: Path, log_path: Path) -> None:
    events = sample_events()
    full = log_path.read_bytes()
    last = frame(pack(events)[6:])
    # an append interrupted mid-frame: the complete frames still read, the torn one yields nothing usable
    torn = tmp_path / "torn.jsonl.zstd"
    torn.write_bytes(full[:-len(last)] + last[: len(last) // 2])
    _, got = read_session_log(torn)
    assert got == events[: len(got)] and len(got) >= 10
    # a plaintext log whose last line lacks its newline
    plain = tmp_path / "session.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in [HEADER, *events]) + '{"type": "turn/st')
    assert read_session_log(plain)[1] == events
    # a flipped checksum byte of an earlier (complete) frame is corruption, not a torn tail
    bad = bytearray(full)
    bad[len(frame([HEADER])) + len(frame(pack(events)[:3])) - 1] ^= 0xFF
    broken = tmp_path / "broken.jsonl.zstd"
    broken.write_bytes(bytes(bad))
    with pytest.raises(SessionLogError, match="corrupt"):
        read_session_log(broken)


def test_not_a_session_log(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text('{"type": "turn/start", "seq": 0}\n')
    with pytest.raises(SessionLogError, match="not a session header"):
        read_session_log(path)
    path.write_text("")
    with pytest.raises(SessionLogError, match="header-less"):
        read_session_log(path)


def test_find_and_locate_logs(tmp_path: Path, log_path: Path) -> None:
    home = tmp_path  # $DSH_HOME; log_path lives in $DSH_HOME/sessions/...
    odd_id = "session/ä~1"
    odd = write_log(home / "sessions" / "_no-cwd" / encode_segment(odd_id) / "session.v4.jsonl.zstd",
                    [[{"type": "turn/start", "seq": 0, "time": 1, "data": {}}]])
    odd.write_bytes(frame([{**HEADER, "id": odd_id}]) + frame([{"type": "turn/start", "seq": 0, "time": 1, "data": {}}]))
    (home / "sessions" / "_no-cwd" / "x" / "notes.jsonl").parent.mkdir(parents=True)
    (home / "sessions" / "_no-cwd" / "x" / "notes.jsonl").write_text("{}\n")  # not a session log name
    assert encode_segment(odd_id) == "session~002F~00E4~007E1"
    assert encode_segment("..") == "~002E~002E"
    assert set(find_session_logs(home)) == {log_path, odd}
    assert set(find_session_logs(home / "sessions")) == {log_path, odd}
    assert session_log_for(home, "session-abc") == log_path
    assert session_log_for(home / "sessions", odd_id) == odd
    with pytest.raises(FileNotFoundError):
        session_log_for(home, "session-missing")
    assert find_session_logs(tmp_path / "nowhere") == []


def _replacement(seq: int, sources: list[Any]) -> dict[str, Any]:
    return {"type": "user/message", "seq": seq, "time": seq, "data": {"role": "user", "content": []},
            "surfaceOp": {"op": "replace", "startSeq": 3, "endSeq": 3}, "sourceEventSeqs": sources}


def _v4_log(tmp_path: Path, sources: list[Any], version: int = 4) -> Path:
    events = [{"type": "turn/start", "seq": s, "time": s, "data": {"turn": 1}} for s in range(17)]
    return write_log_with(tmp_path / "session.v4.jsonl.zstd", {**HEADER, "version": version},
                          [events, [_replacement(17, sources)]])


def write_log_with(path: Path, header: dict[str, Any], batches: list[list[dict[str, Any]]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(frame([header]) + b"".join(frame(b) for b in batches))
    return path


@pytest.mark.parametrize("stored, read", [
    ([[8, 10], 16], [8, 9, 10, 16]),  # DSH 0.2's example: three consecutive seqs as one pair
    ([0, [2, 4], [6, 9], 12], [0, 2, 3, 4, 6, 7, 8, 9, 12]),
    ([[0, 16]], list(range(17))),  # up to the seq before the event's own
    ([3, 4], [3, 4]),  # two consecutive seqs stay a plain list
    ([5, 3], [5, 3]),  # out of order, no pair: stored as the host holds it (its surface check judges it)
])
def test_format_4_source_seq_ranges_read_back_as_every_seq(tmp_path: Path, stored, read) -> None:
    _, events = read_session_log(_v4_log(tmp_path, stored))
    assert events[17]["sourceEventSeqs"] == read
    assert {k: v for k, v in events[17].items() if k != "sourceEventSeqs"} == \
        {k: v for k, v in _replacement(17, stored).items() if k != "sourceEventSeqs"}


def test_format_0_stores_no_ranges_a_pair_stays_as_written(tmp_path: Path) -> None:
    # rc8 (format 0) never writes a pair and its own loader expands none: its surface check refuses one
    _, events = read_session_log(_v4_log(tmp_path, [[8, 10], 16], version=0))
    assert events[17]["sourceEventSeqs"] == [[8, 10], 16]


@pytest.mark.parametrize("stored, why", [
    ([[8, 10, 12]], "not a \\[start, end\\] pair"),
    ([[8, "10"]], "not a \\[start, end\\] pair"),
    ([[True, 10]], "not a \\[start, end\\] pair"),
    ([[-1, 2]], "not a \\[start, end\\] pair"),
    ([[10, 8]], "run forwards"),
    ([[15, 17]], "before the event's own seq"),
    ([[8, 10], 9], "strictly increasing"),
    ([12, [8, 10]], "strictly increasing"),
])
def test_a_malformed_seq_range_is_corruption(tmp_path: Path, stored, why: str) -> None:
    with pytest.raises(SessionLogError, match=why):
        read_session_log(_v4_log(tmp_path, stored))


def test_chunk_rows_belong_to_formats_0_and_1_only(tmp_path: Path) -> None:
    rows = pack(sample_events())
    path = write_log_with(tmp_path / "session.jsonl.zstd", {**HEADER, "version": 4}, [rows])
    with pytest.raises(SessionLogError, match="a reasoning-chunks storage row in a format 4 log"):
        read_session_log(path)
    path = write_log_with(tmp_path / "session.v1.jsonl.zstd", {**HEADER, "version": 1}, [rows])
    assert read_session_log(path)[1] == sample_events()


def test_a_header_without_a_session_format_is_refused(tmp_path: Path) -> None:
    path = write_log_with(tmp_path / "session.jsonl.zstd", {k: v for k, v in HEADER.items() if k != "version"}, [])
    with pytest.raises(SessionLogError, match="names no session format"):
        read_session_log(path)


def test_the_dialect_is_the_one_the_content_names() -> None:
    assert log_dialect([{**HEADER, "version": 4}]).name == "v02"
    assert log_dialect([{**HEADER, "version": 0}, {"type": "system/message"}]).name == "rc8"  # the header decides
    # a lost header: a chunk row stands for the assistant/chunk events only rc8 writes
    assert log_dialect([{"type": "text-chunks", "seq0": 0}]).name == "rc8"
    with pytest.raises(UnknownDialect, match="session format 2, which no DSH version"):
        log_dialect([{**HEADER, "version": 2}])
    with pytest.raises(UnknownDialect, match="records do not tell"):
        log_dialect([{"type": "turn/start", "seq": 0}])
    with pytest.raises(SessionLogError, match="no session header and no session events") as refused:
        log_dialect([[1, 2], "text"])
    assert not isinstance(refused.value, UnknownDialect)

