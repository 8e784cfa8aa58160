"""Text surgery on a profile's `cordis.patch.yml`: the managed block and nothing else. Pure.

The user's own entries and comments are never re-serialized: the block is a
run of lines between two marker comments, appended after the user's text and
cut out again verbatim. Two details keep the file a valid YAML list:

* DSH writes a fresh profile's file as comments plus `[]` (an empty FLOW
  list); block entries cannot follow it, so that `[]` is dropped while the
  block is present and put back by :func:`remove_block` when no entry is left
  (DSH refuses a patch file that is not a list).
* A non-empty flow list, an indented list or a non-list is refused with a
  message instead of being rewritten.

Files edited on Windows keep what the editor gave them: CRLF line ends (the block is
written with the file's own), and a UTF-8 byte order mark (Notepad's "UTF-8 with BOM"),
which is set aside before any line is matched and put back in front.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from .patchyaml import DshLoader, canonical, dump, load

BEGIN = "# >>> turn-memory managed block"
END = "# <<< turn-memory managed block"
BOM = "\ufeff"


class PatchFileError(Exception):
    """The patch file's text cannot be edited safely; the message says why."""


def newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _split_bom(text: str) -> tuple[str, str]:
    """(the byte order mark or '', the text after it)."""
    return (BOM, text[1:]) if text.startswith(BOM) else ("", text)


def split_block(text: str) -> tuple[str, str | None]:
    """(text without the managed block, the block's lines or None)."""
    bom, text = _split_bom(text)
    user_text, block = _split_body(text)
    return bom + user_text, block


def _split_body(text: str) -> tuple[str, str | None]:
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.rstrip("\r\n").startswith(BEGIN)]
    if not begins:
        if any(line.rstrip("\r\n").startswith(END) for line in lines):
            raise PatchFileError(f"found {END!r} without {BEGIN!r}; fix the file by hand")
        return text, None
    if len(begins) > 1:
        raise PatchFileError(f"found {len(begins)} turn-memory managed blocks; keep one and re-run")
    start = begins[0]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].rstrip("\r\n").startswith(END)), None)
    if end is None:
        raise PatchFileError(f"managed block opened by {BEGIN!r} is never closed by {END!r}; fix the file by hand")
    return "".join(lines[:start] + lines[end + 1 :]), "".join(lines[start : end + 1])


def _root_node(text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=DshLoader)  # noqa: S506 - DshLoader is a SafeLoader
    except yaml.YAMLError as err:
        raise PatchFileError(f"cordis.patch.yml is not valid YAML: {err}") from err


def user_entries(user_text: str) -> list[dict[str, Any]]:
    """The user's own patch entries (the text must already be free of the block)."""
    data = load(user_text)
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        raise PatchFileError("cordis.patch.yml must be a top-level YAML list of patch entries")
    return data


def _prepare_user_text(user_text: str) -> str:
    """The user's text, ready to have block lines appended."""
    node = _root_node(user_text)
    if node is None:
        text = user_text
    elif not isinstance(node, yaml.SequenceNode):
        raise PatchFileError("cordis.patch.yml must be a top-level YAML list of patch entries")
    elif node.flow_style:
        if node.value:
            raise PatchFileError(
                "cordis.patch.yml is a flow-style list ([...]); rewrite it as a block list "
                "(one '- id: ...' entry per line group) so the managed block can follow it"
            )
        # Drop the empty `[]`, and its line if nothing else is on it.
        s, e = node.start_mark.index, node.end_mark.index
        line_start = user_text.rfind("\n", 0, s) + 1
        line_end_nl = user_text.find("\n", e)
        line_end = len(user_text) if line_end_nl < 0 else line_end_nl + 1
        rest_of_line = (user_text[line_start:s] + user_text[e:line_end]).strip()
        if rest_of_line == "":
            text = user_text[:line_start] + user_text[line_end:]
        else:
            text = user_text[:s] + user_text[e:]
    else:
        if node.start_mark.column != 0:
            raise PatchFileError("cordis.patch.yml's list is indented; the managed block needs it to start at column 0")
        text = user_text
    if text and not text.endswith("\n"):
        text += newline_of(user_text)
    return text


def render_block(header: Sequence[str], entries: list[dict[str, Any]], nl: str = "\n") -> str:
    body = dump(entries).splitlines()
    return nl.join([BEGIN, *header, *body, END]) + nl


def with_block(text: str, block_lines: Sequence[str], entries: list[dict[str, Any]]) -> str:
    """The file with any previous block removed and a freshly rendered one appended."""
    bom, text = _split_bom(text)
    user_text, _ = _split_body(text)
    mine = user_entries(user_text)
    nl = newline_of(text)
    new = _prepare_user_text(user_text) + render_block(block_lines, entries, nl)
    # The result must parse to exactly the user's entries followed by ours.
    if canonical(load(new)) != canonical(mine + entries):
        raise PatchFileError("internal: the rendered patch file does not parse back to user entries + managed block")
    return bom + new


def remove_block(text: str) -> str:
    """The file without the managed block (`[]` restored if no entry is left)."""
    bom, body = _split_bom(text)
    user_text, block = _split_body(body)
    if block is None:
        return text
    if _root_node(user_text) is None:
        nl = newline_of(text)
        if user_text and not user_text.endswith("\n"):
            user_text += nl
        user_text += "[]" + nl
    return bom + user_text
