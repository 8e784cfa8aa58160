"""Worker protocol statistics of one turn-memory run, read from its engine log. Pure.

The engine logs one line per job outcome, naming session and turn (see turns/job.py):
`landed (a -> b nodes, w worker(s), r model request(s))`, `…; no-op marker, no worker`,
`gave up: …; the turn stays raw`, `landing refused, the turn stays raw: …`, and the job's
`job …: w worker(s) …, r model request(s), …` report; and one line per decision of the
compression policy (turns/service.py), naming every turn it decides on:
`turns 1, 2: held; <why>` or `…: compressing; <why>`. From those: how many turns a worker
was attempted on and how many landed, model requests per attempted turn, and every turn
left raw with the reason (a turn the policy still held at the end: held, with the policy's
last reason). Refusals (by rule) come from the worker requests themselves
(`routing.count_refusals`) plus the host rules a refused landing names.

Only the log up to the memory snapshot counts: the snapshot turn's end starts work on the
last turns (a policy decision naming the snapshot turn) that DSH's exit may or may not let
finish, and none of it is in the memory measured.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from turn_memory.eval.routing import RULE

_TURN_LINE = re.compile(r"session (\S+) turn (\d+): (.*)$")
#: (a turn that landed with others says so after its counts: ", in one block with turns 1, 2")
_LANDED = re.compile(r"^landed \((\d+) -> (\d+) nodes, (\d+) worker\(s\), (\d+) model request\(s\)[,)]")
_JOB = re.compile(r"^job (.*?): (\d+) worker\(s\).*?, (\d+) model request\(s\)")
_NOOP = re.compile(r"^(.*); no-op marker, no worker")
_RAW = re.compile(r"(gave up: .*?); the turn stays raw|landing refused, the turn stays raw: (.*)$")
#: a checkpoint that took turns whose workers had finished, before they landed
_FOLDED_READY = re.compile(r"session (\S+) compaction \S+: folding .*; turn\(s\) (\d+(?:, \d+)*) in their finished "
                           r"compressed form")
_POLICY = re.compile(r"session (\S+) turns? (\d+(?:, \d+)*): (held|compressing); (.*)$")
#: the decision's own restatement of its turns, before its reason
_POLICY_TURNS = re.compile(r"^turns? \d+(?:, \d+)* \(\d+ tokens\)(?: held)?: ")
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
    #: the policy's last decision on it: ("held" | "compressing", its reason)
    policy: tuple[str, str] | None = None

    @property
    def held(self) -> bool:
        return not self.landed and not self.workers and self.policy is not None and self.policy[0] == "held"


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
    #: of `raw`, the turns the policy held (no worker yet, by design)
    held: list[int] = field(default_factory=list)
    #: turns with nothing left on the final surface: a session checkpoint folded them
    folded: list[int] = field(default_factory=list)

    @property
    def requests_per_turn(self) -> float:
        return self.requests / self.attempted if self.attempted else 0.0

    def to_json(self) -> dict:
        return {"turns": self.turns, "attempted": self.attempted, "landed": self.landed, "worker_requests": self.requests,
                "requests_per_attempted_turn": round(self.requests_per_turn, 2),
                "raw": [{"turn": t, "why": why} for t, why in self.raw], "held": self.held, "folded": self.folded,
                "refusals": dict(sorted(self.refusals.items())),
                "session_compactions": [{"outcome": o, "workers": w, "requests": r} for o, w, r in self.compactions]}


def turn_outcomes(log_text: str, session_id: str, turns: int) -> dict[int, TurnOutcome]:
    """Per scenario turn (1..turns) what the engine log says happened to it."""
    out = {n: TurnOutcome(n) for n in range(1, turns + 1)}
    for line in log_text.splitlines():
        decided = _POLICY.search(line)
        if decided and decided.group(1) == session_id:
            why = _POLICY_TURNS.sub("", decided.group(4))
            for n in map(int, decided.group(2).split(", ")):
                if n in out:
                    out[n].policy = (decided.group(3), why)
            continue
        ready = _FOLDED_READY.search(line)
        if ready and ready.group(1) == session_id:
            for n in map(int, ready.group(2).split(", ")):
                if n in out and not out[n].landed:
                    out[n].raw_reason = "compressed, then folded by a checkpoint in that form before it landed"
            continue
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
        if turn.held and turn.policy and not turn.raw_reason:
            turn.raw_reason = f"held by the policy: {turn.policy[1]}"
        if not turn.landed and not turn.raw_reason:  # in plain words: nothing failed, the session ended first
            dispatched = turn.workers or (turn.policy is not None and turn.policy[0] == "compressing")
            turn.raw_reason = ("dispatched, not landed when the session ended" if dispatched else
                               "no worker started before the session ended")
    return out


def before_snapshot(log_text: str, session_id: str, turns: int) -> str:
    """The log up to the first line about a turn after the scenario's `turns` (the snapshot turn's
    end: everything from there on happened after the memory was measured)."""
    kept: list[str] = []
    for line in log_text.splitlines():
        decided = _POLICY.search(line)
        named = [int(n) for n in decided.group(2).split(", ")] if decided and decided.group(1) == session_id else []
        found = _TURN_LINE.search(line)
        if found and found.group(1) == session_id:
            named.append(int(found.group(2)))
        if any(n > turns for n in named):
            break
        kept.append(line)
    return "\n".join(kept)


def protocol_stats(log_text: str, session_id: str, turns: int, refusals: Counter[str] | None = None,
                   folded: Iterable[int] = ()) -> ProtocolStats:
    """`folded`: the turns a session checkpoint took off the surface (the log names no turns)."""
    log_text = before_snapshot(log_text, session_id, turns)
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
                         compactions=compactions, held=[t.turn for t in outcomes if t.held], folded=sorted(folded))


def turn_ranges(turns: Iterable[int]) -> str:
    """'turns 1-14, 16' / 'turn 3'"""
    ordered = sorted(set(turns))
    spans: list[list[int]] = []
    for n in ordered:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = ", ".join(f"{a}-{b}" if b > a + 1 else f"{a}, {b}" if b > a else str(a) for a, b in spans)
    return f"turn{'s' if len(ordered) > 1 else ''} {text}"


def summarize_raw(raw: Iterable[tuple[int, str]]) -> str:
    """'turns 2, 5 (no-op: below turns.minTurnTokens (600)); turns 6-9 (gave up: …)'"""
    groups: dict[str, list[int]] = {}
    for turn, why in raw:
        groups.setdefault(why, []).append(turn)
    return "; ".join(f"{turn_ranges(ts)} ({why})" for why, ts in groups.items())
