"""`continue_after_turn_compression({handoff})`: end a long root turn with a hand-off.

Allowed only in an open turn whose work has reached the first milestone. A success
concludes the turn (`concludeTurn()` in the shim); the durable call/result pair it leaves
is the continuation request the dispatcher acts on after the turn's compression.
"""

from __future__ import annotations

from pydantic import Field

from turn_memory.bridge.protocol import ToolResult
from turn_memory.continuation import state, texts
from turn_memory.continuation.reminder import enabled
from turn_memory.host import continuations
from turn_memory.host.tools import ToolArgs, ToolError, tool_schema
from turn_memory.runtime.public_tools import PublicCall, PublicTool


# the schema the model sees; `handle` reads the argument leniently (`handoff_of`)
class ContinuationArgs(ToolArgs):
    handoff: str = Field(description=(
        "What is done, the current state, what is unresolved, and exactly what the next turn must do."))


PARAMETERS = tool_schema(ContinuationArgs)


def handle(call: PublicCall) -> ToolResult:
    if call.turn is None:
        raise ToolError(f"{continuations.TOOL} can only be called inside an open turn")
    if not isinstance(call.args, (dict, str)) or not continuations.handoff_of(call.args):
        raise ToolError("`handoff` must be a non-empty string: what is done, the current state, what is unresolved "
                        "and what the next turn must do; the turn goes on")
    interval = call.config.turnContinuation.reminderIntervalNodes
    count = len(state.open_turn_nodes(call.session.log, call.turn))
    if count < interval:
        raise ToolError(f"this turn is not long yet ({count} of {interval} context nodes); {continuations.TOOL} is "
                        "only available once a long-turn reminder has appeared — continue working in this turn")
    return ToolResult(texts.accepted(), conclude=True)


def public_tool() -> PublicTool:
    return PublicTool(name=continuations.TOOL, parameters=PARAMETERS, handler=handle, enabled=enabled)
