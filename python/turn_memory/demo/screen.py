"""The demo's one screen, from the same report `turn-memory inspect` prints. Pure.

Every size and state on it is `inspection.report`'s (the one fold of the log both commands
run), so the demo and `inspect` cannot disagree about a session; requests and cost are the
scripted model's (`demo.requests`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turn_memory.demo.requests import COMPACT, Costs
from turn_memory.demo.turn_view import NodeView, clip


@dataclass(frozen=True)
class Showcase:
    """One compressed turn, before and after."""

    turn: int
    before: list[NodeView]
    after: list[NodeView]


@dataclass(frozen=True)
class DemoFacts:
    report: dict[str, Any]  # `inspect_log`'s report of the session
    asked: Mapping[int, str]  # turn -> what the user asked
    compact_at: int  # the turn `/compact` ran after
    compact_text: str  # what `/compact` answered
    costs: Costs
    min_turn_tokens: int
    showcase: Showcase | None
    read_back: str | None  # what read_session_history returned to the model
    read_back_by: int = 0  # the turn that read it


def _n(value: int) -> str:
    return f"{value:,}"


def state_text(turn: Mapping[str, Any], min_turn_tokens: int) -> str:
    """A turn's state in words: what happened to it, and why."""
    state, before = turn["state"], turn["before"]
    if state == "compressed":
        text = "compressed by a worker; the original stays in the log"
    elif state == "no-op":
        text = "left as is: its worker found nothing to shorten"
    elif state == "pending" and before["tokens"] < min_turn_tokens:
        text = (f"held, raw: below turns.minTurnTokens ({min_turn_tokens} tok) a worker would cost more than it "
                "saves; it waits for later turns to join it")
    elif state == "pending":
        text = "pending: DSH exited before its compression landed; it lands when the session resumes"
    elif state == "open":
        text = "open: the turn did not finish"
    else:
        text = "untouched: no turn-memory marker (turn-memory was not running)"
    extra = turn["after"]["nodes"] - before["nodes"]
    if state != "compressed" and extra > 0:  # rc.8: a landing keeps the host's snapshot at the tail
        text += f"; +{extra} msg: DSH's runtime-context snapshot, restated here when the turn before it landed"
    if turn["shadowed_by"] is not None:
        text += "; then folded into the checkpoint"
    return text


def _size(size: Mapping[str, int]) -> str:
    return f"{size['nodes']:>2} msgs ~{_n(size['tokens']):>5} tok"


def turn_table(facts: DemoFacts) -> list[str]:
    costs = facts.costs
    lines = [f"  turn  {'the user asked':<34}  requests*        cost*      before -> after"]
    for turn in facts.report["turns"]:
        n = turn["turn"]
        cost = costs.by_turn.get(n)
        requests = f"{cost.agent_requests} + {cost.worker_requests} worker" if cost else "-"
        usd = f"${cost.usd:.5f}" if cost else ""
        lines.append(f"  {n:>4}  {clip(facts.asked.get(n, ''), 34):<34}  {requests:<15}  {usd:<9}  "
                     f"{_size(turn['before'])} -> {_size(turn['after'])}")
        state = state_text(turn, facts.min_turn_tokens)
        first = costs.batched_with.get(n)
        if first is not None and turn["state"] == "compressed":  # its worker's requests are on that row
            state = state.replace("compressed by a worker", f"compressed by turn {first}'s worker, with turn {first} "
                                                            f"(its requests count there)", 1)
        lines.append(f"        {state}")
        if n == facts.compact_at and COMPACT in costs.by_turn:
            compact = costs.by_turn[COMPACT]
            requests = f"0 + {compact.worker_requests} worker"
            lines.append(f"     -  {'/compact':<34}  {requests:<15}  ${compact.usd:<8.5f}  {clip(facts.compact_text, 44)}")
    count = f"{costs.requests} in all"
    if costs.other_requests:  # so that the rows and the total add up
        count = (f"{costs.requests - costs.other_requests} in the rows and {costs.other_requests} of DSH's own "
                 f"(the session's title): {count}")
    lines.append(f"  * the agent's + the turn's worker's model requests; {count}, ${costs.total_usd:.4f} at DeepSeek "
                 "list prices with prefix caching (4 characters per token).")
    lines.append("    The scripted model also plays the workers: it decides how much a turn shrinks.")
    return lines


def checkpoint_lines(report: Mapping[str, Any]) -> list[str]:
    out = []
    for c in report["checkpoints"]:
        sh = c["shadowed"]
        turns = f"turns {sh['turns'][0]}-{sh['turns'][1]}" if sh["turns"] else "loose messages"
        smaller = 100 * (sh["tokens"] - c["tokens"]) // max(sh["tokens"], 1)
        out.append(f"  /compact folded {turns} ({sh['nodes']} messages, ~{_n(sh['tokens'])} tok) into one checkpoint "
                   f"of ~{_n(c['tokens'])} tok ({smaller}% smaller); the turns after it stay as they are")
    return out


#: characters of a node's preview in the before/after columns
SHOWCASE_WIDTH = 46


def showcase_lines(show: Showcase, width: int = SHOWCASE_WIDTH) -> list[str]:
    before_tok = sum(v.tokens for v in show.before)
    after_tok = sum(v.tokens for v in show.after)
    out = [f"  turn {show.turn} before ({len(show.before)} msgs, ~{_n(before_tok)} tok, the raw log)".ljust(width + 17)
           + f"after ({len(show.after)} msgs, ~{_n(after_tok)} tok, what the model saw)"]
    for i in range(max(len(show.before), len(show.after))):
        left = _node(show.before[i], width) if i < len(show.before) else ""
        right = _node(show.after[i], width) if i < len(show.after) else ""
        out.append(f"    {left:<{width + 13}}{right}".rstrip())
    return out


def _node(view: NodeView, width: int) -> str:
    return f"{view.role:>9}: {view.preview}"


def sees_lines(report: Mapping[str, Any]) -> list[str]:
    surface, before, saved = report["surface"], report["before"], report["savings"]
    return [f"  the model now sees {_n(surface['nodes'])} messages, ~{_n(surface['tokens'])} tok; the raw log holds "
            f"{_n(before['nodes'])}, ~{_n(before['tokens'])} tok ({saved['percent']}% less), and nothing was deleted "
            "from it"]


def screen(facts: DemoFacts, *, verbose: bool = False) -> list[str]:
    lines = ["[3/3] what turn-memory did (the same report as `turn-memory inspect`)", *turn_table(facts), ""]
    if facts.showcase is not None:
        lines += [*showcase_lines(facts.showcase), ""]
    lines += checkpoint_lines(facts.report)
    lines += sees_lines(facts.report)
    if facts.read_back:
        size = re.search(r"\((\d+) nodes, ([\d,]+) characters", facts.read_back)
        got = f": {size[1]} messages, {size[2]} characters" if size else ""
        lines.append(f"  nothing was lost: turn {facts.read_back_by} read turn 1's original back with "
                     f"read_session_history{got}" + ("" if verbose else " (--verbose prints it)"))
        if verbose:
            lines += [f"    | {line[:110]}" for line in facts.read_back.splitlines()[:20]]
    return lines


def answers_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The transcript (--verbose)."""
    out = []
    for record in records:
        if "task" in record:
            out += [f"      > {record['task']}", f"        {record.get('text', '')[:300]}"]
        elif "command" in record:
            out += [f"      > {record['command']}", f"        {(record.get('result') or {}).get('text')}"]
    return out


def next_lines(*, inspect: str, engine_log: str, own: str, on_path: str | None) -> list[str]:
    """What to run after the demo, each command as the user's shell takes it. `on_path`: the
    command that puts `turn-memory` on PATH, when it is not there yet (the others need it)."""
    lines = ["next:"]
    if on_path is not None:
        lines.append(f"  turn-memory is not on your PATH yet; put it there first:  {on_path}")
    lines += [f"  the same report, from the log on disk:  {inspect}",
              f"  the engine's log (names session and turn): {engine_log}",
              f"  this DSH for your own profiles:  {own}"]
    return lines
