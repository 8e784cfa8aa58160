"""Realistic tool-using sessions for session-compaction tests and `bench/compaction.py`.

Every turn looks like an agent at work: a user request, an assistant step with reasoning and
tool calls whose results are build/test logs of a few KB, and a final answer. The builder
records which turn each surface node was appended in, so tests can check unit boundaries
without asking the code under test.
"""

from __future__ import annotations

import random
from typing import Any

from surface_builders import LogBuilder, new_id
from turn_memory.host.dialect import Dialect

MODULES = ("parser", "lexer", "codegen", "resolver", "printer", "cache", "scheduler", "config")


def build_log_text(rng: random.Random, lines: int) -> str:
    """A compiler/test run: what a tool result typically carries."""
    out = []
    for i in range(lines):
        mod = rng.choice(MODULES)
        kind = rng.random()
        if kind < 0.6:
            out.append(f"[{i:4d}/{lines}] Compiling src/{mod}/{mod}_{rng.randrange(40)}.rs (opt-level=2, target x86_64)")
        elif kind < 0.85:
            out.append(f"tests/{mod}/test_{mod}_{rng.randrange(90)}.py::test_case_{rng.randrange(300)} PASSED "
                       f"[{rng.randrange(100):3d}%]")
        else:
            out.append(f"warning: unused variable `tmp_{rng.randrange(99)}` in src/{mod}/mod.rs:{rng.randrange(900)}:"
                       f"{rng.randrange(80)} — consider prefixing it with an underscore")
    return "\n".join(out)



def image_ref(attachment: str, name: str | None = "screen.png") -> dict[str, Any]:
    """An rc8 ImageAttachmentRef (what DSH's attachment service returns and the log stores)."""
    return {"attachmentId": attachment, "mediaType": "image/png", "bytes": 51234, "width": 640, "height": 480,
            **({"name": name} if name is not None else {})}

class SessionBuilder(LogBuilder):
    """A LogBuilder that also remembers the turn each surface node was appended in."""

    def __init__(self, dialect: Dialect, seed: int = 0, start_seq: int = 0) -> None:
        super().__init__(dialect, start_seq)
        self.rng = random.Random(seed)
        #: surface seq -> turn number it was appended in (None: outside a turn)
        self.turn_of: dict[int, int | None] = {}
        self._open: int | None = None

    def add(self, etype: str, data: Any, *, op: Any = None, sources: Any = None, **envelope: Any) -> int:
        seq = super().add(etype, data, op=op, sources=sources, **envelope)
        if etype == "turn/start":
            self._open = data["turn"]
        elif etype == "turn/end":
            self._open = None
        if op == "append":
            self.turn_of[seq] = self._open
        return seq

    def preamble(self, *, system: bool = False, window: int | None = None) -> None:
        self.add("permission/preset", {"preset": "workspace-write"})
        if system:
            self.system("You are a careful coding agent. " * 20)
        if window is not None:
            self.context(window)

    def context(self, window: int) -> int:
        return self.add("request/context", {"contextWindow": window})

    def header(self, system: str = "You are a careful coding agent.", tools: list[dict[str, Any]] | None = None) -> int:
        config = {"provider": "deepseek-official", "model": "deepseek-v4-flash"}
        return self.add("request/header", {"header": {"config": config, "system": system, "tools": tools or []}})

    def image_user(self, text: str, attachment: str) -> int:
        """A user message with an rc8 ImageBlock `{type: 'image', attachment: ImageAttachmentRef}`."""
        msg = {"id": new_id("user"), "role": "user", "source": {"kind": "user"},
               "content": [{"type": "text", "text": text},
                           {"type": "image", "attachment": image_ref(attachment)}]}
        return self.add("user/message", msg, op="append")

    def work_turn(self, *, calls: int = 2, log_lines: int = 40, task: str | None = None,
                  image: str | None = None, close: bool = True) -> dict[str, Any]:
        """One completed (or, with close=False, still open) tool-using turn."""
        rng = self.rng
        self.turn_no += 1
        turn = self.turn_no
        mod = rng.choice(MODULES)
        marks: dict[str, Any] = {"turn": turn, "calls": []}
        self.add("turn/start", {"turn": turn})
        self.step_no = 1
        self.add("step/start", {"turn": turn, "step": 1})
        request = task or (f"Turn {turn}: the {mod} module fails on nested input; find out why, fix it and run "
                           f"the {mod} tests. Keep the public API stable. " + "Context: " + "details " * rng.randrange(10, 60))
        marks["user"] = self.image_user(request, image) if image else self.user(request)
        for step in range(1, calls + 1):
            if step > 1:
                self.step_no = step
                self.add("step/start", {"turn": turn, "step": step})
            call = new_id("call")
            seq = self.assistant(f"Step {step}: checking {mod} with cargo test -p {mod}. " + "reason " * rng.randrange(5, 30),
                                 tool_calls=(call,))
            self.events[-1]["data"]["message"]["content"].insert(
                0, {"type": "reasoning", "text": f"The {mod} failure looks like an off-by-one in the lookahead. " * 3})
            call_seq = self.tool_call(call)
            result = self.tool_result(call, build_log_text(rng, log_lines), call_seq=call_seq)
            marks["calls"].append((seq, result))
            self.add("step/end", {"turn": turn, "step": step})
        if not close:
            return marks
        self.step_no = calls + 1
        self.add("step/start", {"turn": turn, "step": self.step_no})
        marks["answer"] = self.assistant(f"Fixed {mod}: the lookahead skipped one token on nested input "
                                         f"(src/{mod}/mod.rs:{rng.randrange(900)}); {rng.randrange(20, 300)} tests pass. "
                                         + "Notes: " + "done " * rng.randrange(5, 40))
        self.add("step/end", {"turn": turn, "step": self.step_no})
        self.add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        return marks

    def open_turn(self, text: str = "Next: also make the printer handle nested input.") -> int:
        """turn/start, step/start and the user's request of a turn still running."""
        self.turn_no += 1
        self.step_no = 1
        self.add("turn/start", {"turn": self.turn_no})
        self.add("step/start", {"turn": self.turn_no, "step": 1})
        return self.user(text)


def work_session(dialect: Dialect, turns: int, *, seed: int = 0, calls: int = 2, log_lines: int = 40,
                 window: int | None = None, open_turn: bool = False, system: bool = False) -> SessionBuilder:
    b = SessionBuilder(dialect, seed)
    b.preamble(system=system, window=window)
    for _ in range(turns):
        b.work_turn(calls=calls, log_lines=log_lines)
    if open_turn:
        b.open_turn()
    return b
