"""TurnNodeEditor: the host-owned working surface of one completed turn
(docs/decisions.md#workers-edit-a-working-copy).

The worker edits an in-memory copy; the session is untouched until the final surface is
validated and landed. Originals are `n1…nN`; every accepted replacement gets fresh ids
`r1…`, and replaced ids fail clearly afterwards. Each current node keeps two relations:

- semantic sources: the original events its content derives from (outputs of one joint
  replacement all inherit the range's union; they may overlap);
- landing slice: the original surface positions it will shadow when landed; the slices of
  the current nodes always partition the turn's positions in order, without gaps.

A node's capacity is the size of its slice: a replacement of a range may produce at most
as many nodes as the range has positions (M ≤ N).

With `keep_assistants` (a 0.2 host, where an assistant/message can only be appended at the
session's end) assistant nodes are fixed: a replacement covers user nodes only (becoming
user nodes) or one tool result (its content), so the turn lands where it stands, node by
node, whatever the surface holds after it
(docs/decisions.md#on-02-a-turn-keeps-its-assistant-nodes-and-lands-in-place).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from turn_memory.host.images import image_problems
from turn_memory.host.tokens import estimate_message
from turn_memory.turns.nodes import OriginalNode, Role


class EditError(ValueError):
    """A worker call that cannot be applied; the editor is unchanged."""


#: the roles a dumped node may carry, as `Role` values
_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "tool": "tool"}


@dataclass(frozen=True)
class WorkingNode:
    id: str
    role: Role
    text: str
    #: the original node kept verbatim, or None for an accepted replacement
    original: OriginalNode | None
    sources: tuple[int, ...]
    #: [first, last] original positions this node lands on
    slice: tuple[int, int]
    #: for a tool node: the call it answers (kept through a content rewrite)
    result_for: str | None = None

    @property
    def changed(self) -> bool:
        return self.original is None

    @property
    def capacity(self) -> int:
        return self.slice[1] - self.slice[0] + 1


@dataclass(frozen=True)
class Output:
    role: Role
    text: str


def split_positions(first: int, last: int, parts: int) -> list[tuple[int, int]]:
    """Deterministic contiguous split of positions [first, last] into `parts` non-empty slices.

    Earlier outputs get the extra positions: the leading user/assistant usually stands for
    the bulk of what it replaces, and the last output keeps the turn's closing position.
    """
    total = last - first + 1
    base, extra = divmod(total, parts)
    slices, at = [], first
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        slices.append((at, at + size - 1))
        at += size
    return slices


class TurnNodeEditor:
    def __init__(self, turn: int, originals: Sequence[OriginalNode], id_prefix: str = "", *,
                 keep_assistants: bool = False):
        if not originals:
            raise ValueError("a turn with no surface nodes cannot be edited")
        self.turn = turn
        self.originals = list(originals)
        #: assistant nodes stay verbatim (see the module docstring)
        self.keep_assistants = keep_assistants
        #: prepended to every id (`t4.n1`) when one worker edits several turns at once
        self.id_prefix = id_prefix
        self.nodes: list[WorkingNode] = [
            WorkingNode(f"{id_prefix}n{o.index + 1}", o.role, o.text, o, o.sources, (o.index, o.index), o.result_for)
            for o in originals
        ]
        self._next_r = 1
        #: id -> the id that replaced it, so a stale id gets a useful error
        self._replaced_by: dict[str, str] = {}
        #: accepted replacements so far (what a fresh worker continues from)
        self.revision = 0

    # -- lookup ------------------------------------------------------------------------
    def index_of(self, node_id: str) -> int:
        for i, node in enumerate(self.nodes):
            if node.id == node_id:
                return i
        if node_id in self._replaced_by:
            raise EditError(f"{node_id} no longer exists: it was replaced by {self._replaced_by[node_id]}; "
                            "call list_turn_nodes for the current ids")
        raise EditError(f"unknown node id {node_id!r}; current ids: {', '.join(n.id for n in self.nodes)}")

    def resolve_range(self, start: str, end: str | None) -> tuple[int, int]:
        i = self.index_of(start)
        j = self.index_of(end) if end is not None else i
        if j < i:
            raise EditError(f"range {start}..{end} runs backwards: {end} comes before {start}")
        return i, j

    def get(self, node_id: str) -> WorkingNode:
        return self.nodes[self.index_of(node_id)]

    # -- editing -----------------------------------------------------------------------
    def replace(self, start: str, end: str | None, outputs: Sequence[Output]) -> list[str]:
        """Replace the contiguous current range start..end by `outputs`; returns the new ids."""
        i, j = self.resolve_range(start, end)
        selected = self.nodes[i:j + 1]
        first, last = selected[0].slice[0], selected[-1].slice[1]
        capacity = last - first + 1
        if not outputs:
            raise EditError("nodes must contain at least one node")
        if len(outputs) > capacity:
            raise EditError(f"{len(outputs)} nodes do not fit: {start}..{end or start} has capacity {capacity} "
                            f"(a range can become at most as many nodes as original positions it covers)")
        for k, out in enumerate(outputs):
            if not out.text.strip():
                raise EditError(f"nodes[{k}] has empty content")
        self._check_tool_outputs(selected, outputs)
        if self.keep_assistants:
            self._check_kept_assistants(selected, outputs)
        if i == 0 and outputs[0].role != "user":
            raise EditError("the turn must start with a user node: the first output replacing n1's position must be "
                            "role 'user'")
        if j == len(self.nodes) - 1 and outputs[-1].role != "assistant" and self._ends_with_assistant:
            raise EditError("the turn must end with an assistant node: the last output at the end of the turn must be "
                            "role 'assistant'")
        sources = tuple(sorted({s for node in selected for s in node.sources}))
        answers = selected[0].result_for if outputs[0].role == "tool" else None
        new_nodes = [
            WorkingNode(f"{self.id_prefix}r{self._next_r + k}", out.role, out.text, None, sources, sl, answers)
            for k, (out, sl) in enumerate(zip(outputs, split_positions(first, last, len(outputs))))
        ]
        candidate = self.nodes[:i] + new_nodes + self.nodes[j + 1:]
        problem = tool_pairing_problem(candidate)
        if problem:
            raise EditError(problem)
        self._next_r += len(outputs)
        for node in selected:
            self._replaced_by[node.id] = ", ".join(n.id for n in new_nodes)
        self.nodes = candidate
        self.revision += 1
        return [n.id for n in new_nodes]

    @staticmethod
    def _check_tool_outputs(selected: list[WorkingNode], outputs: Sequence[Output]) -> None:
        tools = [k for k, out in enumerate(outputs) if out.role == "tool"]
        if not tools:
            return
        target = selected[0]
        is_tool_node = target.role == "tool" and (target.original is None or target.original.kind == "tool-result")
        if len(selected) != 1 or len(outputs) != 1 or not is_tool_node:
            raise EditError("a 'tool' node is only valid as a one-to-one content rewrite of a single tool result: "
                            "select exactly one tool node and give exactly one node with role 'tool'; fold tool "
                            "traffic into an assistant node instead")

    @staticmethod
    def _check_kept_assistants(selected: list[WorkingNode], outputs: Sequence[Output]) -> None:
        fixed = [n.id for n in selected if n.role == "assistant"]
        if fixed:
            raise EditError(f"{', '.join(fixed)} {'is an assistant node' if len(fixed) == 1 else 'are assistant nodes'}"
                            ": on this host assistant nodes stay as they are (the turn lands where it stands); "
                            "select only user nodes, or one tool node, and rewrite those")
        if any(n.role == "tool" for n in selected):
            if len(selected) != 1 or len(outputs) != 1 or outputs[0].role != "tool":
                raise EditError("a tool node is rewritten on its own here: select exactly one tool node and give "
                                "exactly one node with role 'tool' (what mattered in its result)")
            return
        wrong = [k for k, out in enumerate(outputs) if out.role != "user"]
        if wrong:
            raise EditError(f"nodes[{wrong[0]}] has role '{outputs[wrong[0]].role}': user nodes can only become user "
                            "nodes here (assistant nodes stay as they are on this host)")

    @property
    def _ends_with_assistant(self) -> bool:
        """Whether the rewrite must end with an assistant node: always, unless the assistant nodes
        are kept and the turn itself ends with a tool result (a hand-off call's), which then stays last."""
        return not self.keep_assistants or self.originals[-1].role == "assistant"

    # -- validation --------------------------------------------------------------------
    def in_scope(self, scope: tuple[int, int] | None) -> list[WorkingNode]:
        """The current nodes that land within original positions `scope` (all when None)."""
        if scope is None:
            return list(self.nodes)
        return [n for n in self.nodes if scope[0] <= n.slice[0] and n.slice[1] <= scope[1]]

    def final_problems(self, scope: tuple[int, int] | None = None) -> list[str]:
        """Why the current working surface cannot land (empty when it can); with `scope`, only
        its part of the turn (original positions [first, last], cut between steps)."""
        problems: list[str] = []
        nodes = self.in_scope(scope)
        if not nodes:
            return ["a node of this part reaches outside it"]
        if nodes[0].slice[0] == 0 and nodes[0].role != "user":
            problems.append(f"the turn must start with a user node ({nodes[0].id} is {nodes[0].role})")
        if nodes[-1].slice[1] == len(self.originals) - 1 and nodes[-1].role != "assistant" and self._ends_with_assistant:
            problems.append(f"the turn must end with an assistant node ({nodes[-1].id} is {nodes[-1].role})")
        if problem := tool_pairing_problem(nodes):
            problems.append(problem)
        raw = [n.id for n in nodes if n.original is not None and n.original.has_reasoning]
        if raw and not self.keep_assistants:
            problems.append(f"{', '.join(raw)} still carry raw reasoning: rewrite them (keep what the reasoning "
                            "established as ordinary assistant text)")
        if self.keep_assistants:
            moved = [n.id for n in nodes if n.changed and any(
                self.originals[i].role == "assistant" for i in range(n.slice[0], n.slice[1] + 1))]
            if moved:
                problems.append(f"{', '.join(moved)} replace assistant nodes, which stay as they are on this host")
        grown = self._growth(nodes)
        if grown is not None:
            problems.append(f"the rewritten nodes are longer than what they replace (~{grown[0]} vs ~{grown[1]} "
                            "tokens): shorten them")
        problems += image_problems(self.image_markers(scope), [n.text for n in nodes], [n.text for n in nodes if n.changed])
        return problems

    def _growth(self, nodes: Sequence[WorkingNode]) -> tuple[int, int] | None:
        """(new, old) estimated tokens when the rewrite grew the turn: compression never does."""
        changed = [n for n in nodes if n.changed]
        new = sum(estimate_message({"content": [{"type": "text", "text": n.text}]}) for n in changed)
        old = sum(estimate_message(self.originals[i].message)
                  for n in changed for i in range(n.slice[0], n.slice[1] + 1))
        return (new, old) if new > old else None

    def image_markers(self, scope: tuple[int, int] | None = None) -> list[str]:
        """The turn's image markers (of its part `scope`), each of which must survive the rewrite."""
        originals = self.originals if scope is None else self.originals[scope[0]:scope[1] + 1]
        return list(dict.fromkeys(m for original in originals for m in original.images))

    @property
    def changed(self) -> bool:
        return any(n.changed for n in self.nodes)

    # -- what a job keeps ----------------------------------------------------------------
    def shape(self, scope: tuple[int, int] | None = None) -> tuple[tuple[object, ...], ...]:
        """The working surface (of part `scope`) as content: what the nodes say and where they
        land, not their ids (a rewrite that restates the same nodes under new ids has the same shape)."""
        return tuple((n.role, n.text, n.slice, n.original.index if n.original is not None else None, n.result_for)
                     for n in self.in_scope(scope))

    def dump(self) -> list[dict[str, object]]:
        """The working nodes as JSON values (`restore` rebuilds the editor from them)."""
        return [{"id": n.id, "role": n.role, "text": n.text, "original": n.original.index if n.original else None,
                 "sources": list(n.sources), "slice": list(n.slice), "resultFor": n.result_for} for n in self.nodes]

    @classmethod
    def restore(cls, turn: int, originals: Sequence[OriginalNode], nodes: Sequence[dict[str, object]], *,
                keep_assistants: bool = False) -> "TurnNodeEditor":
        """An editor whose working surface is `nodes` (from `dump`) over the same originals;
        ValueError when they do not fit these originals."""
        editor = cls(turn, originals, keep_assistants=keep_assistants)
        rebuilt: list[WorkingNode] = []
        for node in nodes:
            original = node.get("original")
            slice_ = node.get("slice")
            if not (isinstance(slice_, list) and len(slice_) == 2 and all(isinstance(i, int) for i in slice_)):
                raise ValueError(f"bad slice {slice_!r}")
            if original is not None:
                if not isinstance(original, int) or not 0 <= original < len(editor.originals):
                    raise ValueError(f"no original node {original!r}")
                kept = editor.nodes[original]
                if node.get("text") != kept.text or tuple(slice_) != kept.slice:
                    raise ValueError(f"original node {original} does not match")
                rebuilt.append(kept)
                continue
            role, text = _ROLES.get(str(node.get("role"))), node.get("text")
            if role is None or not isinstance(text, str):
                raise ValueError(f"bad node {node.get('id')!r}")
            sources = node.get("sources")
            if not isinstance(sources, list) or not all(isinstance(s, int) for s in sources):
                raise ValueError(f"bad sources of {node.get('id')!r}")
            result_for = node.get("resultFor")
            rebuilt.append(WorkingNode(str(node.get("id")), role, text, None, tuple(sources),
                                       (slice_[0], slice_[1]), result_for if isinstance(result_for, str) else None))
        at = 0
        for working in rebuilt:  # the slices must still partition the turn's positions, in order
            if working.slice[0] != at or working.slice[1] < working.slice[0]:
                raise ValueError("the landing slices do not partition the turn")
            at = working.slice[1] + 1
        if at != len(editor.originals):
            raise ValueError("the landing slices do not cover the turn")
        editor.nodes = rebuilt
        editor.revision = 1 if editor.changed else 0
        numbers = [int(n.id[1:]) for n in rebuilt if n.id.startswith("r") and n.id[1:].isdigit()]
        editor._next_r = max(numbers, default=0) + 1
        return editor


def tool_pairing_problem(nodes: Sequence[WorkingNode]) -> str | None:
    """Tool calls and results left verbatim must still pair up, in order.

    A verbatim assistant with tool calls needs each result after it (verbatim or a content
    rewrite of that one result); every kept result needs its verbatim calling assistant
    before it. Anything else would send the provider an orphaned call or result.
    """
    open_calls: dict[str, str] = {}
    answered: set[str] = set()
    for node in nodes:
        original = node.original
        if original is not None and original.calls:
            for call in original.calls:
                open_calls[call] = node.id
        answers = node.result_for
        if answers is not None:
            if answers not in open_calls:
                return (f"{node.id} is a tool result whose call is gone: replace it together with the assistant "
                        "node that made the call (or fold both into an assistant node)")
            answered.add(answers)
    unanswered = [f"{node_id} ({call})" for call, node_id in open_calls.items() if call not in answered]
    if unanswered:
        return ("tool calls would lose their results: " + ", ".join(unanswered)
                + "; replace the calling assistant node together with its tool results")
    return None
