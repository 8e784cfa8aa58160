"""Worker protocol statistics of one turn-memory run, read from its engine log. Pure.

The engine logs one line per job outcome, naming session and turn (see turns/job.py):
`landed (a -> b nodes, w worker(s), r model request(s))`, `…; no-op marker, no worker`,
`gave up: …; the turn stays raw`, `landing refused, the turn stays raw: …`, and the job's
`job …: w worker(s) …, r model request(s), …` report. From those: how many turns a worker
was attempted on and how many landed, model requests per attempted turn, and every turn
left raw with the reason. Refusals (by rule) come from the worker requests themselves
(`routing.count_refusals`) plus the host rules a refused landing names.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from turn_memory.eval.routing import RULE

_TURN_LINE = re.compile(r"session (\S+) turn (\d+): (.*)$")
_LANDED = re.compile(r"^landed \((\d+) -> (\d+) nodes, (\d+) worker\(s\), (\d+) model request\(s\)\)")
_JOB = re.compile(r"^job (.*?): (\d+) worker\(s\).*?, (\d+) model request\(s\)")
_NOOP = re.compile(r"^(.*); no-op marker, no worker")
_RAW = re.compile(r"(gave up: .*?); the turn stays raw|landing refused, the turn stays raw: (.*)$")
_COMPACTION = re.compile(r"session (\S+) compaction job \d+: job (.*?): (\d+) worker\(s\), (\d+) model request\(s\)")


@dataclass
class TurnOutcome:
    turn: int
    landed: bool = False
    workers: int = 0
    requests: int = 0
    nodes: tuple[int, int] | None = None
    #: why it stayed raw (the last reason the log gave)
    raw_reason: str = ""


@dataclass
class ProtocolStats:
    turns: int
    attempted: int
    landed: int
    requests: int
    raw: list[tuple[int, str]]
    refusals: Counter[str] = field(default_factory=Counter)
    #: session compaction: (outcome, workers, requests) per job
    compactions: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def requests_per_turn(self) -> float:
        return self.requests / self.attempted if self.attempted else 0.0

    def to_json(self) -> dict:
        return {"turns": self.turns, "attempted": self.attempted, "landed": self.landed, "worker_requests": self.requests,
                "requests_per_attempted_turn": round(self.requests_per_turn, 2),
                "raw": [{"turn": t, "why": why} for t, why in self.raw],
                "refusals": dict(sorted(self.refusals.items())),
                "session_compactions": [{"outcome": o, "workers": w, "requests": r} for o, w, r in self.compactions]}


def turn_outcomes(log_text: str, session_id: str, turns: int) -> dict[int, TurnOutcome]:
    """Per scenario turn (1..turns) what the engine log says happened to it."""
    out = {n: TurnOutcome(n) for n in range(1, turns + 1)}
    for line in log_text.splitlines():
        found = _TURN_LINE.search(line)
        if not found or found.group(1) != session_id or int(found.group(2)) not in out:
            continue
        turn, what = out[int(found.group(2))], found.group(3)
        if m := _LANDED.match(what):
            turn.landed, turn.raw_reason = True, ""
            turn.nodes = (int(m.group(1)), int(m.group(2)))
            turn.workers, turn.requests = int(m.group(3)), int(m.group(4))
        elif m := _JOB.match(what):
            turn.workers, turn.requests = max(turn.workers, int(m.group(2))), max(turn.requests, int(m.group(3)))
        elif m := _NOOP.match(what):
            # "144 tokens, below turns.minTurnTokens (600): a worker would …" -> the rule only
            turn.raw_reason = "no-op: " + re.sub(r"^\d+ tokens, ", "", m.group(1)).split(": ")[0]
        elif m := _RAW.search(what):
            turn.raw_reason = m.group(1) or f"landing refused: {m.group(2)}"
    for turn in out.values():
        if not turn.landed and not turn.raw_reason:
            turn.raw_reason = "no outcome logged"
    return out


def protocol_stats(log_text: str, session_id: str, turns: int, refusals: Counter[str] | None = None) -> ProtocolStats:
    outcomes = turn_outcomes(log_text, session_id, turns).values()
    rules: Counter[str] = Counter(refusals or {})
    for line in log_text.splitlines():
        if session_id in line and "landing refused" in line:
            rules.update(RULE.findall(line))
    compactions = [(m.group(2), int(m.group(3)), int(m.group(4))) for m in _COMPACTION.finditer(log_text)
                   if m.group(1) == session_id]
    attempted = [t for t in outcomes if t.workers]
    return ProtocolStats(turns=turns, attempted=len(attempted), landed=sum(t.landed for t in outcomes),
                         requests=sum(t.requests for t in outcomes),
                         raw=[(t.turn, t.raw_reason) for t in outcomes if not t.landed], refusals=rules,
                         compactions=compactions)


def summarize_raw(raw: Iterable[tuple[int, str]]) -> str:
    """'turns 2, 5 (no-op: below turns.minTurnTokens (600)); turn 9 (gave up: …)'"""
    groups: dict[str, list[int]] = {}
    for turn, why in raw:
        groups.setdefault(why, []).append(turn)
    return "; ".join(f"turn{'s' if len(ts) > 1 else ''} {', '.join(map(str, ts))} ({why})" for why, ts in groups.items())
