"""Tiny factories for host-shaped session events under a dialect.

Shapes: rc8 from a real DSH 0.1.0-rc.8 log; v02 from a real DSH 0.2.1-rc.2 headless turn,
kept as `fixtures/v021/headless-turn.session.v4.jsonl` (one turn: permission/preset …
turn/start, step/start, system/message [seq 7], user/message, runtime-context snapshot
[seq 9], request/header, request/context, assistant/message with tool call [seq 14],
tool/call, tool/result [seq 19], step/end, step/start 2, assistant/message, step/end,
turn/end). `test_surface_model_vs_host_v021.py` checks the v02 builders against that log.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

from turn_memory.host.dialect import Dialect

Event = dict[str, Any]
PROVIDER = {"provider": "deepseek-official", "model": "deepseek-v4-flash"}
_ids = itertools.count(1)
V021_LOG = Path(__file__).with_name("fixtures") / "v021" / "headless-turn.session.v4.jsonl"


def new_id(prefix: str = "m") -> str:
    return f"{prefix}-{next(_ids)}"


def real_v021_log() -> tuple[dict[str, Any], list[Event]]:
    """(header, events) of the recorded DSH 0.2.1-rc.2 session."""
    lines = V021_LOG.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


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
    return dialect.tool_result_message(new_id("tool"), call_id, [{"type": "text", "text": text}])


def assistant_stream(content: list[dict[str, Any]], time: int = 1_796_000_000_000) -> list[dict[str, Any]]:
    """The embedded provider stream 0.2.1 stores on an assistant/message (fixture seq 14/22):
    per block a block-start, its chunks, a block-end carrying the block, then usage and finish."""
    stream: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        kind = block["type"]
        stream.append({"type": "chunk", "time": time, "chunk": {"type": "block-start", "index": index, "blockType": kind}})
        if kind == "tool-call":
            stream.append({"type": "tool-call-chunks", "time0": time, "index": index, "dt": [], "id": block["id"],
                           "name": block["name"], "args": [block["arguments"]]})
        else:
            stream.append({"type": f"{kind}-chunks", "time0": time, "index": index, "dt": [], "texts": [block.get("text", "")]})
    for index, block in enumerate(content):
        stream.append({"type": "chunk", "time": time, "chunk": {"type": "block-end", "index": index, "block": block}})
    stream.append({"type": "chunk", "time": time, "chunk": {"type": "usage", "usage": {"inputTokens": 10, "outputTokens": 5,
                                                                                       "totalTokens": 15}}})
    reason = "tool-calls" if any(b["type"] == "tool-call" for b in content) else "stop"
    stream.append({"type": "chunk", "time": time, "chunk": {"type": "finish", "reason": {"kind": reason}}})
    return stream


SNAPSHOT_TEXT = ("Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\n"
                 "Current working directory: \"/work/ws\".")


def snapshot_source(dialect: Dialect) -> dict[str, Any]:
    """The runtime-context snapshot's source: rc8 names the dsh-system-prompt plugin, 0.2.1 uses
    kind 'runtime-context' with the named sections (fixture seq 9)."""
    sections = [{"name": "working-directory:current", "text": "Current working directory: \"/work/ws\"."}]
    if dialect.producer_owned_sources:
        return {"kind": "runtime-context", "form": "snapshot", "sections": sections}
    return {"kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt", "form": "snapshot", "sections": sections}


class LogBuilder:
    """Appends events with consecutive seqs from `start_seq`; use one for a base log, another for a plan.

    v02: `system()` before the first turn is deferred to where 0.2.1 writes it, inside turn 1's
    first step before the user's message (fixture seq 7), so every base log reloads.
    """

    def __init__(self, dialect: Dialect, start_seq: int = 0) -> None:
        self.dialect = dialect
        self.start_seq = start_seq
        self.events: list[Event] = []
        self.turn_no = 0
        self.step_no = 0
        self._pending_system: str | None = None

    @property
    def next_seq(self) -> int:
        return self.start_seq + len(self.events)

    @property
    def v02(self) -> bool:
        return self.dialect.lifecycle_checked

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
        if etype == "step/start" and self._pending_system is not None and isinstance(data, dict):
            text, self._pending_system = self._pending_system, None
            self._system_now(text, data["turn"], data["step"])
        return seq

    def replace_op(self, start: int, end: int) -> dict[str, Any]:
        return self.dialect.replace_op(start, end)

    # -- realistic pieces -------------------------------------------------------------------
    def system(self, text: str = "You are an agent.") -> int | None:
        """The system prompt node. v02 outside a step: deferred to the next step/start."""
        if self.v02 and self.turn_no == 0:
            self._pending_system = text
            return None
        return self._system_now(text, self.turn_no, self.step_no)

    def _system_now(self, text: str, turn: int, step: int) -> int:
        msg = {"id": new_id("sys"), "role": "system", "source": {"kind": "system-prompt"}, "content": [{"type": "text", "text": text}]}
        data: dict[str, Any] = {"turn": turn, "step": step, "message": msg} if self.v02 else {"message": msg}
        return self.add("system/message", data, op="append")

    def user(self, text: str = "hello", **kw: Any) -> int:
        op = kw.pop("op", "append")
        return self.add("user/message", user_message(text), op=op, **kw)

    def snapshot(self, text: str = SNAPSHOT_TEXT) -> int:
        return self.add("user/message", user_message(text, source=snapshot_source(self.dialect)), op="append")

    def assistant(self, text: str = "ok", *, tool_calls: tuple[str, ...] = (), **kw: Any) -> int:
        op = kw.pop("op", "append")
        message = assistant_message(text, tool_calls=tool_calls)
        extra = {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                 "stream": assistant_stream(message["content"])} if self.v02 else {}
        data = self.dialect.assistant_data(self.turn_no, self.step_no, message, **extra)
        return self.add("assistant/message", data, op=op, **kw)

    def tool_call(self, call_id: str, name: str = "bash", arguments: str = '{"command": "ls"}') -> int:
        return self.add("tool/call", {"turn": self.turn_no, "step": self.step_no, "callId": call_id, "name": name,
                                      "arguments": arguments})

    def tool_result(self, call_id: str, text: str = "out", *, call_seq: int | None = None, **kw: Any) -> int:
        op = kw.pop("op", "append")
        if call_seq is not None:
            kw.setdefault("sources", [call_seq])
        data = {"turn": self.turn_no, "step": self.step_no, "message": tool_message(self.dialect, call_id, text)}
        return self.add("tool/result", data, op=op, **kw)

    def header(self) -> int:
        """The request header 0.2.1 logs inside the step, before the model call (fixture seq 10)."""
        return self.add("request/header", {"header": {"config": {**PROVIDER, "maxTokens": 4096},
                                                      "adapterDefaults": {"maxTokens": True},
                                                      "tools": [{"name": "bash", "description": "Run bash",
                                                                 "parameters": {"type": "object"}}]},
                                           "reason": "initial"})

    def turn(self, task: str = "list the workspace", *, tool: bool = True) -> dict[str, int]:
        """A full turn: turn/start, step/start, user, assistant(+tool-call), tool/call, tool/result, ...

        v02 adds what 0.2.1 writes in a first step: the runtime-context snapshot after the
        user's message and the request header (the system prompt too, in turn 1).
        """
        self.turn_no += 1
        self.step_no = 1
        seqs: dict[str, int] = {"turn_start": self.add("turn/start", {"turn": self.turn_no})}
        self.add("step/start", {"turn": self.turn_no, "step": 1})
        seqs["user"] = self.user(task)
        if self.v02:
            seqs["snapshot"] = self.snapshot()
            if self.turn_no == 1:
                self.header()
        if tool:
            call_id = new_id("call")
            seqs["call_assistant"] = self.assistant("Let me look.", tool_calls=(call_id,))
            seqs["tool_call"] = self.tool_call(call_id)
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


def base_log(dialect: Dialect, *, turns: int = 2, system: bool | None = None) -> tuple[list[Event], list[dict[str, int]]]:
    """A realistic log of `turns` tool-using turns (v02: opening with the system/message node
    0 inside turn 1 unless `system=False`)."""
    b = LogBuilder(dialect)
    b.add("permission/preset", {"preset": "workspace-write"})
    if system if system is not None else dialect.protects_system_head:
        b.system()
    marks = [b.turn(f"task {i}") for i in range(turns)]
    return b.events, marks


def checkpoint_message(dialect: Dialect, compaction_id: str, text: str = "summary") -> dict[str, Any]:
    return user_message(text, source=dialect.checkpoint_source(compaction_id))


def compaction_plan(dialect: Dialect, start_seq: int, shadowed: list[int], cid: str = "cmp-1",
                    turn: int | None = None) -> list[Event]:
    """compaction/start, compaction/summary, the replacing checkpoint, compaction/end
    (`turn`: the owner turn of an automatic compaction; None: manual, no turn open)."""
    p = LogBuilder(dialect, start_seq)
    lifecycle = {"compactionId": cid, "turn": turn}
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
    data["message"] = dialect.with_tool_result_blocks(data["message"], [{"type": "text", "text": text}])
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
