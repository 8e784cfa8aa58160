"""Images in the session log and their lazy `<memory-image …/>` markers
(docs/decisions.md#images-fold-into-markers-that-can-be-reopened).

rc8's ImageBlock is `{type: 'image', attachment: ImageAttachmentRef}` with the ref
`{attachmentId, mediaType, bytes, width, height, name?}`; the bytes live in the attachment
service, the log only holds the ref (0.2.1 keeps the same block; its tool results hold their
blocks directly instead of inside a `tool-result` block, which `image_refs` walks either
way). Wherever content is shown to a worker as text, an image
becomes one canonical marker built here from the ref, so the same image always gives the
same marker and a worker's copy can be checked character for character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

TAG = "memory-image"
#: a marker as it appears in text: attribute values are escaped, so no `<`/`>` inside
MARKER_RE = re.compile(r"<memory-image\s[^<>]*?/>")
_ATTR_RE = re.compile(r'([a-z]+)="([^"]*)"')


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _unescape(value: str) -> str:
    return value.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@dataclass(frozen=True)
class ImageRef:
    """One ImageAttachmentRef as the log holds it (`raw` is returned verbatim to the host)."""

    attachment_id: str
    media_type: str
    bytes: int
    width: int
    height: int
    name: str | None
    raw: dict[str, Any]

    @classmethod
    def from_block(cls, block: Any) -> "ImageRef | None":
        """The ref of an rc8 image block, or None when the block is not one."""
        if not isinstance(block, dict) or block.get("type") != "image":
            return None
        ref = block.get("attachment")
        if not isinstance(ref, dict) or not isinstance(ref.get("attachmentId"), str) or not ref["attachmentId"]:
            return None
        name = ref.get("name")
        return cls(ref["attachmentId"], str(ref.get("mediaType", "")), _int(ref.get("bytes")), _int(ref.get("width")),
                   _int(ref.get("height")), name if isinstance(name, str) else None, ref)

    @property
    def marker(self) -> str:
        attrs = [f'ref="{_escape(self.attachment_id)}"', f'type="{_escape(self.media_type)}"',
                 f'size="{self.width}x{self.height}"', f'bytes="{self.bytes}"']
        if self.name:
            attrs.append(f'name="{_escape(self.name)}"')
        return f"<{TAG} {' '.join(attrs)} />"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def markers_in(text: str) -> list[str]:
    """Every marker in a text, in order (exact strings)."""
    return MARKER_RE.findall(text)


def marker_ref(marker: str) -> str | None:
    """The attachment id a marker names."""
    attrs = dict(_ATTR_RE.findall(marker))
    return _unescape(attrs["ref"]) if "ref" in attrs else None


def image_refs(value: Any) -> Iterator[ImageRef]:
    """Every image block anywhere inside an event, message or block list (tool results nest)."""
    if isinstance(value, dict):
        ref = ImageRef.from_block(value)
        if ref is not None:
            yield ref
            return
        for item in value.values():
            yield from image_refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from image_refs(item)


def find_image(events: Iterable[dict[str, Any]], attachment_id: str) -> ImageRef | None:
    """The last ref with this id in a log (any event, shadowed or not)."""
    found = None
    for event in events:
        for ref in image_refs(event.get("data")):
            if ref.attachment_id == attachment_id:
                found = ref
    return found


def missing_markers(required: Iterable[str], texts: Iterable[str]) -> list[str]:
    """Required markers that no text contains verbatim (moved or merged is fine)."""
    present = {m for text in texts for m in markers_in(text)}
    return [m for m in dict.fromkeys(required) if m not in present]


def unknown_markers(allowed: Iterable[str], texts: Iterable[str]) -> list[str]:
    """Markers in the texts that are not exactly one of the source's (altered or invented)."""
    known = set(allowed)
    return list(dict.fromkeys(m for text in texts for m in markers_in(text) if m not in known))


def image_problems(required: Sequence[str], texts: Sequence[str], rewritten: Sequence[str],
                   allowed: Sequence[str] | None = None) -> list[str]:
    """Dropped or altered image markers, as worker-facing problems (empty when all is kept).

    `required` must each appear verbatim in `texts`; the worker's `rewritten` texts may hold
    only markers of `allowed` (default: the required ones).
    """
    problems = []
    if missing := missing_markers(required, texts):
        problems.append("image markers were dropped or changed; put each of these back, character for character "
                        "(moving or merging them into another node is fine):\n  " + "\n  ".join(missing))
    if unknown := unknown_markers(required if allowed is None else allowed, rewritten):
        problems.append("these image markers are not in the source (altered or invented); remove them or copy the "
                        "original marker exactly:\n  " + "\n  ".join(unknown))
    return problems
