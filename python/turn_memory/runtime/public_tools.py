"""The public memory tools: their specs for the handshake and the dispatch of their calls.

Each tool is a name, a JSON schema, a description read fresh from `prompts/memory-tools.md`
and a handler. A handler gets the caller's own mirrored session only (the shim sends the
calling agent's session id; there is no session selector in any schema), raises ToolError
for bad input, and never changes the session by itself.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions, ToolResult, ToolSpec
from turn_memory.config import EngineConfig
from turn_memory.host.tools import ToolError
from turn_memory.prompts import PromptError, prompt_sections
from turn_memory.runtime.mirror import MirroredSession

log = logging.getLogger("turn_memory.public_tools")
PROMPT = "memory-tools"


@dataclass(frozen=True)
class PublicCall:
    session: MirroredSession
    args: Any
    #: the caller's open turn, None outside a turn
    turn: int | None
    call_id: str | None
    agent_options: AgentOptions
    config: EngineConfig
    port: HostPort


Handler = Callable[[PublicCall], "ToolResult | Awaitable[ToolResult]"]


@dataclass(frozen=True)
class PublicTool:
    name: str
    parameters: dict[str, Any]
    handler: Handler
    #: whether the tool is offered under this config
    enabled: Callable[[EngineConfig], bool] = lambda config: True


def describe(name: str, parameters: dict[str, Any], descriptions: dict[str, str] | None = None) -> ToolSpec:
    """A tool's spec with its description from `prompts/memory-tools.md` (read fresh unless given)."""
    descriptions = prompt_sections(PROMPT) if descriptions is None else descriptions
    if name not in descriptions:
        raise PromptError(f"prompts/{PROMPT}.md has no section for {name}")
    return ToolSpec(name=name, description=descriptions[name].strip(), parameters=parameters)


class PublicTools:
    def __init__(self, tools: list[PublicTool]):
        self._tools = {t.name: t for t in tools}

    def names(self, config: EngineConfig) -> list[str]:
        """The tools offered under this config, in declaration order."""
        return [name for name, tool in self._tools.items() if tool.enabled(config)]

    def specs(self, config: EngineConfig) -> list[ToolSpec]:
        """What the shim registers; a missing description fails the handshake loudly."""
        descriptions = prompt_sections(PROMPT)
        return [describe(t.name, t.parameters, descriptions) for t in self._tools.values() if t.enabled(config)]

    async def call(self, name: str, call: PublicCall) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None or not tool.enabled(call.config):
            return ToolResult(f"unknown tool {name}", is_error=True)
        try:
            answer = tool.handler(call)
            if inspect.isawaitable(answer):
                answer = await answer
            return answer
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)
        except Exception:
            # a bug here must not break the caller's turn: it gets an error result instead
            log.exception("session %s turn %s: %s failed", call.session.id, call.turn, name)
            return ToolResult(f"{name} failed inside turn-memory (see the engine log); nothing was changed",
                              is_error=True)
