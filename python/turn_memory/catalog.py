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


def carried_tools(session: MirroredSession, turn: int, config: EngineConfig, tools: PublicTools) -> list[str]:
    """The public tools a user agent of `session` carries in its requests from this step on
    (docs/decisions.md#the-memory-tools-join-the-request-that-first-needs-them).

    None until one of them has a use: `read_session_history` and `read_memory_image` once the
    surface shows a rewrite (a compressed turn, a checkpoint: the log holds an original the
    surface no longer shows, and images fold into markers only in a rewrite), the hand-off
    tool once the open turn has reached its first reminder milestone. Then all of them at
    once: the tool list is the head of every cached prefix, so each change of it re-misses
    the whole prefix, while a declaration carried before it is needed costs its few hundred
    tokens at the cache-hit price. The caller keeps the answer once given (it never shrinks).
    """
    wanted = session.log.index.rewritten
    if not wanted and continuation_reminder.enabled(config):
        interval = config.turnContinuation.reminderIntervalNodes
        wanted = len(continuation_state.open_turn_nodes(session.log, turn)) >= interval
    return tools.names(config) if wanted else []


def worker_tools() -> dict[str, SharedTool]:
    """Public tools also mounted in both compression-worker scopes, answered for the parent session."""
    return {read_image.NAME: read_image.read_image}


def context_sections() -> list[ContextSection]:
    # one Reminders per engine: it remembers what this process already answered
    return [ContextSection(continuation_state.SECTION, continuation_reminder.Reminders().render,
                           continuation_reminder.enabled)]


def declared(config: EngineConfig, tools: PublicTools, contexts: list[ContextSection]) -> tuple[list[ToolSpec], list[str]]:
    """What the handshake declares for the shim to register on every user agent: the public
    tools' specs (a request shows one only once the engine names it, `carried_tools`) and the
    names of the runtime-context sections this config enables."""
    return tools.specs(config), [c.name for c in contexts if c.enabled(config)]


def declarations_cache(config: EngineConfig) -> dict[str, Any]:
    """The shim's declarations cache (`$DSH_HOME/turn-memory/declared.json`) for this config,
    exactly as the shim writes it after a handshake: the installer writes it, so the first
    DSH start after an install registers the public tools before its first request, ready for
    the step whose pre-step names them (`carried_tools`) even while the engine boots."""
    specs, sections = declared(config, PublicTools(public_tools()), context_sections())
    return {"publicTools": [s.model_dump(mode="json", exclude_none=True) for s in specs], "contextSections": sections}
