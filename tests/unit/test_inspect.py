"""`turn-memory inspect`: the streaming report agrees with the log, survives damage, and its
command line says whether the log was whole."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from turn_builders import Shape, completed_turn_log
from turn_memory.cli import main
from turn_memory.devtools.synthetic_log import SyntheticLog, write_synthetic_log
from turn_memory.host.dialect import Dialect
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import estimate_message
from turn_memory.host.turn_index import node_origins
from turn_memory.inspection.fold import Fold
from turn_memory.inspection.progress import MIN_BYTES, ProgressBar, wants_bar
from turn_memory.inspection.report import SCHEMA, inspect_log
from turn_memory.logs.frames import complete_frames
from turn_memory.logs.reader import read_session_log
from turn_memory.logs.stream import LogStream
from turn_memory.runtime.land import stamp
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import LandingContext, plan_landing
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turns_to_recover

HEADER = {"type": "session", "version": 0, "id": "s-1", "createdAt": 1, "cwd": "/w"}


def header(dialect: Dialect) -> dict[str, Any]:
    """The header line the dialect's hosts write: its session format is what names the dialect."""
    return {**HEADER, "version": dialect.session_format_version}


def write_plain(path: Path, events: list[dict[str, Any]], dialect: Dialect = RC8) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [header(dialect), *events]))
    return path


def write_zstd(path: Path, events: list[dict[str, Any]], per_frame: int = 7, dialect: Dialect = RC8) -> Path:
    cctx = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False)
    batches = [[header(dialect)]] + [events[i:i + per_frame] for i in range(0, len(events), per_frame)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(cctx.compress(b"".join(orjson.dumps(r) + b"\n" for r in b)) for b in batches))
    return path


def reference(events: list[dict[str, Any]], dialect: Dialect) -> dict[str, Any]:
    """The per-turn figures computed the slow way: the whole log through the surface model."""
    log = SessionLog(dialect, events)
    origins = node_origins(events, dialect)

    def tokens(seqs: list[int]) -> int:
        return sum(estimate_message(m) for s in seqs if (m := log.message_of(s)) is not None)

    turns: dict[int, list[int]] = {}
    for seq in log.nodes:
        kind, key = origins[seq]
        if kind == "turn":
            turns.setdefault(key, []).append(seq)
    markers: dict[int, list[tuple[str, int]]] = {}
    for event in events:
        if (mark := marker_of(event)) is not None:
            markers.setdefault(mark[1], []).append((mark[0], event["seq"]))
    return {"nodes": list(log.nodes), "tokens": tokens(list(log.nodes)),
            "turns": {t: (len(s), tokens(s)) for t, s in turns.items()}, "markers": markers}


def landed_log(dialect: Dialect) -> list[dict[str, Any]]:
    log, positions = completed_turn_log(dialect, Shape(), prior_turns=1)  # turn 2 pending, turn 3 open
    editor = TurnNodeEditor(2, original_nodes(log, positions))
    editor.replace("n1", "n5", [Output("user", "Fix the parser."), Output("assistant", "Fixed.")])
    for event in stamp(log, plan_landing(log, editor, positions, LandingContext(2, 3, 1)).events):
        log.append(event)
    return log.events


@pytest.mark.parametrize("dialect, name", [(RC8, "session.jsonl"), (V02, "session.v4.jsonl")])
def test_landed_and_pending_turns_and_the_savings(tmp_path, dialect, name):
    events = landed_log(dialect)
    report = inspect_log(write_plain(tmp_path / name, events, dialect))
    ref = reference(events, dialect)
    by_turn = {t["turn"]: t for t in report["turns"]}
    assert report["log"]["dialect"] == dialect.name and report["whole"] and report["inconsistencies"] == []
    assert by_turn[1]["state"] == "untouched" and by_turn[1]["after"] == by_turn[1]["before"]
    assert by_turn[2]["state"] == "compressed" and by_turn[2]["before"]["nodes"] == 5
    assert [by_turn[t]["phase"] for t in (1, 2, 3)] == [None, "landed", None]  # the turn lifecycle's words
    assert (by_turn[2]["after"]["nodes"], by_turn[2]["after"]["tokens"]) == ref["turns"][2]
    assert by_turn[2]["after"]["tokens"] < by_turn[2]["before"]["tokens"]
    assert [m["kind"] for m in by_turn[2]["markers"]] == ["pending", "compression"]
    assert by_turn[3]["state"] == "open" and not by_turn[3]["complete"]
    assert report["surface"] == {"nodes": len(ref["nodes"]), "tokens": ref["tokens"]}
    assert report["savings"]["tokens"] == report["before"]["tokens"] - report["surface"]["tokens"] > 0


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> SyntheticLog:
    """~1.5 MB: 120+ turns, landings, no-ops, a turn left pending, one checkpoint."""
    return write_synthetic_log(tmp_path_factory.mktemp("synthetic") / "session.jsonl.zstd",
                               target_bytes=1_500_000, checkpoint_every=60)


def test_the_streaming_fold_agrees_with_the_surface_model(synthetic):
    _, events = read_session_log(synthetic.path)
    ref = reference(events, RC8)
    stream, fold = LogStream(synthetic.path), Fold(RC8)
    for batch in stream.batches():
        fold.feed_lines(batch.lines, batch.where)
    assert fold.events == len(events) == synthetic.events and fold.problems == [] and stream.damage == []
    assert stream.frames == synthetic.frames
    assert fold.surface_order() == ref["nodes"] and fold.surface_tokens == ref["tokens"]
    for turn, stats in fold.turns.items():
        assert (stats.nodes, stats.tokens) == ref["turns"].get(turn, (0, 0)), turn
        assert [(m.phase, m.seq) for m in stats.markers] == ref["markers"].get(turn, []), turn

    report = inspect_log(synthetic.path)
    turns = report["turns"]
    assert len(turns) == synthetic.turns and all(t["complete"] for t in turns)
    # a no-op marker over raw reasoning is stale, as recovery sees it (it compresses the turn
    # again); one a checkpoint folded since is not
    states = {t["turn"]: t["state"] for t in turns}
    redo = set(turns_to_recover(SessionLog(RC8, events)))
    stale = {t for t in synthetic.noop_turns if states[t] == "stale"}
    assert stale == synthetic.noop_turns & redo and stale and synthetic.noop_turns - stale
    assert {t for t, state in states.items() if state in ("no-op", "stale")} == synthetic.noop_turns
    assert {t["turn"]: [m["kind"].replace("no-op", "compression") for m in t["markers"]] for t in turns} \
        == synthetic.markers
    # every 11th turn was never landed, nor was the last one (the log ends before the next turn)
    pending = [t for t in range(11, synthetic.turns, 11)] + [synthetic.turns]
    assert [t["turn"] for t in turns if t["state"] == "pending"] == pending
    assert [(c["seq"], c["range"]["start"], c["range"]["end"], c["shadowed"]["nodes"]) for c in report["checkpoints"]] \
        == synthetic.checkpoints
    folded = [t for t in turns if t["shadowed_by"] is not None]
    assert folded and all(t["current"]["nodes"] == 0 and t["after"]["nodes"] > 0 for t in folded)


def test_plain_and_zstd_logs_give_the_same_report(tmp_path):
    events = landed_log(RC8)
    plain = inspect_log(write_plain(tmp_path / "a" / "session.jsonl", events))
    packed = inspect_log(write_zstd(tmp_path / "b" / "session.jsonl.zstd", events))
    assert packed["log"]["format"] == "zstd" and packed["log"]["frames"] == 1 + -(-len(events) // 7)
    for key in ("turns", "checkpoints", "surface", "before", "savings", "events_by_type", "whole"):
        assert plain[key] == packed[key], key


def _copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def test_a_flipped_byte_is_reported_at_its_frame_and_the_frames_after_it_still_count(synthetic, tmp_path):
    k = len(synthetic.frame_offsets) // 2
    start, end = synthetic.frame_offsets[k], synthetic.frame_offsets[k + 1]
    path = _copy(synthetic.path, tmp_path / "session.jsonl.zstd")
    data = bytearray(path.read_bytes())
    data[(start + end) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    report = inspect_log(path)
    assert not report["whole"]
    corrupt = report["damage"][0]
    assert corrupt["kind"] == "corrupt-frame" and corrupt["offset"] == start
    assert f"next readable frame at byte {end}" in corrupt["detail"]
    assert [d["kind"] for d in report["damage"][1:]] == ["seq-gap"]  # the lost frame's events
    assert report["log"]["frames"] == synthetic.frames - 1
    assert len(report["turns"]) == synthetic.turns  # everything after the damage is still read


def test_frame_runs_follow_the_frame_headers(synthetic):
    data = synthetic.path.read_bytes()
    starts, end = complete_frames(data, 0, len(data))
    assert starts == synthetic.frame_offsets and end == len(data)
    assert complete_frames(data, 0, 1) == ([0], synthetic.frame_offsets[1])  # stops after the limit
    assert complete_frames(data[:-1], 0, len(data))[1] == synthetic.frame_offsets[-1]  # not the torn one


def test_a_bad_line_inside_a_run_of_frames_is_located_at_its_frame(synthetic, tmp_path):
    k = len(synthetic.frame_offsets) // 2
    start, end = synthetic.frame_offsets[k], synthetic.frame_offsets[k + 1]
    data = synthetic.path.read_bytes()
    text = zstandard.ZstdDecompressor().decompressobj().decompress(data[start:end])
    cctx = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False)
    frame = cctx.compress(text.replace(b"\n", b"\nnot json\n", 1))
    path = tmp_path / "session.jsonl.zstd"
    path.write_bytes(data[:start] + frame + data[end:])
    (bad,) = inspect_log(path)["damage"]
    assert bad["kind"] == "bad-line" and bad["offset"] == start
    assert bad["detail"].startswith(f"frame {k} at byte {start}, line 2 of the frame")


def test_a_truncated_last_frame_is_reported_and_everything_before_it_counts(synthetic, tmp_path):
    last = synthetic.frame_offsets[-1]
    path = tmp_path / "session.jsonl.zstd"
    path.write_bytes(synthetic.path.read_bytes()[:last + (synthetic.bytes - last) // 2])
    report = inspect_log(path)
    (torn,) = report["damage"]
    assert torn["kind"] == "truncated-frame" and torn["offset"] == last
    assert len(report["turns"]) == synthetic.turns and report["log"]["frames"] == synthetic.frames


def test_a_corrupt_header_frame_still_reports_the_turns(synthetic, tmp_path):
    path = _copy(synthetic.path, tmp_path / "session.jsonl.zstd")
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF  # the first frame's magic
    path.write_bytes(bytes(data))
    report = inspect_log(path)
    kinds = [(d["kind"], d["offset"]) for d in report["damage"]]
    assert kinds[:2] == [("no-header", 0), ("corrupt-frame", 0)] and report["session"] is None
    assert len(report["turns"]) == synthetic.turns


def test_bad_lines_torn_tails_and_bad_rows_in_a_plain_log(tmp_path):
    events = landed_log(RC8)
    lines = [orjson.dumps(r) for r in [HEADER, *events]]
    lines[3] = b'{"type": "turn/st'  # a damaged line in the middle
    bad_row = {"type": "text-chunks", "seq0": len(events), "time0": 1, "data": {"turn": 3, "step": 1, "index": 0,
                                                                                 "dt": [], "texts": [1]}}
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n" + orjson.dumps(bad_row) + b"\n" + b'{"type": "tu')
    report = inspect_log(path)
    by_kind = {d["kind"]: d for d in report["damage"]}
    assert set(by_kind) == {"bad-line", "seq-gap", "bad-row", "torn-line"}
    assert by_kind["bad-line"]["offset"] == sum(len(line) + 1 for line in lines[:3])
    assert "non-empty string array" in by_kind["bad-row"]["detail"]
    assert report["log"]["events"] == len(events) - 1


def _turn_states(report: dict[str, Any]) -> list[tuple[int, str, str | None]]:
    return [(t["turn"], t["state"], t["phase"]) for t in report["turns"]]


@pytest.mark.parametrize("dialect, name, form", [
    (V02, "session.jsonl", "jsonl"), (V02, "copy-of-my-session.jsonl", "zstd"), (V02, "session.v4.jsonl.zstd", "jsonl"),
    (RC8, "session.v4.jsonl", "jsonl"), (RC8, "session.v4.jsonl.zstd", "zstd"), (RC8, "backup", "zstd")])
def test_a_renamed_copy_of_a_healthy_log_reads_in_the_dialect_that_wrote_it(tmp_path, capsys, dialect, name, form):
    events = landed_log(dialect)
    write = write_zstd if form == "zstd" else write_plain
    report = inspect_log(write(tmp_path / name, events, dialect=dialect))
    assert report["log"]["dialect"] == dialect.name and report["log"]["format"] == form
    assert report["whole"] and report["inconsistencies"] == []
    assert read_session_log(tmp_path / name)[1] == events
    assert _turn_states(report) == [(1, "untouched", None), (2, "compressed", "landed"), (3, "open", None)]
    assert main(["inspect", str(tmp_path / name)]) == 0
    out = capsys.readouterr().out
    assert "INCONSISTENT" not in out and out.splitlines()[-1] == "  log: whole"


def test_a_log_in_a_session_format_no_known_dialect_writes_gets_one_plain_line_and_status_4(tmp_path, capsys):
    path = tmp_path / "s-9" / "session.v4.jsonl"  # the name of a format it is not
    path.parent.mkdir()
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [{**HEADER, "version": 5}, *landed_log(V02)]))
    assert main(["inspect", str(path)]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"turn-memory inspect: error: {path}: cannot tell which DSH version wrote this session log: its header names "
        "session format 5, which no DSH version turn-memory knows writes (it reads format 0 (DSH 0.1.0 to 0.1.4) "
        "and format 4 (DSH 0.1.5 and later))\n")


def test_a_log_whose_header_is_lost_is_told_by_its_records_or_said_to_be_untellable(tmp_path, capsys):
    lines = [orjson.dumps(r) for r in [header(V02), *landed_log(V02)]]
    lost = tmp_path / "lost" / "session.jsonl"  # rc8's name, 0.2's records
    lost.parent.mkdir()
    lost.write_bytes(b"\n".join([b'{"type": "sess', *lines[1:]]) + b"\n")
    report = inspect_log(lost)
    assert report["log"]["dialect"] == "v02" and report["inconsistencies"] == []  # its system/message and replace ops
    assert [d["kind"] for d in report["damage"]] == ["no-header", "bad-line"]
    assert _turn_states(report) == [(1, "untouched", None), (2, "compressed", "landed"), (3, "open", None)]
    # records both hosts write, and nothing else: nothing tells who wrote them
    neutral = tmp_path / "neutral" / "session.v4.jsonl"
    neutral.parent.mkdir()
    neutral.write_bytes(b'{"type": "sess\n{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}\n')
    assert main(["inspect", str(neutral)]) == 4
    assert capsys.readouterr().err == (
        f"turn-memory inspect: error: {neutral}: cannot tell which DSH version wrote this session log: its session "
        "header could not be read, and its records do not tell which DSH version wrote it (turn-memory reads format 0 "
        "(DSH 0.1.0 to 0.1.4) and format 4 (DSH 0.1.5 and later))\n")


def test_a_turn_the_engine_journaled_reads_pending_until_its_marker_lands(tmp_path, capsys):
    """A turn that ended after the session's last landing point has no marker in the log yet
    (`turns.marking`); the engine's journal in the DSH home says it owes one, and recovery redoes
    it: `inspect` says pending too, and that it read it from the journal."""
    from turn_memory.turns.results import ResultStore

    home = tmp_path / "home"
    write_zstd(home / "sessions" / "--w--" / "s-1" / "session.jsonl.zstd", landed_log(RC8))
    ResultStore(home).save_owed("s-1", {1: "pending", 2: "pending"})  # turn 2 landed since: it stays compressed
    assert main(["inspect", "s-1", "--dsh-home", str(home), "--json"]) == 0
    turns = json.loads(capsys.readouterr().out)["turns"]
    assert [(t["turn"], t["state"], t["phase"], t["journaled"]) for t in turns] == [
        (1, "pending", "pending", True), (2, "compressed", "landed", False), (3, "open", None, False)]


def test_json_output_schema_and_exit_status(tmp_path, capsys):
    events = landed_log(RC8)
    home = tmp_path / "home"
    path = write_zstd(home / "sessions" / "--w--" / "s-1" / "session.jsonl.zstd", events)
    assert main(["inspect", "s-1", "--dsh-home", str(home), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == SCHEMA and report["session"]["id"] == "s-1"
    assert set(report) == {"schema", "log", "session", "whole", "damage", "inconsistencies", "problem_counts",
                           "events_by_type", "turns", "checkpoints", "compactions", "surface", "before", "savings"}
    assert set(report["turns"][0]) == {"turn", "complete", "state", "phase", "journaled", "landing", "before", "after", "current",
                                       "markers", "shadowed_by"}
    # a session directory works as well as the file, and the text view names the verdict
    assert main(["inspect", str(path.parent)]) == 0
    assert "log: whole" in capsys.readouterr().out

    data = path.read_bytes()
    path.write_bytes(data[:-5])
    assert main(["inspect", str(path)]) == 3
    out = capsys.readouterr().out
    assert "DAMAGE (truncated-frame at byte" in out and "log: DAMAGED" in out

    assert main(["inspect", "no-such-session", "--dsh-home", str(home)]) == 1
    assert capsys.readouterr().err == (f"turn-memory inspect: error: no session 'no-such-session' (an id, or the "
                                       f"start of one) under {home} (fix: turn-memory inspect --list --dsh-home {home})\n")
    junk = tmp_path / "junk" / "session.jsonl.zstd"
    junk.parent.mkdir()
    junk.write_bytes(b"not zstd at all" * 10)
    assert main(["inspect", str(junk)]) == 1
    assert capsys.readouterr().err.startswith(f"turn-memory inspect: error: {junk} is not a readable DSH session log")


def session_home(tmp_path: Path) -> Path:
    """Three sessions: two of the user's (ids sharing a start once 0.2's `session-` is left off)
    and a worker's, oldest first."""
    home = tmp_path / "home"
    for n, (sid, origin) in enumerate([("a1f0-user", None), ("session-a1f7-user", None), ("b2c3-worker", "subagent")]):
        header = {**HEADER, "id": sid, **({"origin": origin} if origin else {})}
        path = home / "sessions" / "--w--" / sid / "session.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [header, *landed_log(RC8)]))
        os.utime(path, (1_700_000_000 + n * 60, 1_700_000_000 + n * 60))
    return home


def test_list_the_sessions_and_name_one_by_the_start_of_its_id(tmp_path, capsys):
    home = session_home(tmp_path)
    assert main(["inspect", "--list", "--dsh-home", str(home)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"2 session(s) under {home}, newest first; 1 subagent session(s) (turn-memory's workers) "
                        "not shown: --all lists them")
    assert [line.split()[0] for line in lines[1:3]] == ["session-a1f7-user", "a1f0-user"]
    assert lines[3] == f"inspect one by its id or the start of it: turn-memory inspect a1f7-use --dsh-home {home}"
    assert main(["inspect", "--list", "--all", "--json", "--dsh-home", str(home)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["schema"] == "turn-memory.sessions/1"
    assert [(s["id"], s["origin"]) for s in listed["sessions"]] == [
        ("b2c3-worker", "subagent"), ("session-a1f7-user", None), ("a1f0-user", None)]

    assert main(["inspect", "a1f0", "--dsh-home", str(home), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["session"]["id"] == "a1f0-user"
    assert main(["inspect", "a1f7", "--dsh-home", str(home), "--json"]) == 0  # without `session-`
    assert json.loads(capsys.readouterr().out)["session"]["id"] == "session-a1f7-user"
    assert main(["inspect", "b2", "--dsh-home", str(home), "--quiet"]) == 0  # a worker's, named explicitly
    quiet = capsys.readouterr().out.splitlines()
    assert len(quiet) == 3 and quiet[1].startswith("  surface now: ") and quiet[2] == "  log: whole"
    assert main(["inspect", "a1f", "--dsh-home", str(home)]) == 1
    assert capsys.readouterr().err == (
        f"turn-memory inspect: error: 'a1f' is the start of 2 session ids under {home}: session-a1f7-user (user), a1f0-user "
        f"(user) (fix: turn-memory inspect --list --dsh-home {home})\n")


def test_a_reader_that_leaves_early_ends_the_output_without_a_traceback(tmp_path):
    """`turn-memory doctor --json | head -1` and friends: stdout is a pipe nobody reads any more.
    No BrokenPipeError traceback; the command exits with its own status."""
    home = session_home(tmp_path)
    for argv, status in ((["inspect", "--list", "--all", "--dsh-home", str(home)], 0), (["config"], 0),
                         (["inspect", "a1f0", "--dsh-home", str(home), "--json"], 0),
                         (["inspect", "--dsh-home", str(home), "a1f0", "--verbose"], 0)):
        read, write = os.pipe()
        os.close(read)  # the reader has left before the first write
        try:
            proc = subprocess.run([sys.executable, "-m", "turn_memory", *argv], stdout=write, stderr=subprocess.PIPE,
                                  text=True, timeout=60)
        finally:
            os.close(write)
        assert (proc.returncode, proc.stderr) == (status, ""), argv


def test_progress_bar_only_for_large_logs_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_bar(MIN_BYTES, Tty(), json_output=False)
    assert not wants_bar(MIN_BYTES, Tty(), json_output=True)
    assert not wants_bar(MIN_BYTES - 1, Tty(), json_output=False)
    assert not wants_bar(MIN_BYTES, io.StringIO(), json_output=False)
    out = Tty()
    bar = ProgressBar(200_000_000, out, interval_s=0)
    bar(50_000_000)
    assert "25%" in out.getvalue() and "50/200 MB" in out.getvalue()
    bar.close()
    assert out.getvalue().endswith("\r")


def test_inspect_does_not_pay_for_the_engine_imports(tmp_path):
    """`inspect` runs often on big logs: the CLI must not import the engine (pydantic, zmq)."""
    import subprocess
    import sys

    path = write_plain(tmp_path / "session.jsonl", landed_log(RC8))
    probe = ("import sys; from turn_memory.cli import main; code = main(['inspect', '--json', sys.argv[1]]); "
             "print(sorted(m for m in ('pydantic', 'zmq', 'turn_memory.engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:] + out.stderr
