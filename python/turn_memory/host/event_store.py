"""A session log's events, each kept as compactly as the engine's later reads allow. Pure.

The mirror holds every event of a session for its whole life, and as parsed dicts they were
most of the engine's growth over a long session: on rc8, which logs every streamed chunk, a
300-turn soak (bench/soak.py) mirrors 27 K events, three in four of them chunk envelopes,
~23 MB as dicts, 11 MB of it grown from the middle turn to the end. The engine reads an event
often only while it is on the surface (a replacement's span, pricing, tool pairing, a
landing); everything else it reads rarely (a scan of the open turn, the history tool). So:

- an elided chunk (the shim sends only `{type, seq, time, data: null}`) is kept as its time;
- any other event the log no longer needs at hand (`compact`: not a surface node, or one a
  replacement shadowed) is kept as its JSON text, parsed again when read, and deflated when
  that is long (a shadowed tool result: most of what is left);
- the rest stay the dicts they arrived as.

Reading gives back an event equal to the one appended, key order included; a compact event
is a fresh dict at each read, so nothing can change the log through it. An event whose JSON
would not read back equal (a tuple, a non-string key: only a hand-built one) stays a dict.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, overload

Event = dict[str, Any]

CHUNK = "assistant/chunk"
#: an elided chunk, exactly as the shim sends it (`shim-js/lib/mirror.js` `#slim`)
_CHUNK_KEYS = ["type", "seq", "time", "data"]
#: JSON text from this long on is kept deflated (level 1: ~1 ms per MB either way)
DEFLATE_FROM = 1024


class EventStore(Sequence[Event]):
    """The events of one log by seq: a read-only sequence of dicts, plus `append`/`compact`."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        #: per seq: the event (dict), its JSON text (bytes: `{`…, or deflated), or an elided chunk's time (int)
        self._items: list[Event | bytes | int] = []

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return [_thaw(seq, self._items[seq]) for seq in range(*index.indices(len(self._items)))]
        item = self._items[index]  # IndexError as a list's
        if type(item) is dict:  # at once: a surface node, read on every plan
            return item
        return _thaw(index if index >= 0 else index + len(self._items), item)

    def __iter__(self) -> Iterator[Event]:
        for seq, item in enumerate(self._items):
            yield _thaw(seq, item)

    def __reversed__(self) -> Iterator[Event]:
        items = self._items
        for seq in range(len(items) - 1, -1, -1):
            yield _thaw(seq, items[seq])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (EventStore, list)):  # as a list: never equal to a tuple
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # why: mutable, unhashable like the list it replaces

    def __repr__(self) -> str:
        return f"EventStore({len(self._items)} events)"

    def append(self, event: Event) -> None:
        """Add the next event (its seq is its position). An elided chunk is kept compact at once:
        nothing reads more of it than its envelope."""
        seq = len(self._items)
        if (event.get("type") == CHUNK and list(event) == _CHUNK_KEYS and event["data"] is None
                and type(event["time"]) is int and type(event["seq"]) is int and event["seq"] == seq):
            self._items.append(event["time"])
        else:
            self._items.append(event)

    def compact(self, seq: int) -> None:
        """Keep the event at `seq` as its JSON text from now on (the log reads it rarely)."""
        event = self._items[seq]
        if not isinstance(event, dict):
            return  # compact already
        try:
            text = json.dumps(event, separators=(",", ":")).encode()  # ASCII: \u escapes, lone surrogates too
        except (TypeError, ValueError):
            return  # not JSON (a hand-built event): stays a dict
        if json.loads(text) != event:
            return  # the round trip would not give it back exactly (a tuple, an int key, NaN)
        if len(text) >= DEFLATE_FROM:
            deflated = zlib.compress(text, 1)  # never starts with `{`: a zlib header is 0x78 …
            text = deflated if len(deflated) < len(text) else text
        self._items[seq] = text

    def is_compact(self, seq: int) -> bool:
        """Whether the event at `seq` is kept compact (its reads build a fresh dict)."""
        return not isinstance(self._items[seq], dict)


def _thaw(seq: int, item: Event | bytes | int) -> Event:
    if isinstance(item, dict):
        return item
    if isinstance(item, bytes):
        event: Event = json.loads(item if item[:1] == b"{" else zlib.decompress(item))
        return event
    return {"type": CHUNK, "seq": seq, "time": item, "data": None}
