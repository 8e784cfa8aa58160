"""The segmented working-checkpoint job (design D-006, D-011).

The selected span is split into segments of complete turns. Workers process them in order,
each editing the host-owned working checkpoint through the session tools: a fork of the
parent first (it has the history in context), then fresh spawns that get the segment's
text in their prompt. Each segment has its own budget of consecutive workers without
progress; progress resets it. A worker progressed only when it left the working checkpoint
in a shape never seen at a worker boundary before and not one a finish was refused on
(restating the same nodes, or repeating a refused shape, is no progress). The whole
compaction is bounded too: `compaction.maxJobRequests` model requests and
`compaction.jobTimeoutS` seconds over all its workers. One log line reports the job: its
workers, model requests, time and outcome. Nothing touches the session here: the finished
checkpoint is returned for the caller's single transaction.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import ToolResult
from turn_memory.compaction import segment_prompt
from turn_memory.compaction.memory import SessionMemoryEditor
from turn_memory.compaction.segments import Segment, split_segments
from turn_memory.compaction.selection import Selection, compressed_view
from turn_memory.compaction.session_tools import FINISH, SessionTools, SourceNode, ToolError
from turn_memory.config import CompactionConfig
from turn_memory.host.blocks import render_blocks
from turn_memory.host.dialect import is_checkpoint_source
from turn_memory.host.images import missing_markers
from turn_memory.host.markers import is_host_context_at
from turn_memory.host.surface import SessionLog
from turn_memory.host.units import surface_units
from turn_memory.prompts import PromptError
from turn_memory.runtime.interfaces import ReadyTurn
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.workers import run_worker

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
        if seq in compressed:
            for role, text in compressed[seq]:
                _, images, _ = render_blocks([{"type": "text", "text": text}])
                # a rewritten turn's user node is the person's request, restated by its worker
                out.append(SourceNode(f"S{segment.index}.{len(out) + 1}", role, text, tuple(images),
                                      "human" if role == "user" else ""))
            continue
        message = log_.message_of(seq) or {"role": "user", "content": []}
        text, images, _ = render_blocks(message.get("content") or [])
        role = "tool" if message.get("role") == "tool" or _is_tool(log_, seq) else message.get("role", "user")
        out.append(SourceNode(f"S{segment.index}.{len(out) + 1}", role, text, tuple(images), _kind(log_, seq, role, message)))
    return out


def _kind(log_: SessionLog, seq: int, role: str, message: dict[str, Any]) -> str:
    """What the host recorded a user node to be: an earlier checkpoint (established history),
    host or plugin scaffolding, or the person's words."""
    if role != "user":
        return ""
    if is_checkpoint_source(message.get("source")):
        return "checkpoint"
    return "host-context" if is_host_context_at(log_.events, seq) else "human"


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
    return log_.events[seq]["type"] == "tool/result"


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
    current_worker: str | None = None
    worker_modes: list[str] = field(default_factory=list)
    #: model requests all workers made (a worker that did not say: its bound)
    requests: int = 0
    #: working-checkpoint shapes a finish was refused on
    _refused: set[Any] = field(default_factory=set)
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self.job_id = self.job_id or f"compaction:{self.session.id}:{next(_ids)}"

    @property
    def where(self) -> str:
        return f"session {self.session.id} compaction job {self.job_id.rsplit(':', 1)[-1]}"

    def prepare(self) -> None:
        self.segments, sources = plan_segments(self.session.log, self.selection, self.config.segmentTokens, self.ready)
        self.editor = SessionMemoryEditor(len(self.segments))
        self.tools = SessionTools(self.editor, self.segments, sources, assigned=1,
                                  read_limit_chars=self.config.readLimitChars)

    async def run(self) -> str:
        """Process every segment; returns the checkpoint transcript (raises SegmentFailed)."""
        started = time.monotonic()
        self._deadline = started + self.config.jobTimeoutS
        outcome = "failed"
        try:
            self.prepare()
            assert self.tools is not None and self.editor is not None
            log.info("%s: %d segment(s) over %d surface nodes", self.where, len(self.segments),
                     len(self.selection.shadowed))
            for segment in self.segments:
                await self._segment(segment)
            # each finish checked its own segment; this guards what later segments rewrote
            missing = missing_markers(image_markers(self.session.log, self.selection.shadowed),
                                      [n.text for n in self.editor.nodes])
            if missing:
                raise SegmentFailed(f"the checkpoint dropped image markers: {', '.join(missing)}")
            outcome = "finished"
            return render_transcript(self.editor)
        except SegmentFailed as exc:
            outcome = f"failed: {exc}"
            raise
        finally:
            log.info("%s: job %s: %d worker(s), %d model request(s), %.1fs", self.where, outcome,
                     len(self.worker_modes), self.requests, time.monotonic() - started)

    async def _segment(self, segment: Segment) -> None:
        assert self.tools is not None and self.editor is not None
        self.tools.assigned = segment.index
        cfg = self.config
        no_progress = 0
        attempt = 0
        seen = {self.editor.shape()}
        while no_progress < cfg.workerAttempts and attempt < cfg.maxWorkers:
            budget = cfg.maxJobRequests - self.requests
            if budget <= 0:
                raise SegmentFailed(f"{segment.id}: {self.requests} model requests, the compaction's budget "
                                    "(compaction.maxJobRequests)")
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise SegmentFailed(f"{segment.id}: {cfg.jobTimeoutS:.0f}s, the compaction's wall-clock budget "
                                    "(compaction.jobTimeoutS)")
            mode = "fork" if attempt == 0 else "spawn"
            attempt += 1
            worker_id = f"c{next(_ids)}"
            self.worker_modes.append(mode)
            try:
                prompt = self._prompt(segment, mode)
            except PromptError as exc:
                raise SegmentFailed(f"prompt: {exc}") from exc
            self.current_worker = worker_id
            try:
                outcome, used = await run_worker(self.port, self.session.id, {
                    "jobId": self.job_id, "workerId": worker_id, "mode": mode, "prompt": prompt,
                    "persona": segment_prompt.persona(), "tools": segment_prompt.worker_tool_specs(),
                    "maxRequests": min(cfg.maxWorkerRequests, budget), "label": f"turn-memory compaction {segment.id}",
                }, min(cfg.workerTimeoutS, left))
            finally:
                self.current_worker = None
            self.requests += used
            if segment.index in self.tools.finished:
                log.info("%s: %s done by worker %d (%s)", self.where, segment.id, attempt, mode)
                return
            shape = self.editor.shape()
            progressed = shape not in seen and shape not in self._refused
            seen.add(shape)
            no_progress = 0 if progressed else no_progress + 1
            log.info("%s: %s worker %s (%s) ended without a finish (%s); %s", self.where, segment.id, worker_id, mode,
                     outcome.get("stop") if isinstance(outcome, dict) else outcome,
                     "progress, continuing" if progressed else f"no progress ({no_progress}/{self.config.workerAttempts})")
        if no_progress >= self.config.workerAttempts:
            raise SegmentFailed(f"{segment.id}: {self.config.workerAttempts} consecutive workers made no progress")
        raise SegmentFailed(f"{segment.id}: not finished after {attempt} workers (the cap)")

    def _prompt(self, segment: Segment, mode: str) -> str:
        assert self.tools is not None and self.editor is not None
        return segment_prompt.task(self.tools, self.editor, segment, spawn=mode == "spawn",
                                   read_limit_chars=self.config.readLimitChars,
                                   handoff_chars=self.config.handoffChars)

    def tool_call(self, worker_id: str, name: str, args: Any) -> ToolResult:
        if self.tools is None or worker_id != self.current_worker:
            return ToolResult("this worker is no longer active; stop now", is_error=True, conclude=True)
        try:
            text = self.tools.call(name, args)
        except ToolError as exc:
            if name == FINISH and self.editor is not None:
                self._refused.add(self.editor.shape())
            return ToolResult(str(exc), is_error=True)
        return ToolResult(text, conclude=name == FINISH)
