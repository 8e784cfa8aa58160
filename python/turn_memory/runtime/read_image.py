"""`read_memory_image({ref})`: reopen an image a `<memory-image …/>` marker stands for
(docs/decisions.md#images-fold-into-markers-that-can-be-reopened).

Only images that really appear in the caller's own append-only log are returned (any event,
shadowed by a landing or a checkpoint or not), so an attachment id is never a bearer token.
A user lineage fork needs nothing more on rc8: DSH seeds the fork's log with the parent's
events up to the fork point, so the parent's images are already in the caller's log.
The engine only resolves the ref; the shim checks the route accepts images and reads the
bytes through DSH's attachment service before an image block goes back to the model.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from turn_memory.bridge.protocol import ToolResult
from turn_memory.host.images import find_image, marker_ref, markers_in
from turn_memory.host.tools import ToolArgs, ToolError, parse_args, tool_schema
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.public_tools import PublicTool, describe

NAME = "read_memory_image"


class ReadImageArgs(ToolArgs):
    ref: str = Field(description="the marker's ref attribute, or the whole marker")


PARAMETERS = tool_schema(ReadImageArgs)


def attachment_id(ref: str) -> str:
    """The id a model passed: a bare attachment id or a whole marker."""
    text = ref.strip()
    if "<memory-image" in text:
        found = markers_in(text)
        named = marker_ref(found[0]) if found else None
        if named is None:
            raise ToolError("ref looks like a <memory-image …/> marker but has no ref=\"…\" attribute; "
                            "pass the marker exactly as shown, or just its ref value")
        return named
    if not text:
        raise ToolError("ref is empty: pass the ref value of a <memory-image …/> marker")
    return text


def read_image(session: MirroredSession, args: Any) -> ToolResult:
    """Resolve one ref against the session's log (raises ToolError for anything unknown)."""
    wanted = attachment_id(parse_args(ReadImageArgs, args).ref)
    ref = find_image(session.log.events, wanted)
    if ref is None:
        raise ToolError(f"no image with ref {wanted!r} appears in this session's history; only images this "
                        "session has seen can be read. Copy the ref from a <memory-image …/> marker.")
    return ToolResult(f"The image {ref.marker} follows.", image=ref.raw)


def public_tool() -> PublicTool:
    return PublicTool(name=NAME, parameters=PARAMETERS, handler=lambda call: read_image(call.session, call.args))


def worker_spec() -> dict[str, Any]:
    """The same tool inside a compression worker's scope (workers resolve markers too)."""
    return describe(NAME, PARAMETERS).model_dump()

