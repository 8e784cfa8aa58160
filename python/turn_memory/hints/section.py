"""The hints as the compression worker reads them: one labelled entry per reasoning block. Pure.

The worker prompt (`prompts/turn-compression.md`) frames them; here each entry only says
which reasoning it indexes, so the worker can find that block in the raw turn.
"""

from __future__ import annotations

from typing import Sequence

from turn_memory.hints.service import Hint

_OPENING_CHARS = 80


def hints_text(hints: Sequence[Hint]) -> str:
    entries = []
    for hint in hints:
        opening = " ".join(hint.block.text.split())[:_OPENING_CHARS]
        entries.append(f"### Reasoning in step {hint.block.step} ({len(hint.block.text):,} characters, "
                       f"beginning \"{opening}…\")\n\n{hint.text.strip()}")
    return "\n\n".join(entries)
