"""An incremental index of a session log by turn, folded event by event. Pure.

`SessionLog` feeds every committed event to its `TurnIndex` right after folding it into the
surface (with the seqs a replacement shadowed), so what recovery, turn jobs, follow-ups and
pricing ask costs O(1) or O(turn), never a pass over the whole log:

- the origin unit of every surface node (`node_origins` is this same fold run over a whole
  log, and `inspect` streams it, so none of them can disagree);
- per turn: its current surface nodes (the members of `TURN_NODE_TYPES` whose origin is the
  turn, kept under replacements), those still carrying raw reasoning, the seqs of its
  latest `turn/start` and `turn/end`, and how many steps the agent loop ran in it (its model
  requests; a landing step is not one);
- turn-memory's durable markers: the turns with a `pending` and with a `compression` marker
  anywhere in the log (a checkpoint that later shadows one does not unmark the turn);
- the lifecycle state at the end of the log: the open turn and step, the latest unmatched
  `compaction/start`, the latest `session/end-seed`;
- whether the surface was ever rewritten (`rewritten`): a message replaced by anything but
  an exact-content copy of it (a compressed turn, a checkpoint), so the log holds an
  original the surface no longer shows.

Everything a full scan would answer is kept equal to it; `tests/unit/test_turn_index.py`
checks that on logs of both dialects.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from turn_memory.host.dialect import OUR_PLUGIN, Dialect
from turn_memory.host.markers import marker_of

#: ("turn", n) | ("checkpoint", seq) | ("loose", seq)
UnitKey = tuple[str, int]

#: turn-memory lands a compressed turn inside a short step numbered 0 of the open turn
#: (the agent loop numbers its own steps from 1); nodes appended there belong to the turn
#: whose replacement opened the landing, not to the open turn
LANDING_STEP = 0

#: the nodes a turn consists of; v02's system/developer messages are host scaffolding the
#: loop writes inside a step (turn 1 opens with the system prompt, surface node 0, which only
#: a system/message may replace), never part of what a turn said
TURN_NODE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})


@dataclass(frozen=True)
class LifecycleState:
    open_turn: int | None
    #: the latest compaction/start without a matching compaction/end, if any
    unmatched_compaction: dict[str, Any] | None
    latest_end_seed: int | None

    @property
    def compaction_locked(self) -> bool:
        """An unmatched start locks compaction, unless a later restart (end-seed) orphaned it."""
        start = self.unmatched_compaction
        return start is not None and not (self.latest_end_seed is not None and self.latest_end_seed > start["seq"])


def has_reasoning(event: dict[str, Any]) -> bool:
    """An assistant/message with a raw reasoning block."""
    if event.get("type") != "assistant/message":
        return False
    message = (event.get("data") or {}).get("message") or {}
    return any(isinstance(b, dict) and b.get("type") == "reasoning" for b in message.get("content") or [])


def _landed_node(event: dict[str, Any], dialect: Dialect) -> bool:
    """An appended node of a landing: never one the agent loop commits on its own."""
    kind, data = event["type"], event.get("data") or {}
    if kind in ("assistant/message", "tool/result"):
        return True
    if kind == "user/message":  # ours, or a copy (a snapshot the landing restated at the tail)
        return dialect.is_plugin_source(data.get("source"), OUR_PLUGIN) or bool(event.get("sourceEventSeqs"))
    return False


class OriginFold:
    """Origin unit of every surface-eligible event, by seq, one event at a time.

    A surface node appended inside `turn/start … turn/end` belongs to that turn. A
    replacement belongs to whatever it replaced (the origin of its first shadowed node) —
    except a session checkpoint, which is a standalone unit. A landing of an earlier turn
    inside the open turn appends nodes that belong to the landed turn: on rc8 inside the
    landing step (`LANDING_STEP`); on 0.2 inside the loop's own step, right after the
    replacement that heads it (the one carrying its `compression` marker), until the loop
    commits its own first node of the step (system prompt, the turn's user message, runtime
    context). A block landing appends each later turn's head (its `compression` marker) in
    that same run: the nodes after it are that turn's.
    """

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.origins: dict[int, UnitKey] = {}
        self._open_turn: int | None = None
        self._landing: UnitKey | None = None
        self._in_landing = False
        self._window: UnitKey | None = None  # 0.2: the landed turn a run of appended nodes belongs to
        #: the last surface node fed was appended by a landing of an earlier turn (not the loop's own)
        self.landed = False

    def feed(self, event: dict[str, Any]) -> UnitKey | None:
        """Fold one event; returns its origin when it is a surface node, else None. Lifecycle
        events with unreadable data (a damaged log, read by `inspect`) change nothing."""
        kind = event["type"]
        data = event.get("data")
        if kind == "turn/start":
            turn = data.get("turn") if isinstance(data, dict) else None
            if type(turn) is int:
                self._open_turn, self._window = turn, None
        elif kind == "turn/end":
            self._open_turn, self._window = None, None
        elif kind in ("step/start", "step/end"):
            self._window = None
            if isinstance(data, dict) and data.get("step") == LANDING_STEP:
                self._in_landing, self._landing = kind == "step/start", None
        op = event.get("surfaceOp")
        if op is None:
            return None
        seq = event["seq"]
        origins = self.origins
        self.landed = False
        if op == "append":
            if self._in_landing and self._landing is not None:
                origin = self._landing
                self.landed = True
            elif self._window is not None and _landed_node(event, self.dialect):
                mark = marker_of(event)
                if mark is not None and mark[0] == "compression":
                    # the next turn of a block landing: its head opens that turn's run of nodes
                    self._window = ("turn", mark[1])
                origin = self._window
                self.landed = True
            else:
                self._window = None
                # 0.2's system prompt (surface node 0, committed inside turn 1's step) is no turn's content
                open_turn = self._open_turn
                origin = ("turn", open_turn) if open_turn is not None and kind != "system/message" else ("loose", seq)
            origins[seq] = origin
            return origin
        message = data if kind == "user/message" else (data or {}).get("message") if isinstance(data, dict) else None
        source = message.get("source") if isinstance(message, dict) else None
        bounds = self.dialect.op_range(op)
        if self.dialect.is_checkpoint_source(source) or bounds is None:
            origin = ("checkpoint", seq)
            self._window = None
        else:
            origin = origins.get(bounds[0], ("loose", seq))
            if self._in_landing:
                self._landing = origin
            elif (origin[0] == "turn" and origin[1] != self._open_turn and self._open_turn is not None
                  and (marker_of(event) or ("",))[0] == "compression"):
                # only a landing's head (its compression marker) opens a window: a pending
                # marker written while a later turn runs is a lone copy, and the loop's own
                # nodes after it are that later turn's
                self._window = origin
        origins[seq] = origin
        return origin

    def forget(self, seqs: Any) -> None:
        """Drop the origins of nodes that left the surface for good (a streaming reader keeps
        only the current surface's; a replacement only ever looks up current nodes)."""
        for seq in seqs:
            self.origins.pop(seq, None)


def _content(event: dict[str, Any]) -> Any:
    data = event.get("data") or {}
    message = data.get("message", data) if isinstance(data, dict) else None
    return message.get("content") if isinstance(message, dict) else None


def _same_copy(event: dict[str, Any], shadowed: Sequence[int], event_at: Callable[[int], dict[str, Any]]) -> bool:
    """`event` replaces one node with an exact-content copy of it (a marker copy)."""
    if len(shadowed) != 1:
        return False
    original = event_at(shadowed[0])
    return original.get("type") == event.get("type") and _content(original) == _content(event)


def node_origins(events: Sequence[dict[str, Any]], dialect: Dialect) -> dict[int, UnitKey]:
    """Origin unit of every surface-eligible event, by seq (one pass over the log); a
    `SessionLog` keeps the same map incrementally (`log.index.origins`)."""
    fold = OriginFold(dialect)
    for event in events:
        fold.feed(event)
    return fold.origins



class TurnIndex:
    """Per-turn facts of one session log, kept as it grows (see the module docstring)."""

    def __init__(self, dialect: Dialect, position: Callable[[int], int | None],
                 event_at: Callable[[int], dict[str, Any]] | None = None) -> None:
        self._origin = OriginFold(dialect)
        #: the committed event of a seq (the log's own list): what a replacement shadowed
        self._event_at = event_at
        #: seq -> origin unit of every surface node ever committed (shadowed ones included)
        self.origins = self._origin.origins
        #: surface position of a seq (None when not on the surface): the log's own index
        self._position = position
        self._members: dict[int, set[int]] = {}
        self._reasoning: dict[int, set[int]] = {}
        #: turn -> seq of its latest turn/start / turn/end
        self.turn_starts: dict[int, int] = {}
        self.turn_ends: dict[int, int] = {}
        self._end_seqs: list[int] = []  # seq of every turn/end, ascending
        self._end_turns: list[int] = []
        #: turn -> steps the agent loop opened in it (not turn-memory's landing steps)
        self.steps: dict[int, int] = {}
        #: tool/result events committed (the session has used a tool when > 0)
        self.tool_results = 0
        #: turns with a `pending` / `compression` marker anywhere in the log
        self.pending: set[int] = set()
        self.landed: set[int] = set()
        #: landed turns whose workers left the assistant nodes as they were (0.2): raw reasoning by design
        self.kept_assistants: set[int] = set()
        self.latest_turn = 0
        self.open_turn: int | None = None
        #: (turn, step) of the step open at the end of the log
        self.open_step: tuple[int, int] | None = None
        #: the latest compaction/start without a compaction/end after it
        self.unmatched_compaction: dict[str, Any] | None = None
        self.latest_end_seed: int | None = None
        #: a message was replaced by anything but an exact-content copy of it (a pending or
        #: no-op marker is one): the log keeps originals the surface no longer shows. Sticky
        self.rewritten = False

    # -- folding -----------------------------------------------------------------------
    def feed(self, event: dict[str, Any], shadowed: tuple[int, ...] = ()) -> None:
        """Fold one committed event; `shadowed`: the surface nodes it replaced."""
        kind = event["type"]
        if kind == "turn/start":
            turn = event["data"]["turn"]
            self.turn_starts[turn] = event["seq"]
            self.open_turn, self.open_step = turn, None
            self.latest_turn = max(self.latest_turn, turn)
        elif kind == "turn/end":
            turn = event["data"]["turn"]
            self.turn_ends[turn] = event["seq"]
            self._end_seqs.append(event["seq"])
            self._end_turns.append(turn)
            self.open_turn, self.open_step = None, None
        elif kind == "step/start":
            data = event["data"]
            self.open_step = (data["turn"], data["step"])
            if data["step"] != LANDING_STEP:
                self.steps[data["turn"]] = self.steps.get(data["turn"], 0) + 1
        elif kind == "step/end":
            self.open_step = None
        elif kind == "tool/result":
            self.tool_results += 1
        elif kind == "compaction/start":
            self.unmatched_compaction = event
        elif kind == "compaction/end":
            self.unmatched_compaction = None
        elif kind == "session/end-seed":
            self.latest_end_seed = event["seq"]
        elif kind == "user/message" and (mark := marker_of(event)) is not None:
            (self.pending if mark[0] == "pending" else self.landed).add(mark[1])
            if mark[0] == "compression":
                kept = (event["data"].get("source") or {}).get("keptAssistants") is True
                (self.kept_assistants.add if kept else self.kept_assistants.discard)(mark[1])
        if shadowed and not self.rewritten and kind in TURN_NODE_TYPES:
            self.rewritten = self._event_at is None or not _same_copy(event, shadowed, self._event_at)
        origin = self._origin.feed(event)
        if origin is None:
            return
        for seq in shadowed:
            gone = self.origins.get(seq)
            if gone is not None and gone[0] == "turn":
                self._members.get(gone[1], set()).discard(seq)
                self._reasoning.get(gone[1], set()).discard(seq)
        if origin[0] == "turn" and kind in TURN_NODE_TYPES:
            seq = event["seq"]
            self._members.setdefault(origin[1], set()).add(seq)
            if has_reasoning(event):
                self._reasoning.setdefault(origin[1], set()).add(seq)

    # -- reading -----------------------------------------------------------------------
    def turn_nodes(self, turn: int) -> list[int]:
        """The current surface nodes of `turn`, in surface order (empty when shadowed). O(turn)."""
        members = self._members.get(turn)
        if not members:
            return []
        position = self._position
        return sorted(members, key=lambda seq: position(seq) or 0)

    def has_raw_reasoning(self, turn: int) -> bool:
        """Whether a current surface node of `turn` still shows raw reasoning."""
        return bool(self._reasoning.get(turn))

    @property
    def completed(self) -> set[int]:
        return set(self.turn_ends)

    def completed_steps(self) -> int:
        """Steps (model requests of the agent loop) of every completed turn. O(turns)."""
        steps = self.steps
        return sum(steps.get(turn, 0) for turn in self.turn_ends)

    def ended_since(self, seq: int) -> list[int]:
        """Turns whose turn/end is at or after `seq`, in log order."""
        return self._end_turns[bisect_left(self._end_seqs, seq):]

    def turn_span(self, turn: int) -> tuple[int, int | None] | None:
        """(seq of the turn's latest turn/start, seq of its turn/end or None while open)."""
        start = self.turn_starts.get(turn)
        if start is None:
            return None
        end = self.turn_ends.get(turn)
        return start, (end if end is not None and end > start else None)

    @property
    def lifecycle(self) -> "LifecycleState":
        return LifecycleState(self.open_turn, self.unmatched_compaction, self.latest_end_seed)
