"""The milestone reminder: a named runtime-context section, shown once per milestone.

The text answered at a pre-step reaches the model as part of a durable runtime-context
snapshot only later (rc8 assembles the step's context before the pre-step hook runs, and
appends the snapshot after it), so the durable record alone would show the same milestone
twice: the engine also remembers what it answered, per session and open turn. After a
restart that memory is gone and the durable snapshots alone decide.
"""

from __future__ import annotations

import logging

from turn_memory.config import EngineConfig
from turn_memory.continuation import state, texts
from turn_memory.prompts import PromptError
from turn_memory.runtime.mirror import MirroredSession

log = logging.getLogger("turn_memory.continuation")


def enabled(config: EngineConfig) -> bool:
    return config.turns.enabled and config.turnContinuation.enabled


def context_tokens(session: MirroredSession) -> int:
    """DSH token-meter's heuristic over the whole current surface (a reference, not a trigger)."""
    return session.log.tokens()


class Reminders:
    def __init__(self) -> None:
        #: session id -> (open turn, highest milestone answered in it by this process)
        self._answered: dict[str, tuple[int, int]] = {}

    def render(self, session: MirroredSession, turn: int, step: int, config: EngineConfig) -> str:
        interval = config.turnContinuation.reminderIntervalNodes
        count = len(state.open_turn_nodes(session.log, turn))
        reached = state.milestone(count, interval)
        if reached == 0:
            return ""
        answered_turn, answered = self._answered.get(session.id, (turn, 0))
        if answered_turn == turn and reached <= answered:
            return ""
        if reached <= state.shown_milestone(session.log, turn, interval, texts.parse_reminder):
            return ""
        try:
            text = texts.reminder(count, context_tokens(session), reached, interval)
        except PromptError as exc:
            log.error("session %s turn %d: reminder prompt failed: %s", session.id, turn, exc)
            return ""
        self._answered[session.id] = (turn, reached)
        log.info("session %s turn %d step %d: long-turn reminder at %d nodes (milestone %d)", session.id, turn, step,
                 count, reached)
        return text
