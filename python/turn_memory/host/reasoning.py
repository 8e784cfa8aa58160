"""Long reasoning blocks, the thought hints that index them, and the hints as the
compression worker reads them: one labelled entry per reasoning block. Pure; the hints
feature makes them, turn jobs read them.

The worker prompt (`prompts/turn-compression.md`) frames them; here each entry only says
which reasoning it indexes, so the worker can find that block in the raw turn.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

HintKey = tuple[int, int, str]


@dataclass(frozen=True)
class ReasoningBlock:
    turn: int
    step: int
    text: str

    @property
    def key(self) -> HintKey:
        return (self.turn, self.step, hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16])


@dataclass(frozen=True)
class Hint:
    block: ReasoningBlock
    text: str

_OPENING_CHARS = 80


def hints_text(hints: Sequence[Hint]) -> str:
    entries = []
    for hint in hints:
        opening = " ".join(hint.block.text.split())[:_OPENING_CHARS]
        entries.append(f"### Reasoning in step {hint.block.step} ({len(hint.block.text):,} characters, "
                       f"beginning \"{opening}…\")\n\n{hint.text.strip()}")
    return "\n\n".join(entries)
