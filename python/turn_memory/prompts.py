"""Strict renderer for the Markdown prompts in `prompts/` (docs/decisions.md#prompts-are-markdown-files-read-fresh).

Supports exactly `{{name}}` and non-nested `{{#if flag}}…{{/if}}`. Unknown names (also
inside a block whose flag is off), unknown flags and any leftover `{{…}}` fail the render,
so a typo in a prompt fails the job loudly instead of sending the model a broken
instruction — whichever flags this render happens to have. A block that is off leaves the
blank lines around it behind: the template's runs of blank lines close up to one (inserted
values are never touched). Templates are read fresh on every render: an edited prompt
takes effect on the next job without a restart.
"""

from __future__ import annotations

import re
from typing import Mapping

from turn_memory.resources import ResourceError, prompts_dir

_IF = re.compile(r"\{\{#if ([A-Za-z_][A-Za-z0-9_]*)\}\}(.*?)\{\{/if\}\}", re.S)
_VAR = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
_BLANK_RUN = re.compile(r"\n(?:[ \t]*\n){2,}")


class PromptError(ValueError):
    pass


def render(template: str, values: Mapping[str, str], flags: Mapping[str, bool] | None = None) -> str:
    flags = flags or {}
    # every placeholder of the template must be known, not only those of the enabled blocks:
    # a typo in a block that is off now would otherwise surface only when it is on
    for match in _VAR.finditer(template):
        if match.group(1) not in values:
            raise PromptError(f"unknown placeholder {{{{{match.group(1)}}}}}")

    def conditional(match: re.Match[str]) -> str:
        name, body = match.group(1), match.group(2)
        if name not in flags:
            raise PromptError(f"unknown condition {{{{#if {name}}}}}")
        if "{{#if" in body:
            raise PromptError("nested conditions are not supported")
        return body if flags[name] else ""

    out = _BLANK_RUN.sub("\n\n", _IF.sub(conditional, template))

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise PromptError(f"unknown placeholder {{{{{name}}}}}")
        return values[name]

    # leftovers are checked on the template text, never on inserted values
    template_only = _VAR.sub("", out)
    if "{{" in template_only or "}}" in template_only:
        at = template_only.find("{{") if "{{" in template_only else template_only.find("}}")
        raise PromptError(f"unsupported template expression near {template_only[at:at + 40]!r}")
    # one pass, so inserted values are never re-scanned for placeholders
    return _VAR.sub(variable, out)


def read_prompt(name: str) -> str:
    """The template text of `prompts/<name>.md`, read fresh (the I/O edge: pure builders take this text)."""
    try:
        path = prompts_dir() / f"{name}.md"
    except ResourceError as exc:
        raise PromptError(str(exc)) from exc
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptError(f"cannot read prompt {path}: {exc}") from exc


def render_prompt(name: str, values: Mapping[str, str], flags: Mapping[str, bool] | None = None) -> str:
    template = read_prompt(name)
    return render(template, values, flags).strip() + "\n"


def prompt_sections(name: str) -> dict[str, str]:
    """A prompt file split at `## heading` lines: {heading: body}. Read fresh each call."""
    text = read_prompt(name)
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {key: "\n".join(lines).strip() for key, lines in sections.items()}
