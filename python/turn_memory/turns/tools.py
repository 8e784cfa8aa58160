"""The four worker tools over a TurnNodeEditor (docs/decisions.md#workers-edit-a-working-copy).

Pure: arguments in, text out. Every invalid call — malformed arguments, stale ids, a range
that is not contiguous, more outputs than capacity, wrong role order, an oversize read —
returns a clear `ToolError` and leaves the editor unchanged. Tool descriptions are prompt
text and live in `prompts/turn-worker-tools.md`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

from pydantic import Field

from turn_memory.host.paging import text_page
from turn_memory.host.tools import RangeArgs, ToolArgs, ToolError, parse_args, parse_call, preview, tool_schema
from turn_memory.turns.editor import EditError, Output, TurnNodeEditor, WorkingNode

FINISH = "finish_turn_compression"
TOOL_NAMES = ("list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", FINISH)
MAX_READ_IDS = 64


class ListArgs(ToolArgs):
    pass


class ReadArgs(RangeArgs):
    selection_required = True
    selection_error = "give either ids (a list of node ids) or from (and optionally to), not both or neither"


class NodeArg(ToolArgs):
    role: Literal["user", "assistant", "tool"]
    content: str


class ReplaceArgs(ToolArgs):
    from_: str = Field(alias="from")
    to: str | None = None
    nodes: list[NodeArg] = Field(min_length=1)


class FinishArgs(ToolArgs):
    pass


#: each tool's argument model: its JSON schema is generated from it
ARGS: dict[str, type[ToolArgs]] = {"list_turn_nodes": ListArgs, "read_turn_nodes": ReadArgs,
                                   "replace_turn_nodes": ReplaceArgs, FINISH: FinishArgs}


def tool_specs(descriptions: Mapping[str, str]) -> list[dict[str, Any]]:
    """Name, description (`prompts/turn-worker-tools.md`'s sections) and JSON schema of each tool."""
    return [{"name": name, "description": descriptions[name].strip(), "parameters": tool_schema(ARGS[name])}
            for name in TOOL_NAMES]


def _kind(node: WorkingNode, keep_assistants: bool) -> str:
    if node.original is None:
        return "rewritten"
    o = node.original
    kind: str = o.kind
    if o.calls:
        kind += f" with {len(o.calls)} tool call{'s' if len(o.calls) > 1 else ''}"
    if o.has_reasoning:
        kind += ", raw reasoning" + ("" if keep_assistants else " (must be rewritten)")
    return kind


def catalog(editor: TurnNodeEditor, *, previews: bool, scope: tuple[int, int] | None = None) -> str:
    """The current nodes (of the part `scope`, original positions [first, last]) as one line each."""
    nodes = editor.in_scope(scope)
    if scope is None:
        lines = [f"Turn {editor.turn}: {len(nodes)} current nodes from {len(editor.originals)} original positions "
                 f"(revision {editor.revision})."]
    else:
        lines = [f"Turn {editor.turn}, your part: {len(nodes)} current nodes from original positions "
                 f"{scope[0] + 1}-{scope[1] + 1} of {len(editor.originals)} (revision {editor.revision})."]
    for node in nodes:
        fixed = editor.keep_assistants and node.role == "assistant"
        state = "fixed" if fixed else "changed" if node.changed else "unchanged"
        line = f"- {node.id} · {node.role} · {_kind(node, editor.keep_assistants)} · {state} · capacity {node.capacity}"
        if previews:
            line += f" · {preview(node.text)}"
        lines.append(line)
    return "\n".join(lines)


def _read_body(nodes: Sequence[WorkingNode]) -> str:
    return "\n\n".join(f"### {n.id} · {n.role} · {'changed' if n.changed else 'unchanged'}\n{n.text}" for n in nodes)


def nodes_text(nodes: Sequence[WorkingNode], limit_chars: int) -> str:
    """`nodes` as `read_turn_nodes` returns them from offset 0 (one page of `limit_chars`)."""
    page = text_page(_read_body(nodes), 0, limit_chars)
    if page.more:
        return (f"{page.text}\n\n[truncated at character {page.end} of {page.total}; read the rest with "
                f"read_turn_nodes, from {nodes[0].id} to {nodes[-1].id} with offset={page.end}]")
    return page.text


@dataclass
class WorkerTools:
    editor: TurnNodeEditor
    read_limit_chars: int = 24000
    #: the part of the turn this worker rewrites (original positions [first, last]) while other
    #: workers rewrite the rest (`turns.split`); None: the whole turn
    scope: tuple[int, int] | None = None

    def call(self, name: str, args: Any) -> str:
        """Run one tool; raises ToolError (editor unchanged) on any invalid call."""
        parsed = parse_call(ARGS, name, args)
        if name == "list_turn_nodes":
            return catalog(self.editor, previews=True, scope=self.scope)
        if name == "read_turn_nodes":
            return self._read(parsed)
        if name == "replace_turn_nodes":
            return self._replace(parsed)
        if name == FINISH:
            problems = self.editor.final_problems(self.scope)
            if problems:
                raise ToolError("cannot finish yet:\n- " + "\n- ".join(problems))
            if self.scope is not None:
                return "Accepted. Your part of the turn will land with the others; your work is done."
            return "Accepted. The compressed turn will land; your work is done."
        raise ToolError(f"unknown tool {name}")

    def _check_scope(self, start: str, end: str | None) -> None:
        if self.scope is None:
            return
        i, j = self.editor.resolve_range(start, end)
        outside = [n.id for n in self.editor.nodes[i:j + 1] if n not in self.editor.in_scope(self.scope)]
        if outside:
            mine = self.editor.in_scope(self.scope)
            raise ToolError(f"{', '.join(outside)} belong{'s' if len(outside) == 1 else ''} to another part of this "
                            f"turn, which another editor is rewriting now: your part is {mine[0].id}..{mine[-1].id}")

    def _read(self, args: ReadArgs) -> str:
        editor = self.editor
        try:
            if args.ids is not None:
                if not args.ids or len(args.ids) > MAX_READ_IDS:
                    raise ToolError(f"ids must list 1 to {MAX_READ_IDS} node ids")
                picked = [editor.get(node_id) for node_id in dict.fromkeys(args.ids)]
            else:
                assert args.from_ is not None, "ReadArgs requires ids or from"
                i, j = editor.resolve_range(args.from_, args.to)
                picked = editor.nodes[i:j + 1]
        except EditError as exc:
            raise ToolError(str(exc)) from None
        page = text_page(_read_body(picked), args.offset, self.read_limit_chars)
        if page.more:
            return (f"{page.text}\n\n[truncated at character {page.end} of {page.total}; call read_turn_nodes again "
                    f"with the same selection and offset={page.end} to continue]")
        return page.text

    def _replace(self, args: ReplaceArgs) -> str:
        outputs = [Output(n.role, n.content) for n in args.nodes]
        try:
            self._check_scope(args.from_, args.to)
            new_ids = self.editor.replace(args.from_, args.to, outputs)
        except EditError as exc:
            raise ToolError(str(exc)) from None
        span = args.from_ if args.to in (None, args.from_) else f"{args.from_}..{args.to}"
        return f"Accepted: {span} -> {', '.join(new_ids)}.\n" + catalog(self.editor, previews=False, scope=self.scope)


_PREFIXED = re.compile(r"^t(\d+)\.")


@dataclass
class BatchTools:
    """The same four tools over several turns' editors, for one worker compressing a backlog.

    Every id carries its turn (`t4.n1`, the editors' `id_prefix`); a call works on one turn's
    nodes (a range never spans two turns, so each turn keeps its own shape and markers), and
    the finish is accepted only when every turn would be.
    """

    tools: dict[int, WorkerTools]

    def call(self, name: str, args: Any) -> str:
        if name == "list_turn_nodes":
            parse_args(ListArgs, args)
            return "\n\n".join(catalog(t.editor, previews=True) for t in self.tools.values())
        if name == FINISH:
            parse_args(FinishArgs, args)
            problems = [f"turn {turn}: {p}" for turn, t in self.tools.items() for p in t.editor.final_problems()]
            if problems:
                raise ToolError("cannot finish yet:\n- " + "\n- ".join(problems))
            return "Accepted. The compressed turns will land; your work is done."
        if name in ("read_turn_nodes", "replace_turn_nodes"):
            return self._one_turn(args).call(name, args)
        raise ToolError(f"unknown tool {name}")

    def _one_turn(self, args: Any) -> WorkerTools:
        """The turn every id of this call names (validation of the rest is the turn's own tool's)."""
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return next(iter(self.tools.values()))  # its parse reports the broken arguments
        ids = [v for k in ("from", "to") if isinstance(v := (args or {}).get(k), str)] if isinstance(args, dict) else []
        if isinstance(args, dict) and isinstance(args.get("ids"), list):
            ids += [v for v in args["ids"] if isinstance(v, str)]
        turns = {int(m.group(1)) if (m := _PREFIXED.match(i)) else None for i in ids}
        prefixes = ", ".join(f"t{turn}." for turn in self.tools)
        if None in turns:
            raise ToolError(f"node ids carry their turn here ({prefixes}): e.g. t{next(iter(self.tools))}.n1; "
                            "call list_turn_nodes for the current ids")
        if len(turns) > 1:
            raise ToolError("one call works on one turn's nodes: replace or read each turn separately")
        turn = turns.pop() if turns else next(iter(self.tools))
        if turn not in self.tools:
            raise ToolError(f"turn {turn} is not part of this job; its turns: {', '.join(map(str, self.tools))}")
        return self.tools[turn]
