"""What a turn worker is sent: its fixed system prompt and tools, the
same for every worker of every turn (a cached prefix), and its task, which holds only the
turns at hand. Pure apart from reading the prompt files."""

from __future__ import annotations

from typing import Any, Sequence

from turn_memory.host.reasoning import Hint, hints_text
from turn_memory.prompts import prompt_sections, render_prompt
from turn_memory.runtime.workers import worker_scope
from turn_memory.turns.editor import TurnNodeEditor
from turn_memory.turns.tools import catalog, nodes_text, tool_specs


#: what a spawn's task carries of its turns' text: ~32 K tokens at the host meter's 4 characters
#: a token (a session segment's budget too); one request reading it in the task costs less than
#: paging through it with `read_turn_nodes`, each page a request of its own
SPAWN_TEXT_CHARS = 128_000


def persona() -> str:
    return render_prompt("turn-worker-system", {})


def worker_tool_specs() -> list[dict[str, Any]]:
    """A turn worker's tools, with their descriptions from `prompts/turn-worker-tools.md` (read fresh)."""
    return worker_scope(tool_specs(prompt_sections("turn-worker-tools")))


def task(editors: Sequence[TurnNodeEditor], hints: Sequence[Hint], *, spawn: bool, continuing: bool,
         part: tuple[int, int, tuple[int, int]] | None = None) -> str:
    """The task of a worker on one turn, on a batch of turns (one editor each), or on part
    (index, count, original positions) of one turn that other workers share. A spawn, which
    has no conversation in context, also gets its nodes' text (as `read_turn_nodes` returns them,
    `SPAWN_TEXT_CHARS` in all), so that one request can suffice."""
    turns = [str(e.turn) for e in editors]
    scope = part[2] if part is not None else None
    # a batch's turns share the page: a read covers one turn's nodes
    text = "\n\n".join(nodes_text(e.in_scope(scope), SPAWN_TEXT_CHARS // len(editors)) for e in editors) \
        if spawn else ""
    images = [m for e in editors for m in e.image_markers(scope)]
    mine = editors[0].in_scope(scope)
    return render_prompt(
        "turn-compression",
        {"turn": turns[0], "turns": ", ".join(turns[:-1]) + f" and {turns[-1]}" if len(turns) > 1 else turns[0],
         "node_count": str(sum(len(e.nodes) for e in editors)),
         "catalog": "\n\n".join(catalog(e, previews=True, scope=scope) for e in editors),
         "hints": hints_text(hints), "images": "\n".join(images), "text": text,
         "part": f"{part[0]} of {part[1]}" if part else "", "part_nodes": f"{mine[0].id}..{mine[-1].id}" if part else ""},
        {"single": len(editors) == 1, "batch": len(editors) > 1, "spawn": spawn, "continuing": continuing,
         "part": part is not None, "keep": any(e.keep_assistants for e in editors),
         "hints": bool(hints), "images": bool(images)},
    )
