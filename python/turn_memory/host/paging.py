"""The one paging helper of every tool that reads in pages. Pure.

Long text is cut at a character offset (`text_page`), lists at a 1-based page number
(`list_page`); each tool words its own continuation hint from what the page says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

from turn_memory.host.tools import ToolError

T = TypeVar("T")


@dataclass(frozen=True)
class TextPage:
    text: str
    #: where the next page starts; `total` when this page reaches the end
    end: int
    total: int

    @property
    def more(self) -> bool:
        return self.end < self.total


def text_page(body: str, offset: int, limit: int, of: str = "") -> TextPage:
    """At most `limit` characters of `body` from `offset`. An offset past the end is a
    ToolError; with `of` (what is read: "turn 3") the offset must also point into the text
    (0 for an empty one), and the error names it."""
    if of and offset >= max(len(body), 1):
        raise ToolError(f"offset {offset} is past the end of {of} ({len(body):,} characters)")
    if offset > len(body):
        raise ToolError(f"offset {offset} is past the end ({len(body)} characters)")
    text = body[offset: offset + limit]
    return TextPage(text, offset + len(text), len(body))


@dataclass(frozen=True)
class ListPage(Generic[T]):
    items: Sequence[T]
    number: int
    count: int

    @property
    def more(self) -> bool:
        return self.number < self.count


def list_page(items: Sequence[T], number: int, size: int, what: str) -> ListPage[T]:
    """Page `number` (from 1) of `items`, `size` a page; a page past the last is a ToolError
    (`what`: "the catalog has", "the results have")."""
    count = -(-len(items) // size)
    if number > count:
        raise ToolError(f"page {number} does not exist; {what} {count} page(s)")
    return ListPage(items[(number - 1) * size: number * size], number, count)
