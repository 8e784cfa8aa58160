"""Pure model of a DSH session log and its model-visible surface.

The surface is the ordered list of event seqs whose messages the model sees. An event joins
it by `surfaceOp: 'append'` (tail) or by a positional replace op that shadows a contiguous
span of current nodes with itself. `SessionLog` folds host-shaped events into that surface
and validates a planned batch exactly as the host would, both when `session.append` runs and
when the log is later reloaded (which checks more: see `event_shape`, `format_v4` and, on
v02, the lifecycle relationships in `lifecycle`). A plan must also leave the model a
well-formed conversation: every tool call answered by its result, no result without its call.
Dialect differences come only from the `Dialect` object.

Nothing here does I/O. Appending costs O(1) amortised; a replacement costs O(surface).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, NamedTuple, Protocol

from turn_memory.host.dialect import Dialect
from turn_memory.host.event_shape import (
    envelope_violation,
    event_data_violation,
    json_violation,
    legacy_header_violation,
    reload_violations,
)
from turn_memory.host.event_store import EventStore
from turn_memory.host.json_values import is_seq
from turn_memory.host.lifecycle import Lifecycle
from turn_memory.host.tokens import estimate_message
from turn_memory.host.turn_index import TurnIndex
from turn_memory.host.violation import Violation

Event = dict[str, Any]

#: event types a log keeps as dicts even off the surface: the mirror shares one request/header's
#: `header` between the unchanged copies 0.2 writes at most turns (`MirroredSession.retained`)
_KEPT_WHOLE = frozenset({"request/header"})


class SurfaceError(ValueError):
    """A host rule an event breaks. `rule` is a short stable id (e.g. 'replace-coverage')."""

    def __init__(
        self,
        rule: str,
        detail: str,
        *,
        seq: Any = None,
        index: int | None = None,
        event_type: Any = None,
    ) -> None:
        self.rule = rule
        self.detail = detail
        self.seq = seq
        self.index = index
        self.event_type = event_type
        where = f"plan event #{index} (seq {seq}" if index is not None else f"event (seq {seq}"
        where += f", {event_type})" if event_type is not None else ")"
        super().__init__(f"{where}: {detail} [rule: {rule}]")


class _Rejected(Exception):
    """Internal: carries a Violation out of the surface planner."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(detail)
        self.violation = Violation(rule, detail)


class _Transition(NamedTuple):
    kind: Literal["append", "replace"]
    seq: int
    start_idx: int = 0
    end_idx: int = 0
    shadowed: tuple[int, ...] = ()


class _SurfaceLike(Protocol):
    def index(self, seq: int) -> int | None: ...
    def head(self) -> int | None: ...
    def span(self, start_idx: int, end_idx: int) -> list[int]: ...


class _SurfaceState:
    """Committed surface: node seqs in order plus a seq -> position index."""

    def __init__(self, nodes: list[int] | None = None, pos: dict[int, int] | None = None) -> None:
        self.nodes: list[int] = nodes if nodes is not None else []
        self.pos: dict[int, int] = pos if pos is not None else {}

    def index(self, seq: int) -> int | None:
        return self.pos.get(seq)

    def head(self) -> int | None:
        return self.nodes[0] if self.nodes else None

    def span(self, start_idx: int, end_idx: int) -> list[int]:
        return self.nodes[start_idx : end_idx + 1]

    def apply(self, t: _Transition) -> None:
        if t.kind == "append":
            self.pos[t.seq] = len(self.nodes)
            self.nodes.append(t.seq)
            return
        for seq in t.shadowed:
            del self.pos[seq]
        self.nodes[t.start_idx : t.end_idx + 1] = [t.seq]
        for i in range(t.start_idx, len(self.nodes)):  # positions after the splice shift
            self.pos[self.nodes[i]] = i


class _Scratch:
    """Copy-on-replace view over a committed surface, so `check_plan` never mutates it.

    Appends go to a private tail; the first replacement copies the nodes once (O(surface)).
    """

    def __init__(self, base: _SurfaceState) -> None:
        self._base = base
        self._tail: list[int] = []
        self._tail_pos: dict[int, int] = {}
        self._own: _SurfaceState | None = None
        #: the first surface index the batch changed (its length when nothing changed yet)
        self.first_changed = len(base.nodes)

    def __len__(self) -> int:
        return len(self._own.nodes) if self._own is not None else len(self._base.nodes) + len(self._tail)

    def nodes_from(self, index: int) -> list[int]:
        """Current nodes from `index` on, without copying the committed prefix."""
        if self._own is not None:
            return self._own.nodes[index:]
        return self._base.nodes[index:] + self._tail

    def _materialise(self) -> _SurfaceState:
        if self._own is None:
            offset = len(self._base.nodes)
            pos = dict(self._base.pos)
            pos.update((seq, offset + i) for seq, i in self._tail_pos.items())
            self._own = _SurfaceState(self._base.nodes + self._tail, pos)
        return self._own

    def index(self, seq: int) -> int | None:
        if self._own is not None:
            return self._own.index(seq)
        found = self._base.index(seq)
        if found is None and seq in self._tail_pos:
            found = len(self._base.nodes) + self._tail_pos[seq]
        return found

    def head(self) -> int | None:
        if self._own is not None:
            return self._own.head()
        if self._base.nodes:
            return self._base.nodes[0]
        return self._tail[0] if self._tail else None

    def span(self, start_idx: int, end_idx: int) -> list[int]:
        return self._materialise().span(start_idx, end_idx)

    def apply(self, t: _Transition) -> None:
        self.first_changed = min(self.first_changed, t.start_idx if t.kind == "replace" else len(self))
        if self._own is None and t.kind == "append":
            self._tail_pos[t.seq] = len(self._tail)
            self._tail.append(t.seq)
        else:
            self._materialise().apply(t)


# -- append-time surface rules ---------------------------------------------------------------


def _plan(
    dialect: Dialect, event: Event, surface: _SurfaceLike, event_at: Callable[[int], Event]
) -> _Transition | None:
    """Validate one event's surface intent against the current surface; None if it has none."""
    seq: int = event["seq"]
    etype = event.get("type")
    if not (isinstance(etype, str) and etype in dialect.surface_event_types):
        if "surfaceOp" in event:
            raise _Rejected("surface-op-ineligible", f'"{etype}" is not a surface event type and cannot carry surfaceOp')
        if "sourceEventSeqs" in event:
            raise _Rejected(
                "source-seqs-ineligible", f'"{etype}" is not a surface event type and cannot carry sourceEventSeqs'
            )
        return None
    if "surfaceOp" not in event:
        raise _Rejected("surface-op-missing", f'"{etype}" is a surface event type and requires a surfaceOp')
    op = event["surfaceOp"]
    if op == "append":
        _check_sources(dialect, event, [])
        return _Transition("append", seq)
    a, b = dialect.replace_keys
    if not isinstance(op, dict):
        raise _Rejected("surface-op-shape", f"surfaceOp must be 'append' or a replace op, got {op!r}")
    span = dialect.op_range(op)
    if span is None:
        raise _Rejected(
            "surface-op-shape",
            f"replace surfaceOp must be exactly {{op: 'replace', {a}, {b}}} with non-negative integer seqs "
            f"under {dialect.name}; got {op!r}",
        )
    if etype == "assistant/message" and not dialect.assistant_may_replace:
        raise _Rejected("assistant-replace", f"assistant/message cannot replace under {dialect.name}; append only")
    start, end = span
    if dialect.replace_endpoints_precede_event and (start >= seq or end >= seq):
        raise _Rejected("replace-endpoint-earlier", f"replace endpoints {start}..{end} must be earlier than seq {seq}")
    start_idx, end_idx = surface.index(start), surface.index(end)
    if start_idx is None:
        raise _Rejected("replace-endpoint-missing", f"replace {a} seq {start} is not on the surface")
    if end_idx is None:
        raise _Rejected("replace-endpoint-missing", f"replace {b} seq {end} is not on the surface")
    if start_idx > end_idx:
        raise _Rejected(
            "replace-order", f"replace start seq {start} (index {start_idx}) is after end seq {end} (index {end_idx})"
        )
    shadowed = surface.span(start_idx, end_idx)
    _check_sources(dialect, event, shadowed)
    if etype == "tool/result":
        _check_tool_rewrite(dialect, event, shadowed, event_at)
    if dialect.protects_system_head and start_idx == 0:
        _check_system_head(event, surface, end_idx, event_at)
    return _Transition("replace", seq, start_idx, end_idx, tuple(shadowed))


def _check_sources(dialect: Dialect, event: Event, shadowed: list[int]) -> None:
    """Provenance: unique earlier seqs, covering every node the event shadows."""
    seq: int = event["seq"]
    etype = event.get("type")
    assistant = etype == "assistant/message"
    sources: set[int] = set()
    if "sourceEventSeqs" in event:
        raw = event["sourceEventSeqs"]
        if not isinstance(raw, list):
            raise _Rejected("source-seqs-array", "sourceEventSeqs must be an array when present")
        if assistant and not dialect.assistant_may_cite_sources:
            raise _Rejected("source-seqs-assistant", f"assistant/message must not carry sourceEventSeqs under {dialect.name}")
        if not raw and not (assistant and dialect.assistant_may_cite_sources):
            allowed = " except on assistant/message" if dialect.assistant_may_cite_sources else ""
            raise _Rejected("source-seqs-empty", f"sourceEventSeqs must not be empty{allowed}")
        if not all(is_seq(s) for s in raw):
            raise _Rejected("source-seqs-entry", "sourceEventSeqs must hold non-negative safe integers")
        sources = set(raw)
        if len(sources) != len(raw):
            raise _Rejected("source-seqs-duplicate", "sourceEventSeqs must not contain duplicates")
        later = [s for s in raw if s >= seq]
        if later:
            raise _Rejected("source-seqs-earlier", f"sourceEventSeqs must reference earlier events: {later[0]} >= {seq}")
    missing = [s for s in shadowed if s not in sources]
    if missing:
        raise _Rejected(
            "replace-coverage",
            f"sourceEventSeqs must include every shadowed surface node; missing {', '.join(map(str, missing))}",
        )


def _check_tool_rewrite(dialect: Dialect, event: Event, shadowed: list[int], event_at: Callable[[int], Event]) -> None:
    """A tool/result replacement rewrites one current tool/result, touching only its result
    content (v02: dsh-session/lib/index.js:394 assertToolResultRewrite)."""
    if len(shadowed) != 1:
        raise _Rejected("tool-rewrite-span", "tool/result replacement must rewrite exactly one current node")
    original = event_at(shadowed[0])
    if original.get("type") != "tool/result":
        raise _Rejected("tool-rewrite-target", f"tool/result replacement must target a tool/result (seq {shadowed[0]})")
    before = _without_result_content(dialect, original.get("data"))
    after = _without_result_content(dialect, event.get("data"))
    if before is None or after is None:
        raise _Rejected("tool-rewrite-content-only", "tool/result replacement needs data.message.content on both sides")
    if not _json_equal(before, after):
        raise _Rejected("tool-rewrite-content-only", "tool/result replacement may change only the result content")


def _without_result_content(dialect: Dialect, data: Any) -> Any:
    """tool/result data with its result content blanked, for the content-only comparison.

    v02 blanks the whole message content (its blocks are the result); rc8 the content of
    the single tool-result block, so there the block's own fields must stay.
    """
    if not isinstance(data, dict):
        return None
    message = data.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(content, list):
        return None
    if dialect.first_class_tool_results:
        return {**data, "message": {**message, "content": None}}
    first = content[0] if content else {}
    blanked = {**first, "content": None} if isinstance(first, dict) else {"content": None}
    return {**data, "message": {**message, "content": [blanked]}}


def _check_system_head(event: Event, surface: _SurfaceLike, end_idx: int, event_at: Callable[[int], Event]) -> None:
    """v02: a system/message at node 0 may only be shadowed by a system/message replacing exactly it."""
    head = surface.head()
    if head is None or event_at(head).get("type") != "system/message":
        return
    if event.get("type") != "system/message" or end_idx != 0:
        raise _Rejected(
            "system-head",
            f"surface node 0 (seq {head}) is a system/message; only a system/message replacing exactly it may shadow it",
        )


def _json_equal(a: Any, b: Any) -> bool:
    """Deep equality over JSON values (unlike ==, True is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _tool_delta(event: Event) -> int:
    """How a surface node moves the count of tool calls awaiting a result."""
    etype = event.get("type")
    if etype == "tool/result":
        return -1
    if etype != "assistant/message":
        return 0
    data = event.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return 0
    return sum(1 for block in content if isinstance(block, dict) and block.get("type") == "tool-call")


def _calls_of(message: dict[str, Any]) -> list[Any]:
    """The ids of a message's tool calls, as found (a damaged log may hold a non-string one)."""
    content = message.get("content")
    return [b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool-call"] \
        if isinstance(content, list) else []


def pairing_problems(dialect: Dialect, events: Iterable[Event]) -> set[tuple[str, Any, int]]:
    """What the provider would be sent wrong, over surface events in model order.

    ("unanswered", call id, seq of the calling assistant): a tool call with no result before
    the next assistant message (or the end); ("orphan", call id, seq of the result): a
    result with no open call before it. Pure.
    """
    problems: set[tuple[str, Any, int]] = set()
    open_calls: dict[Any, int] = {}
    for event in events:
        message = project_message(dialect, event)
        if message is None:
            continue
        etype = event.get("type")
        if etype == "assistant/message":
            problems.update(("unanswered", call, seq) for call, seq in open_calls.items())
            open_calls = {call: event["seq"] for call in _calls_of(message)}
        elif etype == "tool/result":
            source = message.get("source")
            call = source.get("callId") if isinstance(source, dict) else None
            if call in open_calls:
                del open_calls[call]
            else:
                problems.add(("orphan", call, event["seq"]))
    problems.update(("unanswered", call, seq) for call, seq in open_calls.items())
    return problems


def project_message(dialect: Dialect, event: Event) -> dict[str, Any] | None:
    """The message an event contributes to the model request (host deriveEventMessage), or None."""
    etype = event.get("type")
    data = event.get("data")
    if etype == "user/message":
        return data if isinstance(data, dict) else None
    if etype not in dialect.surface_event_types:
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, dict):
        return None
    if etype == "tool/result":
        return message
    # assistant (and v02 system/developer) messages with no content only carry usage
    return None if message.get("content") == [] else message


# -- the log -----------------------------------------------------------------------------------


class SessionLog:
    """One session's event log with its folded surface and tool-pairing balance."""

    def __init__(self, dialect: Dialect, events: Iterable[Event] = ()) -> None:
        self.dialect = dialect
        #: every event by seq; those the log reads rarely are kept compact (`host.event_store`)
        self.events = EventStore()
        self.replace_generation = 0
        #: every reload-only problem seen while folding (the log would not load again)
        self.reload_problems: list[str] = []
        self._surface = _SurfaceState()
        self._open: list[int] = []  # open tool calls after each surface node
        self._unmatched: int | None = None  # first surface index whose tool/result has no call
        #: v02 reload-time turn/step/tool/compaction relationships (None: not checked)
        self._life: Lifecycle | None = Lifecycle() if dialect.lifecycle_checked else None
        #: per-turn facts kept as the log grows (host.turn_index): no reader rescans the log
        self.index = TurnIndex(dialect, self._surface.index, self.events.__getitem__)
        self._prices: dict[int, int | None] = {}
        self.extend(events)

    # -- reading ---------------------------------------------------------------------------
    @property
    def nodes(self) -> list[int]:
        """Current surface seqs in model order. Live list: do not mutate."""
        return self._surface.nodes

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        return f"SessionLog({self.dialect.name}, events={len(self.events)}, nodes={len(self.nodes)})"

    def on_surface(self, seq: int) -> bool:
        return self._surface.index(seq) is not None

    def index_of(self, seq: int) -> int:
        """Position of `seq` on the current surface."""
        found = self._surface.index(seq)
        if found is None:
            raise SurfaceError("surface-membership", f"seq {seq} is not on the current surface", seq=seq)
        return found

    def message_of(self, seq: int) -> dict[str, Any] | None:
        """The message event `seq` projects to (host deriveEventMessage). IndexError outside the log."""
        if not (is_seq(seq) and seq < len(self.events)):
            raise IndexError(f"seq {seq} is not in the log (length {len(self.events)})")
        return project_message(self.dialect, self.events[seq])

    def price(self, seq: int) -> int | None:
        """The token-meter heuristic's price of the message `seq` projects to (None: none).
        Events never change, so each is priced once."""
        try:
            return self._prices[seq]
        except KeyError:
            message = self.message_of(seq)
            price = self._prices[seq] = estimate_message(message) if message is not None else None
            return price

    def tokens(self, seqs: Iterable[int] | None = None) -> int:
        """The token-meter heuristic's price of these nodes (default: the whole surface): the
        one place a set of nodes is priced."""
        price = self.price
        return sum(price(seq) or 0 for seq in (self.nodes if seqs is None else seqs))

    def surface_messages(self) -> list[dict[str, Any]]:
        """The derived model history: the projection of every surface node, in order."""
        return [m for m in map(self.message_of, self.nodes) if m is not None]

    def balanced_before(self, seq: int) -> bool:
        """Whether no tool call is left unanswered across the cut just before surface node `seq`."""
        index = self._balance_index(seq)
        return index == 0 or self._open[index - 1] == 0

    def balanced_after(self, seq: int) -> bool:
        """Whether no tool call is left unanswered across the cut just after surface node `seq`."""
        return self._open[self._balance_index(seq)] == 0

    def _balance_index(self, seq: int) -> int:
        index = self._surface.index(seq)
        if index is None:
            raise SurfaceError("tool-pairing", f"tool-pairing balance: surface seq {seq} not found", seq=seq)
        if self._unmatched is not None:  # like the host, a corrupt surface poisons every query
            bad = self.nodes[self._unmatched]
            raise SurfaceError("tool-pairing", f"tool/result at surface seq {bad} has no matching tool-call", seq=bad)
        return index

    # -- validating a plan -----------------------------------------------------------------
    def check_plan(self, events: Sequence[Event], *, model: bool = True) -> None:
        """Validate a batch as if appended now, in order, and as if the log were then reloaded.

        Seqs must already be assigned, consecutive from `len(self)`; `time` may be omitted
        (the host stamps it). With `model` (the default; off only to emulate the host, which
        does not check it), also refused: a batch that leaves the model a tool call without its
        result or a result without its call where there was none before. Raises SurfaceError
        naming the first offending event and rule. The log is never modified.
        """
        base = len(self.events)
        scratch = _Scratch(self._surface)
        life = self._life.copy() if self._life is not None else None
        accepted: list[Event] = []

        def event_at(seq: int) -> Event:
            return self.events[seq] if seq < base else accepted[seq - base]

        for index, event in enumerate(events):
            seq = base + index
            etype = event.get("type") if isinstance(event, dict) else None

            # defaults pin this event's position, not whatever the loop's variables hold later
            def fail(v: Violation, seq: int = seq, index: int = index, etype: Any = etype) -> SurfaceError:
                return SurfaceError(v.rule, v.detail, seq=seq, index=index, event_type=etype)

            if not isinstance(event, dict):
                raise fail(Violation("envelope", "event is not an object"))
            if "ignorable" in event:  # session.append copies only type/data/surface metadata
                raise fail(Violation("ignorable", "session.append cannot write the ignorable marker"))
            for check in (json_violation(event), envelope_violation(event, time_optional=True)):
                if check is not None:
                    raise fail(check)
            if event["seq"] != seq:
                raise fail(Violation("seq", f"seq {event['seq']} is not contiguous; expected {seq}"))
            for append_time in self._append_time_violations(event):
                raise fail(append_time)
            length_before = len(scratch)
            try:
                transition = _plan(self.dialect, event, scratch, event_at)
            except _Rejected as rejected:
                raise fail(rejected.violation) from None
            reload = reload_violations(self.dialect, event, time_optional=True)
            if reload:
                raise fail(reload[0])
            accepted.append(event)
            if transition is not None:
                scratch.apply(transition)
            if life is not None:
                found = life.accept(event, scratch, self.dialect.known_event_types.__contains__,
                                    _life_transition(transition, length_before))
                if found is not None:
                    raise fail(found)
        if model:
            self._check_pairing(scratch, event_at, len(events))

    def _append_time_violations(self, event: Event) -> list[Violation]:
        found = [legacy_header_violation(event)]
        if self.dialect.event_data_checked_on_append:
            found.append(event_data_violation(event))
        return [v for v in found if v is not None]

    def _check_pairing(self, scratch: "_Scratch", event_at: Callable[[int], Event], count: int) -> None:
        """The provider's view after the batch: no tool call it did not already have unanswered,
        no result without its call. Scans only from the last balanced cut before the first
        node the batch changed, so a small plan costs O(its tail), not O(surface)."""
        first = scratch.first_changed
        if first >= len(scratch) and first >= len(self.nodes):
            return  # the batch changed no surface node
        start = 0 if self._unmatched is not None and self._unmatched < first else min(first, len(self.nodes))
        while start > 0 and self._open[start - 1] != 0:
            start -= 1
        before = pairing_problems(self.dialect, (self.events[s] for s in self.nodes[start:]))
        after = pairing_problems(self.dialect, (event_at(s) for s in scratch.nodes_from(start)))
        new = sorted(after - before, key=lambda p: p[2])
        if new:
            kind, call, seq = new[0]
            base = len(self.events)
            index = seq - base if seq >= base else None
            what = (f"tool call {call} (assistant seq {seq}) would reach the model without its result"
                    if kind == "unanswered" else f"tool result seq {seq} answers no open tool call ({call})")
            rule = "model-unanswered-call" if kind == "unanswered" else "model-orphan-result"
            etype = event_at(seq).get("type") if seq < base + count else None
            raise SurfaceError(rule, what + " after this batch", seq=seq, index=index, event_type=etype)

    # -- mirroring committed events --------------------------------------------------------
    def append(self, event: Event) -> list[str]:
        """Fold an event the host already committed.

        Raises SurfaceError if the host could not have accepted it (the mirror is out of
        sync). Returns reload-only problems: each means this session would not load again.
        """
        seq = len(self.events)
        etype = event.get("type") if isinstance(event, dict) else None

        def fail(v: Violation) -> SurfaceError:
            return SurfaceError(v.rule, v.detail, seq=seq, event_type=etype)

        if not isinstance(event, dict):
            raise fail(Violation("envelope", "event is not an object"))
        if not is_seq(event.get("seq")) or event["seq"] != seq:
            raise fail(Violation("seq", f"seq {event.get('seq')!r} is not contiguous; expected {seq}"))
        if "data" not in event:  # undefined data is not JSON: the host's append throws
            raise fail(Violation("json", "event data is missing"))
        # no lossless-JSON walk here: a committed event reached us as JSON, and the walk
        # would dominate the cost of folding a long log
        for append_time in self._append_time_violations(event):
            raise fail(append_time)
        length_before = len(self._surface.nodes)
        try:
            transition = _plan(self.dialect, event, self._surface, self.events.__getitem__)
        except _Rejected as rejected:
            raise fail(rejected.violation) from None
        found = reload_violations(self.dialect, event)
        self.events.append(event)
        self._commit(transition)
        self.index.feed(event, transition.shadowed if transition is not None else ())
        if self._life is not None:
            life = self._life.accept(event, self._surface, self.dialect.known_event_types.__contains__,
                                     _life_transition(transition, length_before))
            if life is not None:
                found.append(life)
        # folded: what is not on the surface now is read rarely from here on (and a shadowed
        # node never returns to it), so it is kept compact
        if transition is None:
            if etype not in _KEPT_WHOLE:
                self.events.compact(seq)
        else:
            for shadowed in transition.shadowed:
                self.events.compact(shadowed)
        problems = [f"seq {seq} ({etype}): {v.detail} [rule: {v.rule}]; this session would not reload" for v in found]
        self.reload_problems.extend(problems)
        return problems

    def extend(self, events: Iterable[Event]) -> list[str]:
        problems: list[str] = []
        for event in events:
            problems.extend(self.append(event))
        return problems

    def _commit(self, t: _Transition | None) -> None:
        if t is None:
            return
        self._surface.apply(t)
        if t.kind == "append":
            self._push_balance(self.events[t.seq])
            return
        self.replace_generation += 1
        del self._open[t.start_idx :]
        if self._unmatched is not None and self._unmatched >= t.start_idx:
            self._unmatched = None
        for seq in self.nodes[t.start_idx :]:
            self._push_balance(self.events[seq])

    def _push_balance(self, event: Event) -> None:
        count = (self._open[-1] if self._open else 0) + _tool_delta(event)
        self._open.append(count)
        if count < 0 and self._unmatched is None:
            self._unmatched = len(self._open) - 1


def _life_transition(t: _Transition | None, length_before: int) -> tuple[str, tuple[int, ...], int] | None:
    return None if t is None else (t.kind, t.shadowed, length_before)
