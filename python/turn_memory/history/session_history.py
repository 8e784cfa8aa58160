"""`read_session_history` (docs/decisions.md#the-original-turns-can-be-read-back): the caller's own original
turns, read back from the
append-only log after turn-memory has compressed them.

Three forms: a paged catalog of completed turns (sizes, whether turn-memory landed), one
turn's original user / assistant / tool-result nodes in block order with reasoning shown
(capped at `sessionHistory.maxReadChars`, continued by `offset`), and a search of the raw
turns. Only appended nodes count: replacements (landings, markers, checkpoints) are what
turn-memory wrote, not what happened; host runtime-context snapshots are scaffolding.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from pydantic import Field

from turn_memory.bridge.protocol import ToolResult
from turn_memory.host.blocks import render_blocks
from turn_memory.host.dialect import is_runtime_context, producer_of
from turn_memory.host.markers import marker_of
from turn_memory.host.paging import list_page, text_page
from turn_memory.host.tools import ToolArgs, ToolError, parse_args, preview, tool_schema
from turn_memory.host.turn_index import LANDING_STEP
from turn_memory.runtime.public_tools import PublicCall, PublicTool

NAME = "read_session_history"
SURFACE = ("user/message", "assistant/message", "tool/result")
CATALOG_PAGE = 20
SEARCH_PAGE = 10
SNIPPETS_PER_TURN = 3
SNIPPET_RADIUS = 90


class Args(ToolArgs):
    turn: int | None = Field(None, ge=1, description="Turn number to read in full (from the catalog).")
    offset: int = Field(0, ge=0, description="Character offset to continue a long turn from.")
    query: str | None = Field(None, description="Words to search for in the original turns.")
    page: int = Field(1, ge=1, description="Page of the catalog or of the search results (from 1).")


PARAMETERS = tool_schema(Args)


@dataclass
class Node:
    seq: int
    label: str
    text: str


@dataclass
class TurnRecord:
    turn: int
    start: int
    end: int | None = None
    nodes: list[Node] = field(default_factory=list)
    text_chars: int = 0
    reasoning_chars: int = 0
    tool_calls: int = 0
    state: str = "not compressed"

    @property
    def first_user(self) -> str:
        return next((n.text for n in self.nodes if n.label == "user"), "")


def _label(event: dict[str, Any], message: dict[str, Any]) -> str | None:
    kind = event["type"]
    if kind == "assistant/message":
        return "assistant"
    if kind == "tool/result":
        return "tool result"
    source = message.get("source") or {}
    if is_runtime_context(source):
        return None  # runtime-context snapshot: host scaffolding, not conversation
    producer = producer_of(source)
    if producer is not None and source.get("kind") != "user":
        return f"user (from plugin {producer}, not a human message)"
    return "user"


def collect_turns(events: Sequence[dict[str, Any]]) -> dict[int, TurnRecord]:
    """Every turn of the log with its original appended nodes, in log order."""
    turns: dict[int, TurnRecord] = {}
    current: TurnRecord | None = None
    step = None
    for event in events:
        kind = event["type"]
        data = event.get("data") or {}
        if kind == "turn/start":
            current = turns.setdefault(data["turn"], TurnRecord(data["turn"], event["seq"]))
            step = None
        elif kind == "turn/end":
            if data.get("turn") in turns:
                turns[data["turn"]].end = event["seq"]
            current = None
        elif kind == "step/start":
            step = data.get("step")
        elif (mark := marker_of(event)) is not None:
            if mark[1] in turns:
                landed = turns[mark[1]].state == "landed"
                turns[mark[1]].state = "landed" if landed or mark[0] == "compression" else "pending"
        elif kind in SURFACE and event.get("surfaceOp") == "append" and current is not None and step != LANDING_STEP:
            message = data if kind == "user/message" else data.get("message") or {}
            label = _label(event, message)
            if label is None:
                continue
            blocks = message.get("content") or []
            text, _, _ = render_blocks(blocks)
            for block in blocks:
                if block.get("type") == "reasoning":
                    current.reasoning_chars += len(block.get("text", ""))
                elif block.get("type") == "text":
                    current.text_chars += len(block.get("text", ""))
                elif block.get("type") == "tool-call":
                    current.tool_calls += 1
            current.nodes.append(Node(event["seq"], label, text))
    return turns


def render_turn(record: TurnRecord) -> str:
    return "\n\n".join(f"### {node.label}\n{node.text}" for node in record.nodes)


def _completed(turns: dict[int, TurnRecord]) -> list[TurnRecord]:
    return sorted((t for t in turns.values() if t.end is not None), key=lambda t: t.turn, reverse=True)


def catalog(turns: dict[int, TurnRecord], page: int) -> str:
    done = _completed(turns)
    if not done:
        return "This session has no completed turn yet."
    shown = list_page(done, page, CATALOG_PAGE, "the catalog has")
    lines = [f"Completed turns of this session, newest first (page {page} of {shown.count}). "
             f"Read one in full with {NAME}({{\"turn\": N}}); search with {{\"query\": \"...\"}}."]
    for t in shown.items:
        lines.append(f"- turn {t.turn}: {preview(t.first_user, 100)!r} · {len(t.nodes)} nodes · "
                     f"text {t.text_chars:,} chars · reasoning {t.reasoning_chars:,} chars · "
                     f"{t.tool_calls} tool calls · turn-memory: {t.state}")
    if shown.more:
        lines.append(f"Older turns: page {page + 1}.")
    return "\n".join(lines)


def read_turn(turns: dict[int, TurnRecord], number: int, offset: int, limit: int) -> str:
    record = turns.get(number)
    if record is None or record.end is None:
        done = sorted(t.turn for t in _completed(turns))
        known = f"completed turns: {_ranges(done)}" if done else "no turn has completed yet"
        why = "is still open (it is in your context as is)" if record is not None else "does not exist"
        raise ToolError(f"turn {number} {why}; {known}")
    text = render_turn(record)
    page = text_page(text, offset, limit, of=f"turn {number}")
    end = page.end
    head = (f"Turn {number}, original nodes from the session log ({len(record.nodes)} nodes, {len(text):,} characters; "
            f"turn-memory: {record.state}). Characters {offset:,}–{end:,}.")
    tail = (f"\n\n[{len(text) - end:,} more characters: call {NAME} with turn={number} and offset={end}]"
            if page.more else "\n\n[end of turn]")
    return f"{head}\n\n{page.text}{tail}"


def _terms(query: str) -> list[str]:
    return list(dict.fromkeys(t for t in query.lower().split() if t))


def _pattern(term: str) -> re.Pattern[str]:
    """A word, or the start of one: `pool` finds "pooled" but `48` does not find "1148ms"."""
    return re.compile(r"(?<![0-9a-z])" + re.escape(term))


@dataclass(frozen=True)
class Hit:
    record: TurnRecord
    #: which query words the turn holds
    words: tuple[str, ...]
    #: how often it holds them
    count: int
    score: float


def _idf(terms: list[str], done: list[TurnRecord], counts: dict[int, list[int]]) -> list[float]:
    """Each word's weight: how few of the turns hold it (BM25's inverse document frequency)."""
    holding = [sum(1 for c in counts.values() if c[i]) for i in range(len(terms))]
    return [math.log(1 + (len(done) - n + 0.5) / (n + 0.5)) for n in holding]


def search_hits(turns: dict[int, TurnRecord], query: str) -> list[Hit]:
    """What `search` lists, best first: the completed turns that hold every word of `query`;
    when none does, those that hold some of them, the most words first.

    Within each group a turn ranks by a tf-idf score: a word found in few turns counts more
    than one found in most (a word in every turn, like "a", counts next to nothing), and
    repeats count with diminishing weight, so a turn that holds a rare word ranks above a long
    log that repeats a common one.
    """
    terms = _terms(query)
    patterns = [_pattern(t) for t in terms]
    done = _completed(turns)
    counts: dict[int, list[int]] = {}
    for record in done:
        lower = render_turn(record).lower()
        counts[record.turn] = [len(p.findall(lower)) for p in patterns]
    idf = _idf(terms, done, counts)
    hits = []
    for record in done:
        found = counts[record.turn]
        if any(found):
            hits.append(Hit(record, tuple(t for t, n in zip(terms, found) if n), sum(found),
                            sum(w * (1 + math.log(n)) for w, n in zip(idf, found) if n)))
    full = [h for h in hits if len(h.words) == len(terms)]
    shown = full or hits
    shown.sort(key=lambda h: (-len(h.words), -h.score, -h.record.turn))
    weights = dict(zip(terms, idf))
    return [Hit(h.record, tuple(sorted(h.words, key=lambda w: -weights[w])), h.count, h.score) for h in shown]


def search(turns: dict[int, TurnRecord], query: str, page: int) -> str:
    terms = _terms(query)
    if not terms:
        raise ToolError("query is empty")
    hits = search_hits(turns, query)
    if not hits:
        return f"No completed turn of this session contains any of: {', '.join(terms)}."
    partial = len(hits[0].words) < len(terms)
    shown = list_page(hits, page, SEARCH_PAGE, "the results have")
    where = f"page {page} of {shown.count}"
    head = (f"No completed turn of this session contains all of: {', '.join(terms)}; {len(hits)} contain some of "
            f"them ({where}, most words first)" if partial else
            f"{len(hits)} completed turn(s) contain all of: {', '.join(terms)} ({where}, best first)")
    lines = [f"{head}. Read one in full with {NAME}({{\"turn\": N}})."]
    for hit in shown.items:
        text = render_turn(hit.record)
        words = f"; has {', '.join(sorted(hit.words, key=terms.index))}" if partial else ""
        lines.append(f"- turn {hit.record.turn} ({hit.count} hits{words}; turn-memory: {hit.record.state})")
        lines += [f"    …{s}…" for s in _snippets(text, text.lower(), hit.words)]
    return "\n".join(lines)


def _snippets(text: str, lower: str, terms: Sequence[str]) -> list[str]:
    """Up to SNIPPETS_PER_TURN windows of text, in text order, around the matches of the first
    words given first (`search_hits` lists a hit's words rarest first): where a distinctive
    word is, not where the first "a" happens to be."""
    windows: list[tuple[int, int]] = []
    for term in terms:
        for m in _pattern(term).finditer(lower):
            if len(windows) >= SNIPPETS_PER_TURN:
                break
            start, end = max(0, m.start() - SNIPPET_RADIUS), min(len(text), m.start() + SNIPPET_RADIUS)
            if not any(s <= m.start() < e for s, e in windows):
                windows.append((start, end))
    return [" ".join(text[start:end].split()) for start, end in sorted(windows)]


def _ranges(numbers: list[int]) -> str:
    spans: list[str] = []
    for n in numbers:
        if spans and spans[-1].split("–")[-1] == str(n - 1):
            spans[-1] = f"{spans[-1].split('–')[0]}–{n}"
        else:
            spans.append(str(n))
    return ", ".join(spans)


def handle(call: PublicCall) -> ToolResult:
    args = parse_args(Args, call.args)
    turns = collect_turns(call.session.log.events)
    if args.turn is not None:
        return ToolResult(read_turn(turns, args.turn, args.offset, call.config.sessionHistory.maxReadChars))
    if args.query is not None:
        return ToolResult(search(turns, args.query, args.page))
    return ToolResult(catalog(turns, args.page))


TOOL = PublicTool(NAME, PARAMETERS, handle, enabled=lambda config: config.sessionHistory.enabled)
