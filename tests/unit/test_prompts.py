"""The strict prompt renderer (design D-004): exactly `{{name}}` and non-nested
`{{#if flag}}…{{/if}}`; anything unknown fails the render, whichever flags are on."""

from __future__ import annotations

import pytest

from turn_memory.prompts import PromptError, render, render_prompt


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
    values = {"turn": "1", "turns": "1 and 2", "node_count": "2", "catalog": "c", "hints": "h", "images": "i"}
    for on in (False, True):
        # `single` and `batch` are never on together: one turn, or a backlog batch (turns.batchTurns)
        flags = {"single": not on, "batch": on, "spawn": on, "continuing": on, "hints": on, "images": on}
        assert "{{" not in render_prompt("turn-compression", values, flags)
    session = {"segment_count": "1", "segment": "1", "revision": "0", "segments": "s", "sources": "x",
               "handoff": "h", "images": "i"}
    for on in (False, True):
        assert "{{" not in render_prompt("session-compaction", session, {"spawn": on, "handoff": on, "images": on})
