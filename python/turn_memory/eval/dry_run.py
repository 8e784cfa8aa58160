"""`turn-memory eval --check`: run a scenario's recorded commands without DSH or a model.

The commands run in order, each in `bash -c` in a throwaway copy of the scenario's
workspace (as DSH's bash tool runs them), so a scenario author sees every turn's tool output
and learns before a paid run whether each planted fact really is in its turn, and about how
large the raw history is (at DSH's 4 characters per token).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from turn_memory.eval.facts import holds
from turn_memory.eval.scenario import Fact, Scenario

COMMAND_TIMEOUT_S = 60
#: DSH's bash tool keeps this much of a stream (its `maxOutputBytes` default, both hosts)
MAX_OUTPUT_BYTES = 64_000


@dataclass
class TurnText:
    turn: int
    #: everything the turn puts on the record: user words, reasoning, replies, commands, outputs
    text: str
    #: the largest single tool output (bytes)
    largest_output: int


@dataclass
class CheckResult:
    turns: list[TurnText]
    missing: list[Fact]
    too_large: list[str]

    @property
    def raw_tokens(self) -> int:
        return sum(len(t.text) for t in self.turns) // 4


def run_commands(scenario: Scenario) -> list[TurnText]:
    out: list[TurnText] = []
    with tempfile.TemporaryDirectory(prefix="turn-memory-eval-check-") as tmp:
        workspace = Path(tmp) / "workspace"
        if scenario.workspace is not None:
            shutil.copytree(scenario.workspace, workspace)
        else:
            workspace.mkdir()
        for n, turn in enumerate(scenario.turns, start=1):
            parts = [turn.user]
            largest = 0
            for step in turn.steps:
                parts += [step.reasoning, step.text]
                for call in step.calls:
                    done = subprocess.run(["bash", "-c", call.command], cwd=workspace, capture_output=True,
                                          timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
                    output = (done.stdout + done.stderr).decode(errors="replace")
                    largest = max(largest, len(done.stdout), len(done.stderr))
                    parts += [call.command, output + (f"\n[exit code: {done.returncode}]" if done.returncode else "")]
            out.append(TurnText(n, "\n".join(p for p in parts if p), largest))
    return out


def check(scenario: Scenario) -> CheckResult:
    turns = run_commands(scenario)
    missing = [f for f in scenario.facts if not holds(turns[f.turn - 1].text, f)]
    too_large = [f"turn {t.turn}: a tool output of {t.largest_output:,} bytes (DSH keeps {MAX_OUTPUT_BYTES:,})"
                 for t in turns if t.largest_output > MAX_OUTPUT_BYTES]
    return CheckResult(turns, missing, too_large)
