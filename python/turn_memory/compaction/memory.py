"""SessionMemoryEditor: the host-owned working checkpoint of one session compaction
(docs/decisions.md#large-compactions-go-segment-by-segment).

The checkpoint starts as one placeholder per segment. Workers process segments in order;
each replaces its segment's placeholder (possibly together with neighbouring memory nodes,
so later findings can resolve earlier ones) with ordered user/assistant memory nodes.
Every accepted mutation bumps the revision; a mutation names the revision it was planned
on, so a stale view fails clearly instead of overwriting newer work. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

Role = Literal["user", "assistant"]


class MemoryEditError(ValueError):
    """A worker call that cannot be applied; the working checkpoint is unchanged."""


@dataclass(frozen=True)
class MemoryNode:
    id: str
    role: Role
    text: str
    #: segment indexes this node's content derives from
    segments: frozenset[int]
    #: set on a placeholder: the segment it stands for until a worker replaces it
    placeholder: int | None = None


class SessionMemoryEditor:
    def __init__(self, segment_count: int):
        self.nodes: list[MemoryNode] = [
            MemoryNode(f"P{i}", "user", f"[segment S{i}: not processed yet]", frozenset({i}), placeholder=i)
            for i in range(1, segment_count + 1)
        ]
        self.revision = 0
        self._next = 1
        self._replaced_by: dict[str, str] = {}

    def index_of(self, node_id: str) -> int:
        for i, node in enumerate(self.nodes):
            if node.id == node_id:
                return i
        if node_id in self._replaced_by:
            raise MemoryEditError(f"{node_id} no longer exists (replaced by {self._replaced_by[node_id]}); "
                               "read_session_memory lists the current ids")
        raise MemoryEditError(f"unknown memory node id {node_id!r}")

    def resolve(self, start: str, end: str | None) -> tuple[int, int]:
        i = self.index_of(start)
        j = self.index_of(end) if end is not None else i
        if j < i:
            raise MemoryEditError(f"range {start}..{end} runs backwards")
        return i, j

    def placeholder_of(self, segment: int) -> MemoryNode | None:
        return next((n for n in self.nodes if n.placeholder == segment), None)

    def replace(self, segment: int, expected_revision: int, start: str, end: str | None,
                outputs: Sequence[tuple[Role, str]]) -> list[str]:
        """Replace a contiguous range while working on `segment`; returns the new ids."""
        if expected_revision != self.revision:
            raise MemoryEditError(f"expected_revision {expected_revision} is stale: the working checkpoint is at revision "
                               f"{self.revision}; re-read it and plan against the current ids")
        if not outputs:
            raise MemoryEditError("nodes must contain at least one node")
        for k, (role, text) in enumerate(outputs):
            if role not in ("user", "assistant"):
                raise MemoryEditError(f"nodes[{k}].role must be 'user' or 'assistant'")
            if not text.strip():
                raise MemoryEditError(f"nodes[{k}] has empty content")
        i, j = self.resolve(start, end)
        selected = self.nodes[i:j + 1]
        foreign = [n.id for n in selected if n.placeholder is not None and n.placeholder != segment]
        if foreign:
            raise MemoryEditError(f"{', '.join(foreign)} stand for segments not processed yet; they cannot be rewritten now")
        own = self.placeholder_of(segment)
        if own is not None and own not in selected:
            raise MemoryEditError(f"your segment S{segment} is still its placeholder {own.id}: the range must include it")
        if own is None and not any(segment in n.segments for n in selected):
            raise MemoryEditError(f"the range must include memory derived from your segment S{segment}")
        provenance = frozenset({segment}).union(*(n.segments for n in selected))
        new = [MemoryNode(f"M{self._next + k}", role, text, provenance) for k, (role, text) in enumerate(outputs)]
        self._next += len(new)
        for node in selected:
            self._replaced_by[node.id] = ", ".join(n.id for n in new)
        self.nodes[i:j + 1] = new
        self.revision += 1
        return [n.id for n in new]

    def shape(self) -> tuple[tuple[object, ...], ...]:
        """The working checkpoint as content, not ids: a mutation that restates the same nodes
        under new ids leaves the shape as it was."""
        return tuple((n.role, n.text, n.segments, n.placeholder) for n in self.nodes)

    def segment_done(self, segment: int) -> bool:
        return self.placeholder_of(segment) is None

    @property
    def complete(self) -> bool:
        return all(n.placeholder is None for n in self.nodes)

    def neighbourhood(self, ids: Sequence[str], radius: int = 1) -> list[MemoryNode]:
        at = [self.index_of(i) for i in ids]
        lo, hi = max(0, min(at) - radius), min(len(self.nodes), max(at) + radius + 1)
        return self.nodes[lo:hi]
