"""One asynchronous hint task per long reasoning block, handed to the turn's compression.

Started live when the host's stream closes a long reasoning block, and otherwise from the
turn's durable assistant messages (at turn end, or when a job starts after a restart). A
block is requested at most once while its turn is pending; the job takes the turn's hints
(waiting, bounded) and they are dropped with the job. A failed, slow or empty hint is
logged and simply missing: the raw reasoning stays the worker's full source
(docs/decisions.md#long-thoughts-get-hints).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from turn_memory.bridge.port import HostPort
from turn_memory.config import EngineConfig, ThoughtHintsConfig
from turn_memory.hints.client import HintClient, make_client
from turn_memory.hints.detect import durable_blocks, is_long, live_block, long_blocks, open_turn_blocks
from turn_memory.host.reasoning import Hint, HintKey, ReasoningBlock
from turn_memory.prompts import render_prompt
from turn_memory.runtime.mirror import MirroredSession

log = logging.getLogger("turn_memory.hints")

ClientFactory = Callable[[ThoughtHintsConfig, HostPort, str, Any], HintClient]


@dataclass
class _Pending:
    block: ReasoningBlock
    task: "asyncio.Task[str | None]"


class HintService:
    def __init__(self, client_factory: ClientFactory = make_client) -> None:
        self._client_factory = client_factory
        #: (session, turn) -> block key -> its task
        self._turns: dict[tuple[str, int], dict[HintKey, _Pending]] = {}

    # -- triggers ----------------------------------------------------------------------
    def on_events(self, session: MirroredSession, events: list[dict[str, Any]], reset: bool,
                  port: Callable[[], HostPort], config: EngineConfig) -> None:
        hints = config.thoughtHints
        if not self._wanted(session, config):
            return
        if reset:
            # a replay of the whole log (the engine connected or reconnected): ended turns are
            # recovered by their jobs; the open turn's finished thoughts are indexed now
            for block in long_blocks(open_turn_blocks(session.log.events), hints.minimumChars):
                self.start(session, block, port(), hints, "caught up after connecting")
            return
        for event in events:
            live = live_block(event)
            if live is not None:
                if is_long(live, hints.minimumChars):
                    self.start(session, live, port(), hints, "live")
            elif event["type"] == "turn/end":
                # an adapter that never sent a block-end: the durable messages have the blocks
                self.start_missing(session, event["data"]["turn"], port(), hints)

    def on_stream(self, session: MirroredSession, block: ReasoningBlock, port: Callable[[], HostPort],
                  config: EngineConfig) -> None:
        """0.2.x: a live reasoning block-end from the agent's assistant stream."""
        hints = config.thoughtHints
        if self._wanted(session, config) and is_long(block, hints.minimumChars):
            self.start(session, block, port(), hints, "live")

    @staticmethod
    def _wanted(session: MirroredSession, config: EngineConfig) -> bool:
        """Hints help a worker rewrite reasoning: none where the workers keep the assistant
        nodes, reasoning and all (0.2's default, `turns.assistantNodes`)."""
        return config.thoughtHints.enabled and config.turns.enabled and session.is_user_session \
            and not session.log.dialect.keeps_assistants(config.turns.assistantNodes)

    def start_missing(self, session: MirroredSession, turn: int, port: HostPort,
                      config: ThoughtHintsConfig) -> list[ReasoningBlock]:
        """Start hints for the turn's long durable blocks not started yet; returns those blocks."""
        session_log = session.log
        durable = durable_blocks(session_log.events, turn, session_log.index.turn_span(turn))
        blocks = long_blocks(durable, config.minimumChars)
        for block in blocks:
            self.start(session, block, port, config, "from the durable message")
        return blocks

    def start(self, session: MirroredSession, block: ReasoningBlock, port: HostPort, config: ThoughtHintsConfig,
              why: str) -> bool:
        bucket = self._turns.setdefault((session.id, block.turn), {})
        if block.key in bucket:
            return False
        task = asyncio.get_running_loop().create_task(self._request(session, block, port, config))
        bucket[block.key] = _Pending(block, task)
        log.info("session %s turn %d: thought hint requested for step %d (%d chars of reasoning, %s)",
                 session.id, block.turn, block.step, len(block.text), why)
        return True

    # -- one request -------------------------------------------------------------------
    async def _request(self, session: MirroredSession, block: ReasoningBlock, port: HostPort,
                       config: ThoughtHintsConfig) -> str | None:
        where = f"session {session.id} turn {block.turn}: thought hint for step {block.step}"
        started = time.monotonic()
        route = "?"
        try:
            client = self._client_factory(config, port, session.id, session.log)
            route = client.label
            system = render_prompt("thought-hints", {})
            text = (await asyncio.wait_for(client.generate(system, block.text), config.timeoutS)).strip()
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError:
            log.warning("%s timed out after %.0fs (%s); compression goes on without it", where, config.timeoutS, route)
            return None
        except Exception as exc:  # route, transport, provider: a missing hint, never a failed turn
            log.warning("%s failed (%s): %s; compression goes on without it", where, route, exc)
            return None
        if not text:
            log.info("%s came back empty (%s)", where, route)
            return None
        log.info("%s ready in %.1fs (%s, %d chars)", where, time.monotonic() - started, route, len(text))
        return text

    # -- the turn's compression --------------------------------------------------------
    async def take(self, session: MirroredSession, turn: int, port: HostPort, config: ThoughtHintsConfig) -> list[Hint]:
        """The turn's finished, non-empty hints in reasoning order; waits at most `timeoutS`.

        Starts what is missing first (after a restart nothing was started live). Only blocks
        the durable messages hold count: a hint of an attempt the host retried is dropped.
        """
        if not config.enabled:
            return []
        blocks = self.start_missing(session, turn, port, config)
        bucket = self._turns.get((session.id, turn), {})
        wanted = [bucket[b.key] for b in blocks if b.key in bucket]
        if not wanted:
            return []
        _, pending = await asyncio.wait([p.task for p in wanted], timeout=config.timeoutS)
        if pending:
            log.info("session %s turn %d: %d thought hint(s) not ready after %.0fs; compressing without them",
                     session.id, turn, len(pending), config.timeoutS)
        out = [Hint(p.block, text) for p in wanted
               if p.task.done() and not p.task.cancelled() and (text := p.task.result())]
        self.forget(session.id, turn)
        return out

    def forget(self, session_id: str, turn: int) -> None:
        """Drop a turn's hints (never persisted); cancel what is still running."""
        for pending in self._turns.pop((session_id, turn), {}).values():
            pending.task.cancel()

    def forget_session(self, session_id: str) -> None:
        for sid, turn in [k for k in self._turns if k[0] == session_id]:
            self.forget(sid, turn)

    def close(self) -> None:
        for sid, turn in list(self._turns):
            self.forget(sid, turn)

    def started(self, session_id: str, turn: int) -> list[ReasoningBlock]:
        """The blocks of a turn with a hint task (for tests and diagnostics)."""
        return [p.block for p in self._turns.get((session_id, turn), {}).values()]
