"""The segmented working-checkpoint job (docs/decisions.md#large-compactions-go-segment-by-segment).

The selected span is split into segments of complete turns. Workers process them in order,
each editing the host-owned working checkpoint through the session tools: every segment is
one finish of the compaction's worker run (`runtime.worker_run`): fresh spawns that get the
segment's text in their prompt. Each segment has its own budget of consecutive workers
without progress and its own worker cap; the whole compaction is bounded by `compaction.maxJobRequests` model requests
and `compaction.jobTimeoutS` seconds over all its workers. One log line reports the job: its
workers, model requests, time and outcome. Nothing touches the session here: the finished
checkpoint is returned for the caller's single transaction.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import ToolResult
from turn_memory.compaction import segment_prompt
from turn_memory.compaction.memory import SessionMemoryEditor
from turn_memory.compaction.segments import Segment, split_segments
from turn_memory.compaction.selection import Selection, compressed_view
from turn_memory.compaction.session_tools import FINISH, SessionTools, SourceNode
from turn_memory.config import CompactionConfig
from turn_memory.host.blocks import render_blocks
from turn_memory.host.dialect import is_checkpoint_source
from turn_memory.host.images import missing_markers
from turn_memory.host.markers import COMPRESSED_TURN, is_compressed_turn, is_host_context_at, marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import CHARS_PER_TOKEN
from turn_memory.host.units import surface_units
from turn_memory.runtime.interfaces import ReadyTurn
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.worker_run import Mode, RunSpec, WorkerRun

log = logging.getLogger("turn_memory.compaction")
_ids = itertools.count(1)
_role_label = {"user": "User", "assistant": "Assistant"}


class SegmentFailed(Exception):
    pass


def source_nodes(log_: SessionLog, segment: Segment, ready: Mapping[int, ReadyTurn] | None = None) -> list[SourceNode]:
    """The segment's nodes as the worker reads them; a turn whose compression is finished but
    not landed yet (`ready`) is read in its compressed form: the checkpoint folds that, so
    the turn's worker was not wasted (issue 21)."""
    compressed, skipped = compressed_view(ready)
    out: list[SourceNode] = []
    for seq in segment.seqs:
        if seq in skipped:
            continue
        origin = log_.index.origins.get(seq)
        turn = origin[1] if origin is not None and origin[0] == "turn" else None
        if seq in compressed:
            for role, text in compressed[seq]:
                _, images, _ = render_blocks([{"type": "text", "text": text}])
                # a rewritten turn's user node is the person's request, restated by its worker
                out.append(SourceNode(f"S{segment.index}.{len(out) + 1}", role, text, tuple(images),
                                      "human" if role == "user" else "", turn))
            continue
        message = log_.message_of(seq) or {"role": "user", "content": []}
        text, images, _ = render_blocks(message.get("content") or [])
        role = "tool" if message.get("role") == "tool" or _is_tool(log_, seq) else message.get("role", "user")
        out.append(SourceNode(f"S{segment.index}.{len(out) + 1}", role, text, tuple(images),
                              _kind(log_, seq, role, message), turn))
    return out


def _kind(log_: SessionLog, seq: int, role: str, message: dict[str, Any]) -> str:
    """What the host recorded a user node to be: an earlier checkpoint (established history),
    one compressed turn in a single user message (the person's request and the agent's
    work), host or plugin scaffolding, or the person's words."""
    if role != "user":
        return ""
    if is_checkpoint_source(message.get("source")):
        return "checkpoint"
    if is_compressed_turn(log_.events[seq]) or _legacy_compressed_turn(log_, seq):
        return COMPRESSED_TURN
    return "host-context" if is_host_context_at(log_.events, seq) else "human"


def _legacy_compressed_turn(log_: SessionLog, seq: int) -> bool:
    """A one-message landing written before its source said so: its turn's only node, landed
    over more than one node, the roles written out."""
    event = log_.events[seq]
    mark = marker_of(event)
    span = log_.dialect.op_range(event.get("surfaceOp"))
    if mark is None or mark[0] != "compression" or span is None or span[0] == span[1]:
        return False
    text = "".join(b.get("text", "") for b in (event["data"].get("content") or []) if isinstance(b, dict))
    return log_.index.turn_nodes(mark[1]) == [seq] and text.startswith("User: ") and "\n\nAssistant: " in text


def task_chars(config: CompactionConfig) -> int:
    """What a segment worker's task carries of its segment's text: a whole segment (its token
    budget at the host meter's characters per token), so that one request suffices; only a
    turn larger than a segment is cut, and read on with `read_session_source`. A relayed capable
    model, cut at `readLimitChars`, needed three requests for one 17 K-token segment whose text
    its fork already held."""
    return max(config.readLimitChars, config.segmentTokens * CHARS_PER_TOKEN)


def plan_segments(log_: SessionLog, selection: Selection, budget: int,
                  ready: Mapping[int, ReadyTurn] | None = None) -> tuple[list[Segment], dict[int, list[SourceNode]]]:
    """The selected span as segments of complete units within `budget` tokens, and each one's source nodes."""
    nodes = log_.nodes
    first = nodes.index(selection.start)
    span_nodes = nodes[first:first + len(selection.shadowed)]
    units = surface_units(span_nodes, log_.index.origins)
    tokens = {s: p for s in span_nodes if (p := log_.price(s)) is not None}
    segments = split_segments(span_nodes, units, tokens, budget)
    return segments, {seg.index: source_nodes(log_, seg, ready) for seg in segments}


def _is_tool(log_: SessionLog, seq: int) -> bool:
    return bool(log_.events[seq]["type"] == "tool/result")


def image_markers(log_: SessionLog, seqs: list[int]) -> list[str]:
    """The image markers of the selected history: every one must survive into the checkpoint."""
    markers: dict[str, None] = {}
    for seq in seqs:
        message = log_.message_of(seq)
        if message is not None:
            markers.update(dict.fromkeys(render_blocks(message.get("content") or [])[1]))
    return list(markers)


def render_transcript(editor: SessionMemoryEditor) -> str:
    """The checkpoint body: the working memory as a chronological structured transcript."""
    return "\n\n".join(f"{_role_label[n.role]}: {n.text.strip()}" for n in editor.nodes)


def run_spec(config: CompactionConfig) -> RunSpec:
    """How a compaction's workers run: bounded by `compaction.*`, segment workers, its logger
    (reads the persona and tool prompts: raises PromptError); they let a turn's workers go first."""
    return RunSpec(section="compaction", job_noun="compaction", worker_prefix="c", bounds=config,
                   persona=segment_prompt.persona(), tools=segment_prompt.worker_tool_specs(), log=log, yields=True)


@dataclass
class SegmentTask:
    """One segment as the worker run's task: the working checkpoint, with this segment assigned."""

    where: str
    segment: Segment
    tools: SessionTools
    editor: SessionMemoryEditor
    config: CompactionConfig
    finish: str = FINISH

    @property
    def label(self) -> str:
        return f"turn-memory compaction {self.segment.id}"

    def prompt(self, mode: Mode) -> str:
        return segment_prompt.task(self.tools, self.editor, self.segment, spawn=mode == "spawn",
                                   text_chars=task_chars(self.config), handoff_chars=self.config.handoffChars)

    def shape(self) -> Hashable:
        return self.editor.shape()

    def call(self, name: str, args: Any) -> str:
        return self.tools.call(name, args)


@dataclass
class SegmentedJob:
    session: MirroredSession
    port: HostPort
    config: CompactionConfig
    selection: Selection
    #: turns in the selection whose compression is finished but not landed: folded compressed
    ready: Mapping[int, ReadyTurn] = field(default_factory=dict)
    job_id: str = ""
    segments: list[Segment] = field(default_factory=list)
    editor: SessionMemoryEditor | None = None
    tools: SessionTools | None = None
    #: the job's workers (set once it runs)
    worker_run: WorkerRun | None = None

    def __post_init__(self) -> None:
        self.job_id = self.job_id or f"compaction:{self.session.id}:{next(_ids)}"

    @property
    def where(self) -> str:
        return f"session {self.session.id} compaction job {self.job_id.rsplit(':', 1)[-1]}"

    def prepare(self) -> tuple[SessionTools, SessionMemoryEditor]:
        """The segments, their sources and the working checkpoint (once)."""
        if self.tools is None or self.editor is None:
            self.segments, sources = plan_segments(self.session.log, self.selection, self.config.segmentTokens,
                                                   self.ready)
            self.editor = SessionMemoryEditor(len(self.segments))
            self.tools = SessionTools(self.editor, self.segments, sources, assigned=1,
                                      read_limit_chars=self.config.readLimitChars)
        return self.tools, self.editor

    async def run(self) -> str:
        """Process every segment; returns the checkpoint transcript (raises SegmentFailed)."""
        started = time.monotonic()
        run = self.worker_run = WorkerRun.start(self.session, self.port, self.job_id, run_spec(self.config))
        outcome = "failed"
        try:
            tools, editor = self.prepare()
            log.info("%s: %d segment(s) over %d surface nodes", self.where, len(self.segments),
                     len(self.selection.shadowed))
            for segment in self.segments:
                tools.assigned = segment.index
                gave_up = await run.until_finished(SegmentTask(f"{self.where} {segment.id}", segment, tools, editor,
                                                               self.config))
                if gave_up is not None:
                    raise SegmentFailed(f"{segment.id}: {gave_up}")
                log.info("%s: %s done by worker %s (%s)", self.where, segment.id, run.workers[-1], run.modes[-1])
            # each finish checked its own segment; this guards what later segments rewrote
            missing = missing_markers(image_markers(self.session.log, self.selection.shadowed),
                                      [n.text for n in editor.nodes])
            if missing:
                raise SegmentFailed(f"the checkpoint dropped image markers: {', '.join(missing)}")
            outcome = "finished"
            return render_transcript(editor)
        except SegmentFailed as exc:
            outcome = f"failed: {exc}"
            raise
        finally:
            log.info("%s: job %s: %d worker(s), %d model request(s), %.1fs", self.where, outcome,
                     len(run.workers), run.requests, time.monotonic() - started)

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        if self.worker_run is None:
            return ToolResult("this worker is no longer active; stop now", is_error=True, conclude=True)
        return self.worker_run.tool_call(worker_id, name, args)
