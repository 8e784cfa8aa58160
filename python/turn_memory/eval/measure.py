"""What one engine's run left: its memory snapshot, sizes, fact survival, protocol statistics
and what its memory requests cost. Deterministic given the run; probes are scored apart.

Sizes use DSH's own token heuristic (the token meter's, `SessionLog.tokens`): the raw history
is every message the scenario's turns appended (runtime-context snapshots left out); the
final surface is what the model sees at the snapshot, the snapshot turn itself and runtime
context left out, checkpoints and compressed turns in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from turn_memory.eval import routing
from turn_memory.eval.facts import FactCheck, check_facts, visible_text
from turn_memory.eval.probes import ProbeResult
from turn_memory.eval.protocol_stats import ProtocolStats, protocol_stats
from turn_memory.eval.provider import Usage
from turn_memory.eval.proxy import CAPTURE_TEXT
from turn_memory.eval.scenario import Scenario
from turn_memory.eval.session_run import TURN_MEMORY, EngineRun
from turn_memory.history.session_history import TurnRecord, collect_turns
from turn_memory.host.dialect import is_runtime_context
from turn_memory.host.surface import SessionLog


@dataclass
class Snapshot:
    """The session as the probes see it."""

    #: raw turns up to the snapshot turn (what read_session_history reads)
    turns: dict[int, TurnRecord]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    raw_tokens: int
    surface_tokens: int
    #: the turns with a node on the final surface (raw or compressed; a checkpoint folded the rest)
    surface_turns: frozenset[int] = frozenset()

    @property
    def compression(self) -> float:
        return 1 - self.surface_tokens / self.raw_tokens if self.raw_tokens else 0.0


@dataclass
class EngineResult:
    engine: str
    seconds: float
    problems: list[str]
    snapshot: Snapshot | None
    facts: list[FactCheck]
    #: purpose -> usage of every request forwarded to the provider during the replay
    memory_usage: dict[str, list[Usage]]
    compact: dict[str, Any] | None
    protocol: ProtocolStats | None
    #: every probe answered from memory (no tool): what the memory kept
    probes: list[ProbeResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the same probes with read_session_history offered (turn-memory only): what the search adds
    history_probes: list[ProbeResult] = field(default_factory=list)


def _conversation(message: dict[str, Any] | None) -> bool:
    return message is not None and message.get("role") in ("user", "assistant", "tool") \
        and not is_runtime_context(message.get("source"))


def snapshot(run: EngineRun) -> Snapshot | None:
    captured = run.captured
    turns = collect_turns(run.events)
    capture = next((t for t in turns.values() if t.first_user.strip() == CAPTURE_TEXT), None)
    if captured is None or capture is None:
        return None
    before = collect_turns(run.events[:capture.start])
    log = SessionLog(run.home.dialect, run.events)
    raw = [n.seq for t in before.values() for n in t.nodes]
    origins = log.index.origins
    surface = [s for s in log.nodes if origins.get(s) != ("turn", capture.turn) and _conversation(log.message_of(s))]
    turns_seen = frozenset(o[1] for s in surface if (o := origins.get(s)) and o[0] == "turn" and isinstance(o[1], int))
    return Snapshot(before, captured.messages, captured.tools, log.tokens(raw), log.tokens(surface), turns_seen)


def measure(scenario: Scenario, run: EngineRun) -> EngineResult:
    snap = snapshot(run)
    problems = list(run.problems)
    facts: list[FactCheck] = []
    if snap is not None:
        for i, turn in enumerate(scenario.turns, start=1):
            if snap.turns.get(i) is None or not snap.turns[i].first_user.strip().startswith(turn.user):
                problems.append(f"DSH's turn {i} is not the scenario's turn {i}: facts are checked against the wrong turns")
                break
        seen = visible_text([m for m in snap.messages if routing.text_of(m.get("content")).strip() != CAPTURE_TEXT])
        facts = check_facts(scenario.facts, snap.turns, seen)
        problems += [f"fact {c.fact.id} is not in turn {c.fact.turn}'s original messages (scenario bug)"
                     for c in facts if not c.planted]
    usage: dict[str, list[Usage]] = {}
    for f in run.proxy.forwarded:
        usage.setdefault(f.purpose, []).append(f.usage)
    stats = None
    if run.engine == TURN_MEMORY:
        refused: Counter[str] = Counter()
        for purpose in (routing.TURN_WORKER, routing.SESSION_WORKER):
            refused += routing.count_refusals(run.proxy.worker_messages(purpose))
        folded = [n for n in range(1, len(scenario.turns) + 1) if snap is not None and n not in snap.surface_turns]
        stats = protocol_stats(run.engine_log, run.session_id, len(scenario.turns), refused, folded)
    return EngineResult(run.engine, run.seconds, problems, snap, facts, usage, run.compact, stats, notes=run.notes)
