"""What every tool call shares, public or worker: argument parsing and models, their JSON
schemas, previews. Pure (the result type is the wire model, `bridge.protocol.ToolResult`)."""

from __future__ import annotations

import json
from typing import Any, ClassVar, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


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


class RangeArgs(ToolArgs):
    """A read of editor nodes: listed `ids`, or the range `from`..`to`, paged by `offset`.
    Never both; a tool whose `selection_required` is set refuses neither, with its own
    `selection_error` (checked before the fields, as the tool's first complaint)."""

    selection_required: ClassVar[bool] = False
    selection_error: ClassVar[str] = "give ids or from/to, not both"

    ids: list[str] | None = None
    from_: str | None = Field(None, alias="from")
    to: str | None = None
    offset: int = Field(0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _one_selection(cls, args: Any) -> Any:
        if isinstance(args, dict):
            ids, start = args.get("ids") is not None, args.get("from") is not None
            if (ids and start) or (cls.selection_required and not (ids or start)):
                raise ValueError(cls.selection_error)
        return args

    @model_validator(mode="after")
    def _to_needs_from(self) -> "RangeArgs":
        if self.to is not None and self.from_ is None:
            raise ValueError("to needs from")
        return self


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


def parse_call(models: Mapping[str, type[ToolArgs]], name: str, args: Any) -> Any:
    """A worker tool call's arguments, parsed with the model its schema comes from (`models`:
    the editor's tool name -> argument model table); an unknown tool is a ToolError."""
    model = models.get(name)
    if model is None:
        raise ToolError(f"unknown tool {name}")
    return parse_args(model, args)


def tool_schema(model: type[ToolArgs]) -> dict[str, Any]:
    """The JSON schema a model sees for a tool, generated from its argument model (so the two
    never drift): strict objects, aliases as field names, optional fields as their plain type,
    constraints and descriptions kept, titles and defaults dropped."""
    schema = model.model_json_schema(by_alias=True)
    defs = schema.pop("$defs", {})

    def clean(node: Any) -> Any:
        if isinstance(node, list):
            return [clean(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return clean(defs[node["$ref"].rsplit("/", 1)[-1]])
        options = node.get("anyOf")
        if options and any(o.get("type") == "null" for o in options):
            rest = [o for o in options if o.get("type") != "null"]
            # an optional field is simply left out: the model sees its plain type
            merged = {**(rest[0] if len(rest) == 1 else {"anyOf": rest}),
                      **{k: v for k, v in node.items() if k not in ("anyOf", "default")}}
            return clean(merged)
        out = {k: clean(v) for k, v in node.items() if k not in ("title", "default")}
        if "properties" in node:
            out["properties"] = {name: clean(prop) for name, prop in node["properties"].items()}
        if out.get("type") == "object":
            out.setdefault("properties", {})
            out["additionalProperties"] = False
        order = ("type", "description", "properties", "items", "required")
        return {**{k: out[k] for k in order if k in out}, **{k: v for k, v in out.items() if k not in order}}

    cleaned = clean(schema)
    assert isinstance(cleaned, dict)  # an object schema (and any $ref it names) cleans to an object
    return cleaned
