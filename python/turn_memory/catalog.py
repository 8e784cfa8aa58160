"""Which public tools and runtime-context sections the engine offers (one place to add one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from turn_memory.bridge.protocol import ToolSpec
from turn_memory.config import EngineConfig
from turn_memory.continuation import reminder as continuation_reminder
from turn_memory.continuation import state as continuation_state
from turn_memory.continuation import tool as continuation_tool
from turn_memory.history import session_history
from turn_memory.runtime import read_image
from turn_memory.runtime.mirror import MirroredSession
from turn_memory.runtime.public_tools import PublicTool, PublicTools
from turn_memory.runtime.workers import SharedTool


@dataclass(frozen=True)
class ContextSection:
    """A named runtime-context section: its text for the coming step ('' = not shown)."""

    name: str
    render: Callable[[MirroredSession, int, int, EngineConfig], str]
    enabled: Callable[[EngineConfig], bool] = lambda config: True


def public_tools() -> list[PublicTool]:
    return [session_history.TOOL, read_image.public_tool(), continuation_tool.public_tool()]


def worker_tools() -> dict[str, SharedTool]:
    """Public tools also mounted in both compression-worker scopes, answered for the parent session."""
    return {read_image.NAME: read_image.read_image}


def context_sections() -> list[ContextSection]:
    # one Reminders per engine: it remembers what this process already answered
    return [ContextSection(continuation_state.SECTION, continuation_reminder.Reminders().render,
                           continuation_reminder.enabled)]


def declared(config: EngineConfig, tools: PublicTools, contexts: list[ContextSection]) -> tuple[list[ToolSpec], list[str]]:
    """What the handshake declares for the shim to register on every user agent: the public
    tools' specs and the names of the runtime-context sections this config enables."""
    return tools.specs(config), [c.name for c in contexts if c.enabled(config)]


def declarations_cache(config: EngineConfig) -> dict[str, Any]:
    """The shim's declarations cache (`$DSH_HOME/turn-memory/declared.json`) for this config,
    exactly as the shim writes it after a handshake: the installer writes it, so the first
    DSH start after an install registers the public tools before its first request and the
    tool list (the head of every cached prompt prefix) never changes mid-session."""
    specs, sections = declared(config, PublicTools(public_tools()), context_sections())
    return {"publicTools": [s.model_dump(mode="json", exclude_none=True) for s in specs], "contextSections": sections}
