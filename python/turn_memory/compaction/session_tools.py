"""The six session-compaction worker tools over a SessionMemoryEditor
(docs/decisions.md#large-compactions-go-segment-by-segment). Pure.

Two-level catalogs keep each answer small on a 1M-token session: the segment list, then the
assigned segment's source nodes (`S2.1`, `S2.2`…); the working checkpoint is read in pages
and searched. Every invalid call returns a clear ToolError and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from pydantic import Field

from turn_memory.compaction.memory import MemoryEditError, MemoryNode, SessionMemoryEditor
from turn_memory.compaction.segments import Segment
from turn_memory.host.images import image_problems
from turn_memory.host.paging import text_page
from turn_memory.host.tools import RangeArgs, ToolArgs, ToolError, parse_call, preview, tool_schema

FINISH = "finish_session_segment"
TOOL_NAMES = ("list_session_segments", "read_session_source", "read_session_memory", "search_session_memory",
              "replace_session_memory", FINISH)


class ListArgs(ToolArgs):
    pass


class ReadSourceArgs(RangeArgs):  # no selection: the segment's catalog
    segment: str | None = None


class ReadMemoryArgs(RangeArgs):  # no selection: the working checkpoint's catalog
    pass


class SearchArgs(ToolArgs):
    query: str = Field(min_length=1)
    limit: int = Field(10, ge=1, le=50)


class NodeArg(ToolArgs):
    role: Literal["user", "assistant"]
    content: str


class ReplaceArgs(ToolArgs):
    expected_revision: int
    from_: str = Field(alias="from")
    to: str | None = None
    nodes: list[NodeArg] = Field(min_length=1)


class FinishArgs(ToolArgs):
    pass


#: each tool's argument model: its JSON schema is generated from it
ARGS: dict[str, type[ToolArgs]] = {
    "list_session_segments": ListArgs, "read_session_source": ReadSourceArgs, "read_session_memory": ReadMemoryArgs,
    "search_session_memory": SearchArgs, "replace_session_memory": ReplaceArgs, FINISH: FinishArgs}


def tool_specs(descriptions: Mapping[str, str]) -> list[dict[str, Any]]:
    """Name, description (`prompts/session-worker-tools.md`'s sections) and JSON schema of each tool."""
    return [{"name": n, "description": descriptions[n].strip(), "parameters": tool_schema(ARGS[n])} for n in TOOL_NAMES]


@dataclass
class SourceNode:
    id: str
    role: str
    text: str
    #: canonical image markers in this node (each must survive)
    images: tuple[str, ...] = ()
    #: a user node's kind, from its source: "human", "host-context", "checkpoint" or "compressed-turn"
    #: ("" otherwise)
    kind: str = ""
    #: the session turn the node belongs to (None: a checkpoint's or the session's preamble)
    turn: int | None = None


def source_label(node: SourceNode) -> str:
    # the turn number is what `read_session_history` takes: a line per turn can point back to it
    turn = f" · turn {node.turn}" if node.turn is not None else ""
    return f"{node.id}{turn} · {node.role}" + (f" · {node.kind}" if node.kind else "")


def source_heading(node: SourceNode) -> str:
    """The line above a source node's full text (reads, a spawn's task)."""
    return f"### {source_label(node)}"


@dataclass
class SessionTools:
    editor: SessionMemoryEditor
    segments: list[Segment]
    #: per segment index: its source nodes, in order
    sources: dict[int, list[SourceNode]]
    assigned: int
    read_limit_chars: int = 24000
    finished: set[int] = field(default_factory=set)
    #: per segment: its catalog line around the status (sources never change during a job)
    _catalog_lines: dict[int, tuple[str, str]] = field(default_factory=dict, repr=False)

    def call(self, name: str, args: Any) -> str:
        parsed = parse_call(ARGS, name, args)  # an invalid call leaves the editor unchanged
        if name == "list_session_segments":
            return self.segment_catalog()
        if name == "read_session_source":
            return self._read_source(parsed)
        if name == "read_session_memory":
            return self._read_memory(parsed)
        if name == "search_session_memory":
            return self._search(parsed)
        if name == "replace_session_memory":
            return self._replace(parsed)
        if name == FINISH:
            if not self.editor.segment_done(self.assigned):
                raise ToolError(f"segment S{self.assigned} is not covered yet: replace its placeholder "
                                f"P{self.assigned} with memory nodes first")
            problems = image_problems(self.segment_images(self.assigned), [n.text for n in self.editor.nodes],
                                      [n.text for n in self.editor.nodes if n.placeholder is None],
                                      allowed=self.segment_images())
            if problems:
                raise ToolError("cannot finish yet:\n- " + "\n- ".join(problems))
            longer = self._not_folded()
            if longer:
                raise ToolError(longer)
            self.finished.add(self.assigned)
            return f"Segment S{self.assigned} accepted. Your work is done."
        raise ToolError(f"unknown tool {name}")

    def _not_folded(self) -> str | None:
        """Why the checkpoint written so far does not fold its sources (None when it does): a
        checkpoint no shorter than what it replaces would be refused at commit (issue 29)."""
        written = sum(len(n.text) for n in self.editor.nodes if n.placeholder is None)
        done = [i for i in self.sources if self.editor.segment_done(i)]
        sources = sum(len(n.text) for i in done for n in self.sources[i])
        if written < sources:
            return None
        return (f"cannot finish yet: the checkpoint so far is {written:,} characters, not shorter than the "
                f"{sources:,} characters of the sources it replaces. Fold it: keep the facts a later step needs "
                f"and drop what later turns superseded or repeated, then finish again")

    def segment_images(self, segment: int | None = None) -> list[str]:
        """Image markers of one segment's sources (all segments when None)."""
        picked = [self.sources[segment]] if segment is not None else list(self.sources.values())
        return list(dict.fromkeys(m for nodes in picked for n in nodes for m in n.images))

    # -- catalogs ----------------------------------------------------------------------
    def segment_catalog(self) -> str:
        # every worker reads this (prompt + list call): keep it O(segments + memory nodes), not
        # O(segments x memory nodes) with previews recomputed on each call
        lines = [f"{len(self.segments)} segments; working checkpoint at revision {self.editor.revision}; "
                 f"you are assigned S{self.assigned}."]
        unprocessed = {n.placeholder for n in self.editor.nodes if n.placeholder is not None}
        for seg in self.segments:
            status = ("done" if seg.index not in unprocessed else
                      "assigned to you" if seg.index == self.assigned else "pending")
            head, edges = self._catalog_line(seg)
            lines.append(f"{head} · {status} · {edges}")
        return "\n".join(lines)

    def _catalog_line(self, seg: Segment) -> tuple[str, str]:
        parts = self._catalog_lines.get(seg.index)
        if parts is None:
            nodes = self.sources[seg.index]
            turns = f"turns {seg.turns[0]}-{seg.turns[-1]}" if seg.turns else "no complete turn"
            parts = self._catalog_lines[seg.index] = (
                f"- {seg.id} · {turns} · {len(nodes)} nodes · ~{seg.tokens} tokens",
                f"first: {preview(nodes[0].text, 60)} · last: {preview(nodes[-1].text, 60)}")
        return parts

    def source_catalog(self, segment: int) -> str:
        return "\n".join(f"- {source_label(n)} · {preview(n.text)}" for n in self.sources[segment])

    def memory_catalog(self, nodes: list[MemoryNode] | None = None) -> str:
        nodes = self.editor.nodes if nodes is None else nodes
        lines = [f"Working checkpoint, revision {self.editor.revision}:"]
        for n in nodes:
            prov = ",".join(f"S{s}" for s in sorted(n.segments))
            lines.append(f"- {n.id} · {n.role} · from {prov}{' · placeholder' if n.placeholder else ''} · {preview(n.text)}")
        return "\n".join(lines)

    # -- reads -------------------------------------------------------------------------
    def _page(self, body: str, offset: int) -> str:
        page = text_page(body, offset, self.read_limit_chars)
        if page.more:
            return f"{page.text}\n\n[truncated at character {page.end} of {page.total}; repeat the call with offset={page.end}]"
        return page.text

    def _segment_index(self, name: str | None) -> int:
        if name is None:
            return self.assigned
        try:
            index = int(name.lstrip("Ss"))
        except ValueError:
            raise ToolError(f"unknown segment {name!r}") from None
        if index not in self.sources:
            raise ToolError(f"unknown segment {name!r}; segments are S1..S{len(self.segments)}")
        return index

    def _read_source(self, args: ReadSourceArgs) -> str:
        nodes = self.sources[self._segment_index(args.segment)]
        ids = [n.id for n in nodes]
        if args.ids is not None:
            unknown = [i for i in args.ids if i not in ids]
            if unknown:
                raise ToolError(f"unknown source ids {unknown}; this segment has {ids[0]}..{ids[-1]}")
            picked = [n for n in nodes if n.id in set(args.ids)]
        elif args.from_ is not None:
            if args.from_ not in ids or (args.to is not None and args.to not in ids):
                raise ToolError(f"unknown range; this segment has {ids[0]}..{ids[-1]}")
            i, j = ids.index(args.from_), ids.index(args.to or args.from_)
            if j < i:
                raise ToolError("range runs backwards")
            picked = nodes[i:j + 1]
        else:
            picked = nodes
        return self._page("\n\n".join(f"{source_heading(n)}\n{n.text}" for n in picked), args.offset)

    def _read_memory(self, args: ReadMemoryArgs) -> str:
        try:
            if args.ids is not None:
                picked = [self.editor.nodes[self.editor.index_of(i)] for i in dict.fromkeys(args.ids)]
            elif args.from_ is not None:
                i, j = self.editor.resolve(args.from_, args.to)
                picked = self.editor.nodes[i:j + 1]
            else:  # no selection: the paged catalog
                return self._page(self.memory_catalog(), args.offset)
        except MemoryEditError as exc:
            raise ToolError(str(exc)) from None
        return self._page("\n\n".join(f"### {n.id} · {n.role}\n{n.text}" for n in picked), args.offset)

    def _search(self, args: SearchArgs) -> str:
        terms = args.query.lower().split()
        hits = [n for n in self.editor.nodes if n.placeholder is None and all(t in n.text.lower() for t in terms)]
        if not hits:
            return f"No memory node contains all of: {', '.join(terms)}."
        out = []
        for n in hits[: args.limit]:
            at = n.text.lower().find(terms[0])
            out.append(f"- {n.id} · {n.role} · …{preview(n.text[max(0, at - 60): at + 160], 220)}")
        more = f"\n({len(hits) - args.limit} more)" if len(hits) > args.limit else ""
        return "\n".join(out) + more

    def _replace(self, args: ReplaceArgs) -> str:
        try:
            new_ids = self.editor.replace(self.assigned, args.expected_revision, args.from_, args.to,
                                          [(n.role, n.content) for n in args.nodes])
        except MemoryEditError as exc:
            raise ToolError(str(exc)) from None
        return (f"Accepted at revision {self.editor.revision}: created {', '.join(new_ids)}.\n"
                + self.memory_catalog(self.editor.neighbourhood(new_ids)))
