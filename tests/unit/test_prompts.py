"""The strict prompt renderer: exactly `{{name}}` and non-nested
`{{#if flag}}…{{/if}}`; anything unknown fails the render, whichever flags are on."""

from __future__ import annotations

import itertools
import re

import pytest

from turn_memory.prompts import PromptError, prompt_sections, read_prompt, render, render_prompt
from turn_memory.resources import prompts_dir


def test_placeholders_and_conditions_render():
    template = "Turn {{turn}}.{{#if hints}} Hints: {{hints}}{{/if}}{{#if spawn}} fresh{{/if}}"
    assert render(template, {"turn": "3", "hints": "h"}, {"hints": True, "spawn": False}) == "Turn 3. Hints: h"
    # inserted values are never re-scanned
    assert render("{{a}}", {"a": "{{b}}"}) == "{{b}}"


@pytest.mark.parametrize("template,values,flags,message", [
    ("{{nope}}", {}, {}, "unknown placeholder {{nope}}"),
    ("{{#if off}}{{typo}}{{/if}}", {}, {"off": False}, "unknown placeholder {{typo}}"),
    ("{{#if off}}{{typo}}{{/if}}", {}, {"off": True}, "unknown placeholder {{typo}}"),
    ("{{#if what}}x{{/if}}", {}, {}, "unknown condition"),
    ("{{#if a}}{{#if b}}x{{/if}}{{/if}}", {}, {"a": True, "b": True}, "nested conditions"),
    ("{{ spaced }}", {}, {}, "unsupported template expression"),
    ("{{#each x}}", {}, {}, "unsupported template expression"),
])
def test_anything_unknown_fails_the_render(template, values, flags, message):
    with pytest.raises(PromptError, match=message.replace("{", r"\{").replace("}", r"\}")):
        render(template, values, flags)


def test_every_shipped_prompt_renders_with_its_flags_off_and_on():
    """Each prompt's callers pass every placeholder the file has, in both states of its flags."""
    values = {"turn": "1", "turns": "1 and 2", "node_count": "2", "catalog": "c", "hints": "h", "images": "i",
              "part": "1 of 2", "part_nodes": "n1..n4", "text": "t"}
    for on in (False, True):
        # `single` and `batch` are never on together: one turn, or a backlog batch (turns.batchTurns)
        flags = {"single": not on, "batch": on, "spawn": on, "continuing": on, "keep": on, "part": on, "hints": on,
                 "images": on}
        assert "{{" not in render_prompt("turn-compression", values, flags)
    session = {"segment_count": "1", "segment": "1", "revision": "0", "segments": "s", "sources": "x",
               "handoff": "h", "images": "i", "source_tokens": "2,000", "target_tokens": "300", "checkpoint_tokens": "900"}
    for on in (False, True):
        assert "{{" not in render_prompt("session-compaction", session,
                                         {"spawn": on, "handoff": on, "images": on, "checkpoint": on})


def test_a_block_that_is_off_leaves_one_blank_line_and_inserted_values_are_kept():
    template = "Head.\n\n{{#if a}}\nA.\n{{/if}}\n\n{{#if b}}\nB.\n{{/if}}\n\nBody:\n\n{{body}}\n"
    assert render(template, {"body": "x\n\n\n\ny"}, {"a": False, "b": False}) == "Head.\n\nBody:\n\nx\n\n\n\ny\n"
    assert render(template, {"body": "x"}, {"a": True, "b": False}) == "Head.\n\nA.\n\nBody:\n\nx\n"


def _every_render(name: str):
    """Every combination of a prompt file's flags, each placeholder a one-line value."""
    text = read_prompt(name)
    names = sorted(set(re.findall(r"\{\{([A-Za-z_]\w*)\}\}", text)))
    flags = sorted(set(re.findall(r"\{\{#if (\w+)\}\}", text)))
    for states in itertools.product((False, True), repeat=len(flags)):
        yield dict(zip(flags, states)), render_prompt(name, {n: n.upper() for n in names}, dict(zip(flags, states)))


@pytest.mark.parametrize("name", sorted(p.stem for p in prompts_dir().glob("*.md")))
def test_no_prompt_has_a_run_of_blank_lines_with_any_block_on_or_off(name):
    """Issue 22 finding 7: disabled blocks left eight blank lines in every worker's task."""
    for flags, text in _every_render(name):
        assert "\n\n\n" not in text, (flags, text)
        for heading, body in prompt_sections(name).items():  # the tool and text sections of a file
            assert "\n\n\n" not in body, heading
