"""Tool JSON schemas are generated from the pydantic argument models (`host.tools.tool_schema`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from turn_memory.catalog import public_tools
from turn_memory.compaction import session_tools
from turn_memory.compaction.segment_prompt import worker_tool_specs as session_worker_specs
from turn_memory.continuation.tool import ContinuationArgs
from turn_memory.history.session_history import Args as HistoryArgs
from turn_memory.host.tools import ToolArgs, tool_schema
from turn_memory.runtime.read_image import ReadImageArgs
from turn_memory.turns import tools as turn_tools
from turn_memory.turns.prompt import worker_tool_specs as turn_worker_specs


class _Item(ToolArgs):
    role: Literal["user", "assistant"]


class _Sample(ToolArgs):
    from_: str = Field(alias="from", description="where to start")
    to: str | None = None
    offset: int = Field(0, ge=0)
    items: list[_Item] = Field(min_length=1)


def test_the_schema_is_strict_uses_aliases_and_keeps_constraints():
    assert tool_schema(_Sample) == {
        "type": "object",
        "properties": {
            "from": {"type": "string", "description": "where to start"},
            "to": {"type": "string"},  # optional: its plain type, no null
            "offset": {"type": "integer", "minimum": 0},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "role": {"type": "string", "enum": ["user", "assistant"]}}, "required": ["role"],
                "additionalProperties": False}, "minItems": 1},
        },
        "required": ["from", "items"],
        "additionalProperties": False,
    }


def test_every_worker_and_public_tool_schema_is_its_argument_model():
    models = {**turn_tools.ARGS, **session_tools.ARGS, "read_memory_image": ReadImageArgs,
              "read_session_history": HistoryArgs, "continue_after_turn_compression": ContinuationArgs}
    specs = [*turn_worker_specs(), *session_worker_specs()]
    assert {s["name"] for s in specs} == {*turn_tools.ARGS, *session_tools.ARGS, "read_memory_image"}
    for spec in specs:
        assert spec["parameters"] == tool_schema(models[spec["name"]]), spec["name"]
    for tool in public_tools():
        assert tool.parameters == tool_schema(models[tool.name]), tool.name
