"""The model-facing texts of the hand-off, from `prompts/turn-continuation.md` (read fresh)."""

from __future__ import annotations

import re

from turn_memory.prompts import PromptError, prompt_sections, render

PROMPT = "turn-continuation"
_VAR = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")


def _section(name: str) -> str:
    sections = prompt_sections(PROMPT)
    if name not in sections:
        raise PromptError(f"prompts/{PROMPT}.md has no section {name!r}")
    return sections[name]


def reminder(count: int, tokens: int, milestone: int, interval: int) -> str:
    return render(_section("reminder"), {"count": str(count), "tokens": str(tokens), "milestone": str(milestone),
                                         "next": str(milestone + interval)}).strip()


def parse_reminder(text: str) -> int | None:
    """The milestone a rendered reminder names, or None when it does not match the prompt."""
    try:
        template = _section("reminder")
    except PromptError:
        return None
    pattern, at = [], 0
    for match in _VAR.finditer(template):
        pattern.append(re.escape(template[at:match.start()]))
        name = match.group(1)
        pattern.append(rf"(?P<{name}>\d+)" if name == "milestone" and "(?P<milestone>" not in "".join(pattern)
                       else r"\d+")
        at = match.end()
    pattern.append(re.escape(template[at:]))
    found = re.fullmatch("".join(pattern), text.strip(), re.S)
    return int(found.group("milestone")) if found and "milestone" in found.groupdict() else None


def accepted() -> str:
    return _section("accepted")


def followup(handoff: str) -> str:
    return render(_section("follow-up"), {"handoff": handoff}).strip()
