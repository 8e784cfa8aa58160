"""Tiny factories for host-shaped session events under a dialect (shapes from a real rc8 log)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from turn_memory.host.dialect import Dialect

Event = dict[str, Any]
PROVIDER = {"provider": "deepseek-official", "model": "deepseek-v4-flash"}
_ids = itertools.count(1)


def new_id(prefix: str = "m") -> str:
    return f"{prefix}-{next(_ids)}"


def user_message(text: str, *, source: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": new_id("user"),
        "role": "user",
        "source": source if source is not None else {"kind": "user"},
        "content": [{"type": "text", "text": text}],
    }


def assistant_message(text: str = "", *, tool_calls: tuple[str, ...] = ()) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool-call", "id": c, "name": "bash", "arguments": '{"command": "ls"}'} for c in tool_calls]
    return {"id": new_id("asst"), "role": "assistant", "source": {"kind": "model", **PROVIDER}, "content": content}


def tool_message(dialect: Dialect, call_id: str, text: str) -> dict[str, Any]:
    return dialect.tool_result_message(
        {
            "id": new_id("tool"),
            "source": {"kind": "tool", "callId": call_id},
            "content": [
                {"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": text}], "isError": False}
            ],
        }
    )


class LogBuilder:
    """Appends events with consecutive seqs from `start_seq`; use one for a base log, another for a plan."""

    def __init__(self, dialect: Dialect, start_seq: int = 0) -> None:
        self.dialect = dialect
        self.start_seq = start_seq
        self.events: list[Event] = []
        self.turn_no = 0
        self.step_no = 0

    @property
    def next_seq(self) -> int:
        return self.start_seq + len(self.events)

    def add(
        self,
        etype: str,
        data: Any,
        *,
        op: Any = None,
        sources: Any = None,
        **envelope: Any,
    ) -> int:
        seq = self.next_seq
        event: Event = {"type": etype, "seq": seq, "time": 1_796_000_000_000 + seq, "data": data}
        if op is not None:
            event["surfaceOp"] = op
        if sources is not None:
            event["sourceEventSeqs"] = sources
        event.update(envelope)
        self.events.append(event)
        return seq

    def replace_op(self, start: int, end: int) -> dict[str, Any]:
        return self.dialect.replace_op(start, end)

    # -- realistic pieces -------------------------------------------------------------------
    def system(self, text: str = "You are an agent.") -> int:
        msg = {"id": new_id("sys"), "role": "system", "source": {"kind": "system-prompt"}, "content": [{"type": "text", "text": text}]}
        return self.add("system/message", {"message": msg}, op="append")

    def user(self, text: str = "hello", **kw: Any) -> int:
        op = kw.pop("op", "append")
        return self.add("user/message", user_message(text), op=op, **kw)

    def assistant(self, text: str = "ok", *, tool_calls: tuple[str, ...] = (), **kw: Any) -> int:
        op = kw.pop("op", "append")
        data = self.dialect.assistant_data(self.turn_no, self.step_no, assistant_message(text, tool_calls=tool_calls))
        return self.add("assistant/message", data, op=op, **kw)

    def tool_result(self, call_id: str, text: str = "out", *, call_seq: int | None = None, **kw: Any) -> int:
        op = kw.pop("op", "append")
        if call_seq is not None:
            kw.setdefault("sources", [call_seq])
        data = {"turn": self.turn_no, "step": self.step_no, "message": tool_message(self.dialect, call_id, text)}
        return self.add("tool/result", data, op=op, **kw)

    def turn(self, task: str = "list the workspace", *, tool: bool = True) -> dict[str, int]:
        """A full turn: turn/start, step/start, user, assistant(+tool-call), tool/call, tool/result, ..."""
        self.turn_no += 1
        self.step_no = 1
        seqs: dict[str, int] = {"turn_start": self.add("turn/start", {"turn": self.turn_no})}
        self.add("step/start", {"turn": self.turn_no, "step": 1})
        seqs["user"] = self.user(task)
        if tool:
            call_id = new_id("call")
            seqs["call_assistant"] = self.assistant("Let me look.", tool_calls=(call_id,))
            seqs["tool_call"] = self.add(
                "tool/call", {"turn": self.turn_no, "step": 1, "callId": call_id, "name": "bash", "arguments": "{}"}
            )
            seqs["tool_result"] = self.tool_result(call_id, "a.txt\nb.txt\n", call_seq=seqs["tool_call"])
            self.add("step/end", {"turn": self.turn_no, "step": 1})
            self.step_no = 2
            self.add("step/start", {"turn": self.turn_no, "step": 2})
        seqs["answer"] = self.assistant("Done.")
        self.add("step/end", {"turn": self.turn_no, "step": self.step_no})
        seqs["turn_end"] = self.add("turn/end", {"turn": self.turn_no, "reason": {"kind": "completed"}})
        return seqs

    def end_seed(self) -> int:
        return self.add("session/end-seed", {})


def base_log(dialect: Dialect, *, turns: int = 2, system: bool = False) -> tuple[list[Event], list[dict[str, int]]]:
    """A realistic log of `turns` tool-using turns (v02 may open with a system/message node)."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    if system:
        b.system()
    marks = [b.turn(f"task {i}") for i in range(turns)]
    return b.events, marks


def checkpoint_message(dialect: Dialect, compaction_id: str, text: str = "summary") -> dict[str, Any]:
    return user_message(text, source=dialect.checkpoint_source(compaction_id))


def compaction_plan(dialect: Dialect, start_seq: int, shadowed: list[int], cid: str = "cmp-1") -> list[Event]:
    """compaction/start, compaction/summary, the replacing checkpoint, compaction/end."""
    p = LogBuilder(dialect, start_seq)
    lifecycle = {"compactionId": cid, "turn": None}
    start = p.add("compaction/start", dict(lifecycle))
    summary = p.add(
        "compaction/summary",
        {
            "compactionId": cid,
            "summary": [{"type": "text", "text": "it happened"}],
            "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
            "shadowedSeqs": list(shadowed),
            "shadowedTokenCount": 100,
            **PROVIDER,
        },
    )
    p.add(
        "user/message",
        checkpoint_message(dialect, cid),
        op=dialect.replace_op(shadowed[0], shadowed[-1]),
        sources=[start, summary, *shadowed],
    )
    p.add("compaction/end", dict(lifecycle))
    return p.events


def rewritten_tool_result(original: Event, seq: int, dialect: Dialect, text: str = "[pruned]") -> Event:
    """A content-only rewrite of `original` (a tool/result) landing at `seq`."""
    data = copy.deepcopy(original["data"])
    data["message"]["content"][0]["content"] = [{"type": "text", "text": text}]
    return {
        "type": "tool/result",
        "seq": seq,
        "time": 1_796_000_000_000 + seq,
        "data": data,
        "surfaceOp": dialect.replace_op(original["seq"], original["seq"]),
        "sourceEventSeqs": [original["seq"]],
    }


def span(nodes: list[int], first: int, last: int) -> list[int]:
    """The surface nodes from `first` to `last` inclusive."""
    return nodes[nodes.index(first) : nodes.index(last) + 1]
