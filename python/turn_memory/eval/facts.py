"""The deterministic measures of planted facts: survival on the final surface, and whether
`read_session_history`'s search finds the turn that holds each one. Pure.

A fact survives when its text appears verbatim in what the model sees, whitespace runs
counted as one space (a rewrite may re-wrap a line; it may not paraphrase it). The search
measure asks the real search function with the fact's own query (the words an agent would
look for it with) over the session's raw turns, and records the rank of the fact's turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from turn_memory.eval.routing import text_of
from turn_memory.eval.scenario import Fact
from turn_memory.history.session_history import SEARCH_PAGE, TurnRecord, render_turn, search_hits


def flat(text: str) -> str:
    return " ".join(text.split())


def holds(text: str, fact: Fact) -> bool:
    return flat(fact.text) in flat(text)


def visible_text(messages: Sequence[dict[str, Any]]) -> str:
    """Everything a model reads in these messages: text, reasoning, tool-call arguments."""
    out: list[str] = []
    for m in messages:
        out.append(text_of(m.get("content")))
        if m.get("reasoning_content"):
            out.append(str(m["reasoning_content"]))
        for call in m.get("tool_calls") or []:
            out.append(str((call.get("function") or {}).get("arguments", "")))
    return "\n".join(out)


@dataclass(frozen=True)
class FactCheck:
    fact: Fact
    #: the fact's turn holds it in the log (False: the scenario did not plant it: a scenario bug)
    planted: bool
    on_surface: bool
    #: rank of the fact's turn in the search results for its query (1 = first), None: not listed
    rank: int | None

    @property
    def found_by_search(self) -> bool:
        """On the first page of results (what one `read_session_history({query})` shows)."""
        return self.rank is not None and self.rank <= SEARCH_PAGE


def search_rank(turns: dict[int, TurnRecord], query: str, turn: int) -> int | None:
    for rank, hit in enumerate(search_hits(turns, query), start=1):
        if hit.record.turn == turn:
            return rank
    return None


def check_facts(facts: Iterable[Fact], turns: dict[int, TurnRecord], surface_text: str) -> list[FactCheck]:
    """`turns`: the session's raw turns (collect_turns of the log up to the probes)."""
    out = []
    for fact in facts:
        record = turns.get(fact.turn)
        planted = record is not None and holds(render_turn(record), fact)
        out.append(FactCheck(fact, planted, holds(surface_text, fact), search_rank(turns, fact.query, fact.turn)))
    return out


@dataclass(frozen=True)
class Recall:
    facts: int
    at1: int
    at5: int
    first_page: int

    def share(self, n: int) -> float:
        return n / self.facts if self.facts else 0.0


def recall(checks: Iterable[FactCheck]) -> Recall:
    checks = list(checks)
    return Recall(len(checks), sum(c.rank == 1 for c in checks), sum(c.rank is not None and c.rank <= 5 for c in checks),
                  sum(c.found_by_search for c in checks))
