"""What every tool call shares, public or worker: argument parsing, the answer type, previews. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


def preview(text: str, limit: int = 120) -> str:
    """One line of at most `limit` characters for catalogs."""
    # catalogs preview every node on every call and a node can be many KB: collapse the
    # whitespace of a head first; when that already exceeds the limit it is a prefix of the
    # whole text's collapsed form, so the preview is the same
    head = text[: 4 * limit]
    flat = " ".join(head.split())
    if len(flat) <= limit and len(head) < len(text):
        flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class ToolError(Exception):
    """A worker tool call that cannot be applied; the job's state is unchanged."""


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def parse_args(model: type[ToolArgs], args: Any) -> Any:
    """Validate a tool's arguments as the model sent them (an object, or a raw JSON string)."""
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            raise ToolError(f"arguments are not valid JSON: {exc}") from None
    try:
        return model.model_validate(args or {})
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
        raise ToolError(f"invalid arguments: {details}") from None


@dataclass
class ToolAnswer:
    text: str
    is_error: bool = False
    #: the caller's turn ends with this result (an accepted finish, a hand-off)
    conclude: bool = False
    #: an ImageAttachmentRef returned to the model as an image block beside the text
    image: dict[str, Any] | None = None
