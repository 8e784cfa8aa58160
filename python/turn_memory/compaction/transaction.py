"""The standard compaction transaction, as pure plan builders.

compaction/start is landed alone, before any model work, so the durable marker is the
lock. The commit lands summary, replacement and end together; a failure lands one
compaction/end carrying the error. Shapes follow the host's own transaction
(`@deepseek-ai/dsh-compaction-basic`), so every consumer of the log reads ours the same.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from turn_memory.bridge.protocol import CompactionResult, SeqRange
from turn_memory.compaction.selection import Selection
from turn_memory.host.dialect import Dialect
from turn_memory.host.surface import SessionLog
from turn_memory.host.tokens import estimate_message
from turn_memory.prompts import render
from turn_memory.runtime.land import Plan, PlanKind


@dataclass(frozen=True)
class Transaction:
    compaction_id: str
    source_command_id: str | None
    #: owner turn for automatic compaction, None for manual
    turn: int | None

    @staticmethod
    def new(source_command_id: str | None, turn: int | None) -> "Transaction":
        return Transaction(str(uuid.uuid4()), source_command_id, turn)

    @property
    def lifecycle(self) -> dict[str, Any]:
        data: dict[str, Any] = {"compactionId": self.compaction_id}
        if self.source_command_id is not None:
            data["sourceCommandId"] = self.source_command_id
        data["turn"] = self.turn
        return data


@dataclass(frozen=True)
class Summary:
    blocks: list[dict[str, Any]]
    raw_output: list[dict[str, Any]]
    provider: str
    model: str
    max_tokens: int | None = None
    usage: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.blocks).strip()


class NotSmaller(Exception):
    def __init__(self, message: str, framed: int) -> None:
        super().__init__(message)
        self.framed = framed


def start_plan(tx: Transaction) -> Plan:
    return Plan([{"type": "compaction/start", "data": tx.lifecycle}], label="compaction/start", kind=PlanKind.COMPACTION)


def failure_plan(tx: Transaction, error: str) -> Plan:
    return Plan([{"type": "compaction/end", "data": {**tx.lifecycle, "error": error}}], label="compaction/end (error)",
                kind=PlanKind.COMPACTION)


def shadowed_tokens(log: SessionLog, selection: Selection) -> int:
    return log.tokens(selection.shadowed)


def framing_tokens(dialect: Dialect, template: str) -> int:
    """The checkpoint message's price with an empty summary: what any checkpoint costs."""
    empty = Summary(blocks=[{"type": "text", "text": ""}], raw_output=[], provider="", model="")
    return estimate_message(checkpoint_message(dialect, Transaction("0", None, None), empty, template))


def describe(log: SessionLog, selection: Selection) -> str:
    """The selection in plain words: its turns, nodes and size."""
    turns = sorted({o[1] for s in selection.shadowed if (o := log.index.origins.get(s)) is not None and o[0] == "turn"})
    what = f"turns {turns[0]}-{turns[-1]}, " if len(turns) > 1 else f"turn {turns[0]}, " if turns else ""
    return f"{what}{len(selection.shadowed)} nodes, ~{shadowed_tokens(log, selection)} tokens"


def too_small(log: SessionLog, selection: Selection, template: str) -> str | None:
    """Why no checkpoint could be smaller than the selection (plain words, with its size), or
    None. Checked before any worker runs; a checkpoint that comes out no smaller is the same
    result, found after them (typical after a session's last tool turns: the older history is
    already compressed turns)."""
    framing = framing_tokens(log.dialect, template)
    if shadowed_tokens(log, selection) > framing:
        return None
    return (f"the older history ({describe(log, selection)}) is too small to fold: a checkpoint's framing alone is "
            f"~{framing} tokens")


def checkpoint_message(dialect: Dialect, tx: Transaction, summary: Summary, template: str) -> dict[str, Any]:
    """The checkpoint user message; `template` is `prompts/checkpoint.md`'s text."""
    text = render(template, {"summary": summary.text}).strip() + "\n"
    return {
        "id": str(uuid.uuid4()),
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": dialect.checkpoint_source(tx.compaction_id, tx.source_command_id),
    }


def check_smaller(message: dict[str, Any], shadowed: int) -> None:
    framed = estimate_message(message)
    if framed >= shadowed:
        raise NotSmaller(f"summary is not smaller than the shadowed content ({framed} estimated tokens >= {shadowed})",
                         framed)


def commit_plan(log: SessionLog, tx: Transaction, start_seq: int, selection: Selection,
                summary: Summary, message: dict[str, Any], shadowed: int) -> Plan:
    base = len(log)
    summary_data: dict[str, Any] = {
        "compactionId": tx.compaction_id,
        **({"sourceCommandId": tx.source_command_id} if tx.source_command_id is not None else {}),
        "summary": summary.blocks,
        "rawOutput": summary.raw_output,
        "llmStreamCall": True,
        "shadowedRange": {"start": selection.start, "end": selection.end},
        "shadowedSeqs": list(selection.shadowed),
        "shadowedTokenCount": shadowed,
        "provider": summary.provider,
        "model": summary.model,
        **({"maxTokens": summary.max_tokens} if summary.max_tokens is not None else {}),
        **({"usage": summary.usage} if summary.usage is not None else {}),
    }
    replacement = {
        "type": "user/message",
        "data": message,
        "surfaceOp": log.dialect.replace_op(selection.start, selection.end),
        "sourceEventSeqs": [start_seq, base, *selection.shadowed],
    }
    return Plan(
        [{"type": "compaction/summary", "data": summary_data}, replacement,
         {"type": "compaction/end", "data": tx.lifecycle}],
        spans=[list(selection.shadowed)],
        label=f"compaction {tx.compaction_id} commit",
        kind=PlanKind.COMPACTION,
    )


def result(tx: Transaction, seqs: list[int], start_seq: int, selection: Selection, summary: Summary,
           shadowed: int) -> CompactionResult:
    summary_seq, _replacement_seq, end_seq = seqs
    return CompactionResult(compactionId=tx.compaction_id, sourceCommandId=tx.source_command_id, startSeq=start_seq,
                            summarySeq=summary_seq, endSeq=end_seq, summary=summary.blocks,
                            shadowedRange=SeqRange(start=selection.start, end=selection.end),
                            shadowedSeqs=list(selection.shadowed), shadowedTokenCount=shadowed)
