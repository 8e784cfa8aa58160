"""Differential test: our log readers against the real DSH 0.2.1-rc.2 host's own reload.

The real host code writes the logs (`v021_log_roundtrip.mjs`): a live Session takes every
event by `session.append`, the JSONL backend persists each batch (one zstd frame, or plain
lines), and the backend's own read plus `Session.fromRestore` give the events, surface and
messages DSH resumes with. The session holds what 0.2.1 stores in a compacted form or that
the readers must take in: `sourceEventSeqs` runs of 3+ consecutive seqs, which format v4
stores as `[start, end]` pairs (a landing citing a turn's user message, runtime-context
snapshot and skill catalog: `[[4, 6], 8, …]`; one citing a run of 5), a skill-catalog
message right after the user's message and the snapshot, images (in a user message, in a
tool result, one offloaded by `image/offload`), pending markers, landings, a manual
checkpoint (whose citations are not in order, so stored as they are), and batches of one
event or many. Then `logs.reader`, `inspect`'s fold and the engine's recovery read
(`SessionLog` over the reader's events) must agree with the host on every event and surface.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard

from surface_builders import LogBuilder, new_id, user_message
from turn_memory.compaction import transaction as tx_
from turn_memory.compaction.selection import select_manual_range
from turn_memory.host.dialects import V02
from turn_memory.host.images import MARKER_RE
from turn_memory.host.surface import SessionLog, project_message
from turn_memory.inspection.report import fold_log, inspect_log
from turn_memory.logs.reader import read_session_log, session_log_for
from turn_memory.prompts import read_prompt
from turn_memory.turns.editor import Output, TurnNodeEditor
from turn_memory.turns.landing import LandingContext, pending_plan, plan_landing
from turn_memory.turns.nodes import original_nodes
from turn_memory.turns.recovery import turn_nodes, turns_to_recover

Event = dict[str, Any]
SCRIPT = Path(__file__).with_name("v021_log_roundtrip.mjs")


def image(attachment: str) -> dict[str, Any]:
    return {"type": "image", "attachment": {"attachmentId": attachment, "mediaType": "image/png", "bytes": 2048,
                                            "width": 64, "height": 48, "name": "shot.png"}}


def skill_catalog() -> dict[str, Any]:
    """The message dsh-tool-skill adds to a step's input (renderCatalogMessage)."""
    entries = [{"name": "pdf", "description": "Read PDF files"}, {"name": "xlsx", "description": "Edit spreadsheets"}]
    return {"id": new_id("skills"), "role": "user", "source": {"kind": "skill-catalog", "form": "catalog", "entries": entries},
            "content": [{"type": "text", "text": "<system-reminder>\n<available_skills>\n- `pdf`\n- `xlsx`\n"
                                                 "</available_skills>\n</system-reminder>"}]}


class Session:
    """A session as batches of host-shaped events (their seqs the ones the host assigns: the
    planners cite them; the host's own times replace the builders')."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.batches: list[list[Event]] = []

    def builder(self, turn: int) -> LogBuilder:
        b = LogBuilder(V02, len(self.events))
        b.turn_no = turn
        return b

    def push(self, new: list[Event]) -> None:
        """One durable append batch; planned events get their seq here."""
        batch = [{**e, "seq": len(self.events) + i} for i, e in enumerate(new)]
        self.events += batch
        self.batches.append(batch)

    def log(self) -> SessionLog:
        return SessionLog(V02, self.events)

    def turn(self, n: int, *, user_image: bool = False, tool_image: bool = False, offload: bool = False,
             split: bool = False, opened: bool = False, queued: bool = False, tool: bool = True) -> None:
        """A tool-using turn as 0.2.1 writes it: the system prompt (turn 1) and the user's
        message, the runtime-context snapshot and the skill catalog as the first step's input.
        `opened`: a landing in its pre-step already wrote its turn/start; `queued`: a second
        message the user sent while the first waited; `tool`: the turn calls a tool."""
        b = self.builder(n - 1)
        if n == 1:
            b.add("permission/preset", {"preset": "workspace-write"})
            b.system()
        b.turn_no, b.step_no = n, 1
        if not opened:
            b.add("turn/start", {"turn": n})
        b.add("step/start", {"turn": n, "step": 1})
        message = user_message(f"task {n}: list the workspace")
        if user_image:
            message["content"].append(image(f"att-user-{n}"))
        user = b.add("user/message", message, op="append")
        if queued:
            b.add("user/message", user_message("and count them"), op="append")
        b.snapshot()
        b.add("user/message", skill_catalog(), op="append")
        if n == 1:
            b.header()
        if offload:  # dsh-compaction-image-offload takes the image out of later requests
            b.add("image/offload", {"targets": [{"seq": user, "imageIndexes": [0]}]})
        first_step = len(b.events)
        if tool:
            call = new_id("call")
            b.assistant("Let me look.", tool_calls=(call,))
            call_seq = b.tool_call(call)
            b.tool_result(call, "a.txt\nb.txt\n", call_seq=call_seq)
            if tool_image:
                b.events[-1]["data"]["message"]["content"].append(image(f"att-tool-{n}"))
            b.add("step/end", {"turn": n, "step": 1})
            first_step = len(b.events)
            b.step_no = 2
            b.add("step/start", {"turn": n, "step": 2})
        b.assistant("Done.")
        b.add("step/end", {"turn": n, "step": b.step_no})
        b.add("turn/end", {"turn": n, "reason": {"kind": "completed"}})
        if split:
            self.push(b.events[:first_step])
            self.push(b.events[first_step:])
        else:
            self.push(b.events)

    def pending(self, turn: int) -> None:
        log = self.log()
        self.push(pending_plan(log, turn_nodes(log, turn)[0], turn).events)

    def land(self, turn: int, edit: Callable[[TurnNodeEditor], None]) -> None:
        """The compressed turn lands in the next turn's pre-step (after its turn/start)."""
        self.push([{"type": "turn/start", "data": {"turn": turn + 1}}])
        log = self.log()
        positions = turn_nodes(log, turn)
        editor = TurnNodeEditor(turn, original_nodes(log, positions))
        edit(editor)
        self.push(plan_landing(log, editor, positions, LandingContext(turn, turn + 1, 1, ("fork",))).events)

    def checkpoint(self) -> None:
        """A manual /compact between turns: compaction/start, then summary, checkpoint, end."""
        log = self.log()
        tx = tx_.Transaction("cmp-1", None, None)
        selection = select_manual_range(log, retain_turns=1)
        assert selection is not None
        self.push(tx_.start_plan(tx).events)
        after_start = self.log()
        summary = tx_.Summary(blocks=[{"type": "text", "text": "it happened"}],
                              raw_output=[{"type": "text", "text": "it happened"}],
                              provider="deepseek-official", model="deepseek-v4-flash")
        message = tx_.checkpoint_message(V02, tx, summary, read_prompt("checkpoint"))
        shadowed = tx_.shadowed_tokens(after_start, selection)
        self.push(tx_.commit_plan(after_start, tx, len(log), selection, summary, message, shadowed).events)


def _markers(editor: TurnNodeEditor, role: str) -> str:
    """The turn's image markers a rewrite must keep (the worker's rule)."""
    return "".join(m for n in editor.nodes if n.role == role for m in MARKER_RE.findall(n.text))


def _fold(editor: TurnNodeEditor) -> None:
    editor.replace(editor.nodes[0].id, editor.nodes[-1].id,
                   [Output("user", "The task, in short." + _markers(editor, "user")),
                    Output("assistant", "Listed a.txt and b.txt.")])


def _in_place(editor: TurnNodeEditor) -> None:
    editor.replace("n1", None, [Output("user", "task, in short" + _markers(editor, "user"))])
    tool = next(n.id for n in editor.nodes if n.role == "tool")
    editor.replace(tool, None, [Output("tool", "[2 files]" + _markers(editor, "tool"))])


def _session() -> Session:
    s = Session()
    s.turn(1, user_image=True)
    s.pending(1)
    s.land(1, _fold)  # in turn 2's pre-step; cites the user's message, snapshot and catalog: [[4, 6], …]
    s.turn(2, tool_image=True, split=True, opened=True)
    s.pending(2)
    s.land(2, _in_place)
    s.turn(3, opened=True, queued=True)
    s.pending(3)
    s.land(3, _fold)  # the user's two messages, snapshot, catalog and first answer: [36, 40]
    s.turn(4, user_image=True, opened=True)
    s.pending(4)
    s.checkpoint()  # a manual /compact between turns: turns 1-3 fold, turn 4 stays (pending)
    s.turn(5, tool=False, user_image=True, offload=True)
    return s


SESSION = _session()


def _roundtrip(node: str, modules: Path, home: Path) -> dict[str, dict[str, Any]]:
    cases = [{"id": f"session-{compression}", "root": str(home / compression / "sessions"), "compression": compression,
              "batches": [[{k: v for k, v in e.items() if k not in ("seq", "time")} for e in batch]
                          for batch in SESSION.batches]}
             for compression in ("zstd", "none")]
    run = subprocess.run([node, str(SCRIPT), str(modules)], input=json.dumps(cases), capture_output=True, text=True,
                         timeout=300, check=True)
    return {c["compression"]: r for c, r in zip(cases, json.loads(run.stdout))}


@pytest.fixture(scope="module")
def written(node: str, dsh_v021_modules: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    results = _roundtrip(node, dsh_v021_modules, tmp_path_factory.mktemp("dsh-home"))
    for compression, result in results.items():
        assert result["ok"], (compression, result)
    return results


def _stored_lines(path: Path) -> list[dict[str, Any]]:
    """The log's rows as stored, nothing expanded."""
    data = path.read_bytes()
    if path.name.endswith(".zstd"):
        data = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(data)
    return [json.loads(line) for line in data.splitlines()[1:]]


COMPRESSIONS = ["zstd", "none"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_the_host_stores_runs_of_three_or_more_cited_seqs_as_pairs(written: Any, compression: str) -> None:
    """What makes this test bite: the real writer's compacted forms are in the logs."""
    path = Path(written[compression]["path"])
    assert path.name == {"zstd": "session.v4.jsonl.zstd", "none": "session.v4.jsonl"}[compression]
    pairs = [entry for row in _stored_lines(path) for entry in row.get("sourceEventSeqs", []) if isinstance(entry, list)]
    # turn 1's fold cites its user message, snapshot and skill catalog; turn 3's adds the queued message and marker
    assert pairs == [[4, 6], [36, 40]]
    kinds = [row["data"]["source"]["kind"] for row in _stored_lines(path)[4:7]]
    assert kinds == ["user", "runtime-context", "skill-catalog"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_the_reader_returns_every_event_as_the_hosts_own_reload(written: Any, compression: str) -> None:
    host = written[compression]
    header, events = read_session_log(Path(host["path"]))
    assert header == {"type": "session", "version": 4, "id": f"session-{compression}", "createdAt": 1796000000000,
                      "cwd": "/work/ws", "isSeeded": False, "delegationDepth": 0}
    assert events == host["events"]
    home = Path(host["path"]).parents[3]
    assert session_log_for(home, f"session-{compression}") == Path(host["path"])


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_the_engines_recovery_read_has_the_hosts_surface(written: Any, compression: str) -> None:
    host = written[compression]
    _, events = read_session_log(Path(host["path"]))
    log = SessionLog(V02, events)
    assert log.reload_problems == []
    assert log.nodes == host["nodes"]
    assert [m["id"] for m in log.surface_messages()] == [m["id"] for m in host["messages"]]
    # the messages too, but for what a projection of the host changes: `image/offload` marks
    # the image it offloads (turn-memory's model applies no message projection)
    ours = {seq: project_message(V02, events[seq]) for seq in log.nodes}
    theirs = dict(zip(host["nodes"], host["messages"]))
    differing = [seq for seq in log.nodes if ours[seq] != theirs[seq]]
    (offload,) = [e for e in events if e["type"] == "image/offload"]
    assert differing == [t["seq"] for t in offload["data"]["targets"]] == [70]
    offloaded = ours[70] | {"content": [ours[70]["content"][0], {**ours[70]["content"][1], "offloaded": True}]}
    assert theirs[70] == offloaded
    # what a restart redoes: turn 4, pending and never landed (the checkpoint left it on the surface)
    assert turns_to_recover(log) == [4]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_inspect_folds_the_hosts_surface(written: Any, compression: str) -> None:
    host = written[compression]
    path = Path(host["path"])
    stream, fold = fold_log(path)
    assert fold.dialect is V02 and fold.problems == [] and stream.damage == []
    assert fold.surface_order() == host["nodes"]
    assert fold.events == len(host["events"])
    report = inspect_log(path)
    assert report["whole"] and report["inconsistencies"] == [] and report["log"]["dialect"] == "v02"
    assert [(t["turn"], t["state"]) for t in report["turns"]] == [
        (1, "compressed"), (2, "compressed"), (3, "compressed"), (4, "pending"), (5, "untouched")]
    assert [(c["range"]["start"], c["range"]["end"], c["current"]) for c in report["checkpoints"]] == [(18, 50, True)]
    assert report["surface"]["nodes"] == len(host["nodes"])
