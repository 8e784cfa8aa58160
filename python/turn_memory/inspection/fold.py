"""Fold a session log's records, one at a time, into per-turn and per-checkpoint figures.

Streaming: no event body is kept. What is kept is small and bounded by the *current*
surface, not by the log: per surface node its unit (turn / checkpoint / loose), token
estimate and (user messages only) a content fingerprint, plus the node order as a doubly
linked list — a replacement walks exactly the nodes it shadows, and each node is shadowed
at most once, so the whole fold is linear in the log.

Which unit a node belongs to is the host model's `OriginFold` (`host.turn_index`, the one
home of node ownership), fed the same events; its origins are kept for the current surface
only. "Before turn-memory" of a turn counts only what the agent itself appended (original
nodes), never marker copies or landing output.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import orjson

from turn_memory.host.dialect import Dialect
from turn_memory.host.markers import COMPRESSED_TURN, is_own_source
from turn_memory.host.surface import project_message
from turn_memory.host.tokens import ROLE_OVERHEAD, estimate_content
from turn_memory.host.turn_index import OriginFold, UnitKey, has_reasoning
from turn_memory.logs.reader import (
    CHUNK_ROW_TYPES,
    FIRST_SEQ_RANGE_FORMAT,
    LAST_CHUNK_ROW_FORMAT,
    SessionLogError,
    chunk_row_members,
    expand_seq_ranges,
)

CHUNK = "assistant/chunk"
ROW_TYPES = frozenset(CHUNK_ROW_TYPES)
_LIFECYCLE = frozenset({"turn/start", "turn/end", "step/start", "step/end", "compaction/start", "compaction/end"})
#: at most this many problems of one kind are listed; the rest are only counted
PROBLEM_LIMIT = 20


@dataclass
class Marker:
    phase: str  # "pending" | "compression"
    seq: int
    #: an exact-content copy of the node it replaced (pending markers always are)
    copy: bool
    #: replacements of the turn after this marker (a landing writes its marker first)
    rewrites: int = 0
    #: how the landing sits (`host.landing_forms`): in-place, tail (assistants appended after
    #: it) or flattened (one user message for the turn)
    form: str = "in-place"
    #: the workers left the assistant nodes as they were (0.2): their raw reasoning stays by design
    kept_assistants: bool = False

    @property
    def kind(self) -> str:
        """pending | compression | no-op (a landing that changed nothing)."""
        if self.phase == "compression" and self.copy and self.rewrites == 0:
            return "no-op"
        return self.phase


@dataclass
class Unit:
    """Current-surface totals of one unit, kept up to date on every append and replacement."""

    nodes: int = 0
    tokens: int = 0


@dataclass
class TurnStats(Unit):
    turn: int = 0
    complete: bool = False
    raw_nodes: int = 0
    raw_tokens: int = 0
    markers: list[Marker] = field(default_factory=list)
    #: the checkpoint that folded this turn, and the turn's size right before that
    shadowed_by: int | None = None
    folded: tuple[int, int] | None = None
    #: current surface nodes that still show raw reasoning (a landing must leave none)
    reasoning_nodes: int = 0


@dataclass
class CheckpointStats(Unit):
    seq: int = 0
    compaction_id: str | None = None
    start: int = 0
    end: int = 0
    own_tokens: int = 0
    shadowed_nodes: int = 0
    shadowed_tokens: int = 0
    first_turn: int | None = None
    last_turn: int | None = None
    folded_by: int | None = None


@dataclass
class Problem:
    kind: str
    offset: int | None
    detail: str


class Fold:
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.header: dict[str, Any] | None = None
        self.lines = 0
        #: keyed by each record's "type" as found: a damaged log may hold a non-string there
        self.by_type: defaultdict[Hashable, int] = defaultdict(int)
        self.turns: dict[int, TurnStats] = {}
        self.checkpoints: list[CheckpointStats] = []
        self.loose = Unit()
        self.raw_nodes = 0
        self.raw_tokens = 0
        self.compactions_started = 0
        self.compactions_failed = 0
        self.problems: list[Problem] = []
        self.problem_counts: dict[str, int] = {}
        self._expected = 0  # next seq
        self._open: TurnStats | None = None
        self._origin = OriginFold(dialect)
        self._checkpoint_of: dict[int, CheckpointStats] = {}
        # the current surface: seq -> (unit, tokens, fingerprint), and its order
        self._meta: dict[int, tuple[Unit, int, int]] = {}
        #: current surface nodes with raw reasoning
        self._reasoning: set[int] = set()
        #: appended assistant messages (a 0.2 landing that shadows one took the tail form)
        self._assistants: set[int] = set()
        self._next: dict[int, int] = {}
        self._prev: dict[int, int] = {}
        self._tail: int | None = None
        self._surface_types = dialect.surface_event_types
        # how the dialect's session format stores events (logs.reader): the log's header names
        # the same format, or the dialect was told from the records of a header-less log
        self._chunk_rows = dialect.session_format_version <= LAST_CHUNK_ROW_FORMAT
        self._seq_ranges = dialect.session_format_version >= FIRST_SEQ_RANGE_FORMAT

    # -- problems ------------------------------------------------------------------------
    def problem(self, kind: str, offset: int | None, detail: str) -> None:
        count = self.problem_counts.get(kind, 0) + 1
        self.problem_counts[kind] = count
        if count <= PROBLEM_LIMIT:
            self.problems.append(Problem(kind, offset, detail))

    # -- input ---------------------------------------------------------------------------
    @property
    def events(self) -> int:
        """Events read (a chunk row counts as the events it packs)."""
        return sum(self.by_type.values())

    def feed_lines(self, lines: list[bytes], where: Any) -> None:
        """Fold complete JSONL lines; `where(i)` -> (byte offset, location text) for problems.

        The hot loop of `inspect`: most lines are chunk rows and non-surface events, handled
        inline here; only surface events and lifecycle markers call out.
        """
        loads = orjson.loads
        self.lines += len(lines)  # bad lines are taken back off as they are found
        by_type = self.by_type
        surface_types = self._surface_types
        expected = self._expected
        for index, line in enumerate(lines):
            try:
                record = loads(line)
            except orjson.JSONDecodeError as exc:
                self.lines -= 1
                if line.strip():
                    at, text = where(index)
                    self.problem("bad-line", at, f"{text}: not JSON ({exc})")
                continue
            if type(record) is not dict:
                self.lines -= 1
                at, text = where(index)
                self.problem("bad-line", at, f"{text}: not a JSON object")
                continue
            kind = record.get("type")
            if kind in ROW_TYPES:
                try:
                    if not self._chunk_rows:
                        raise SessionLogError(f"a {kind} storage row in a format "
                                              f"{self.dialect.session_format_version} log, which packs none")
                    count = len(chunk_row_members(record))
                except SessionLogError as exc:
                    at, text = where(index)
                    self.problem("bad-row", at, f"{text}: {exc}")
                    continue
                seq = record["seq0"]
                if seq != expected and not self._gap(seq, expected, index, where):
                    continue
                expected = seq + count
                by_type[CHUNK] += count
                continue
            seq = record.get("seq")
            if seq != expected:
                if kind == "session" and self.header is None and not by_type:
                    self.header = record
                    continue
                if not self._gap(seq, expected, index, where):
                    continue
            expected = seq + 1
            by_type[kind] += 1
            if "surfaceOp" in record and kind in surface_types:
                self._surface_event(record, seq, kind, index, where)
            elif kind in _LIFECYCLE:
                self._lifecycle(kind, record)
        self._expected = expected

    def _gap(self, seq: Any, expected: int, index: int, where: Any) -> bool:
        """Report an out-of-order seq; False when the record must be skipped."""
        at, text = where(index)
        if type(seq) is not int or seq < expected:
            self.problem("seq-gap", at, f"{text}: seq {seq!r} where {expected} was expected; record skipped")
            return False
        self.problem("seq-gap", at, f"{text}: events {expected}..{seq - 1} are missing")
        return True

    def _lifecycle(self, kind: str, record: dict[str, Any]) -> None:
        data = record.get("data")
        if kind in ("turn/start", "turn/end", "step/start", "step/end"):
            self._origin.feed(record)
        if kind == "turn/end":
            if self._open is not None:
                self._open.complete = True
            self._open = None
            return
        if type(data) is not dict:
            return
        if kind == "turn/start":
            turn = data.get("turn")
            if type(turn) is int:
                stats = self.turns.get(turn)
                if stats is None:
                    stats = self.turns[turn] = TurnStats(turn=turn)
                self._open = stats
        elif kind == "compaction/start":
            self.compactions_started += 1
        elif kind == "compaction/end" and data.get("error") is not None:
            self.compactions_failed += 1

    def _surface_event(self, event: dict[str, Any], seq: int, kind: str, index: int, where: Any) -> None:
        # runs for a third of a log's records: estimate_message and _append are inlined
        if self._seq_ranges and "sourceEventSeqs" in event:
            try:
                event = expand_seq_ranges(event)  # as the host reads it back
            except SessionLogError as exc:
                at, text = where(index)
                self.problem("bad-row", at, f"{text}: {exc}; the event is ignored")
                return
        data = event.get("data")
        message = project_message(self.dialect, event)
        tokens = estimate_content(message.get("content", [])) + ROLE_OVERHEAD if message is not None else 0
        fingerprint = 0
        source = None
        if kind == "user/message" and type(data) is dict:
            fingerprint = hash(orjson.dumps(data.get("content")))
            source = data.get("source")
        op = event["surfaceOp"]
        if op == "append":
            unit = self._unit(self._origin.feed(event))
            if self._origin.landed:
                if type(unit) is TurnStats:
                    self._rewrote(unit)
                    marker = _marker(source)
                    if marker is not None and marker[0] == "compression":  # a later turn of a tail block
                        assert type(source) is dict  # a marker is a source
                        unit.markers.append(Marker("compression", seq, False, form="tail",
                                                   kept_assistants=source.get("keptAssistants") is True))
            elif unit is not self.loose:
                # the agent's own output; a user message citing earlier events is a restated
                # copy (a snapshot kept across a landing), not new history
                if not (kind == "user/message" and event.get("sourceEventSeqs")):
                    # OriginFold gives the loop's own append its open turn or a loose unit
                    assert type(unit) is TurnStats
                    unit.raw_nodes += 1
                    unit.raw_tokens += tokens
                    self.raw_nodes += 1
                    self.raw_tokens += tokens
            else:
                unit = self.loose
                self.raw_nodes += 1
                self.raw_tokens += tokens
            # append to the surface
            if kind == "assistant/message":
                self._assistants.add(seq)
            self._meta[seq] = (unit, tokens, fingerprint)
            self._note_reasoning(event, seq, kind, unit)
            unit.nodes += 1
            unit.tokens += tokens
            tail = self._tail
            if tail is not None:
                self._next[tail] = seq
                self._prev[seq] = tail
            self._tail = seq
            return
        bounds = self.dialect.op_range(op)
        shadowed = self._span(bounds) if bounds is not None else None
        if bounds is None or shadowed is None:  # (no bounds, no span)
            at, text = where(index)
            self.problem("surface", at, f"{text}: seq {seq} ({kind}) replaces {op!r}, which is not a span of the "
                                        "current surface; the replacement is ignored")
            return
        origin = self._origin.feed(event)
        marker = _marker(source)
        if origin is not None and origin[0] == "checkpoint":
            unit = self._checkpoint_of[seq] = self._checkpoint(seq, source or {}, bounds, shadowed, tokens)
        else:
            unit = self._unit(origin)
            copy = len(shadowed) == 1 and fingerprint != 0 and self._meta[shadowed[0]][2] == fingerprint
            if marker is not None:
                stats = self.turns.get(marker[1])
                if stats is not None:
                    assert type(source) is dict  # a marker is a source
                    # where an assistant can only be appended, a landing head that shadows one
                    # is the tail form (its nodes appended after it), or one flattened message
                    tail = not self.dialect.assistant_may_replace and not self._assistants.isdisjoint(shadowed)
                    form = "flattened" if source.get("form") == COMPRESSED_TURN else "tail" if tail else "in-place"
                    stats.markers.append(Marker(marker[0], seq, copy, form=form,
                                                kept_assistants=source.get("keptAssistants") is True))
            if not copy and type(unit) is TurnStats:
                self._rewrote(unit)
        self._origin.forget(shadowed)
        self._replace(shadowed, seq, unit, tokens, fingerprint)
        self._note_reasoning(event, seq, kind, unit)

    def _note_reasoning(self, event: dict[str, Any], seq: int, kind: str, unit: Unit) -> None:
        if kind == "assistant/message" and has_reasoning(event):
            self._reasoning.add(seq)
            if type(unit) is TurnStats:
                unit.reasoning_nodes += 1

    def _unit(self, origin: UnitKey | None) -> Unit:
        """The figures of the unit `OriginFold` attributes a node to."""
        if origin is not None and origin[0] == "turn":
            return self.turns.get(origin[1]) or self.loose
        if origin is not None and origin[0] == "checkpoint":
            return self._checkpoint_of.get(origin[1]) or self.loose
        return self.loose

    @staticmethod
    def _rewrote(turn: TurnStats) -> None:
        if turn.markers:
            turn.markers[-1].rewrites += 1

    def _checkpoint(self, seq: int, source: dict[str, Any], bounds: tuple[int, int], shadowed: list[int],
                    tokens: int) -> CheckpointStats:
        cp = CheckpointStats(seq=seq, compaction_id=source.get("compactionId"), start=bounds[0], end=bounds[1],
                             own_tokens=tokens, shadowed_nodes=len(shadowed))
        meta = self._meta
        first: int | None
        last: int | None
        for node in shadowed:
            unit, node_tokens, _ = meta[node]
            cp.shadowed_tokens += node_tokens
            if type(unit) is TurnStats:
                if unit.shadowed_by is None:
                    unit.shadowed_by = seq
                    unit.folded = (unit.nodes, unit.tokens)
                first = last = unit.turn
            elif type(unit) is CheckpointStats:
                unit.folded_by = seq
                first, last = unit.first_turn, unit.last_turn
            else:
                continue
            if first is not None:
                cp.first_turn = first if cp.first_turn is None else min(cp.first_turn, first)
            if last is not None:
                cp.last_turn = last if cp.last_turn is None else max(cp.last_turn, last)
        self.checkpoints.append(cp)
        return cp

    # -- the surface ---------------------------------------------------------------------
    def _span(self, bounds: tuple[int, int]) -> list[int] | None:
        """The current nodes from start to end, in order; None when that is not a span."""
        start, end = bounds
        meta = self._meta
        if start not in meta or end not in meta:
            return None
        nxt = self._next
        span = [start]
        node = start
        while node != end:
            following = nxt.get(node)
            if following is None:
                return None  # end comes before start
            node = following
            span.append(node)
        return span

    def _replace(self, shadowed: list[int], seq: int, unit: Unit, tokens: int, fingerprint: int) -> None:
        meta, nxt, prv = self._meta, self._next, self._prev
        for node in shadowed:
            old_unit, old_tokens, _ = meta.pop(node)
            old_unit.nodes -= 1
            old_unit.tokens -= old_tokens
            if node in self._reasoning:
                self._reasoning.discard(node)
                if type(old_unit) is TurnStats:
                    old_unit.reasoning_nodes -= 1
        before = prv.pop(shadowed[0], None)
        after = nxt.pop(shadowed[-1], None)
        for node in shadowed[1:]:
            del prv[node]
        for node in shadowed[:-1]:
            del nxt[node]
        meta[seq] = (unit, tokens, fingerprint)
        unit.nodes += 1
        unit.tokens += tokens
        if before is not None:
            nxt[before] = seq
            prv[seq] = before
        if after is not None:
            prv[after] = seq
            nxt[seq] = after
        else:
            self._tail = seq

    # -- results -------------------------------------------------------------------------
    @property
    def surface_nodes(self) -> int:
        return len(self._meta)

    @property
    def surface_tokens(self) -> int:
        return sum(tokens for _, tokens, _ in self._meta.values())

    def surface_order(self) -> list[int]:
        """The current surface, in model order (for tests and small logs)."""
        if self._tail is None:
            return []
        out = [self._tail]
        while out[-1] in self._prev:
            out.append(self._prev[out[-1]])
        return out[::-1]


def _marker(source: Any) -> tuple[str, int] | None:
    if type(source) is dict and is_own_source(source):
        phase, turn = source.get("phase"), source.get("turn")
        if phase in ("pending", "compression") and type(turn) is int:
            return phase, turn
    return None
