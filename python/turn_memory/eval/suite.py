"""The suite run: every scenario on both engines, then its probes asked and judged.

It owns the order of the work and nothing else: one DSH template per engine, then per
scenario and engine a proxy, the replay (`session_run`), the measures (`measure`) and the
probes (`probes`). A Ctrl-C raises through it; what finished is in `results`, and `current`
says what was cut short.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from turn_memory.config import EngineConfig
from turn_memory.devtools.runtime import Runtime
from turn_memory.eval.measure import EngineResult, measure
from turn_memory.eval.probes import ProbeAsker, judge
from turn_memory.eval.provider import Provider
from turn_memory.eval.proxy import CAPTURE_TEXT, EvalProxy
from turn_memory.eval.report import ScenarioResult
from turn_memory.eval.scenario import Scenario
from turn_memory.eval.session_run import ENGINES, RunFailed, prepare_template, run_scenario


def read_chars(settings: list[str]) -> int:
    """sessionHistory.maxReadChars as the run's turn-memory is configured (the probes' reads)."""
    for setting in settings:
        key, _, value = setting.partition("=")
        if key.strip() == "sessionHistory.maxReadChars" and value.strip().isdigit():
            return int(value)
    return EngineConfig().sessionHistory.maxReadChars


@dataclass
class SuiteRun:
    provider: Provider
    workdir: Path
    #: turn-memory config for the run (`--set KEY=VALUE`)
    settings: list[str]
    timeout: float
    #: keep each run's request log in the workdir
    keep_logs: bool
    say: Callable[[str], None]
    verbose: bool = False
    results: list[ScenarioResult] = field(default_factory=list)
    #: "scenario (engine)" while it runs
    current: str | None = None
    #: some run did not finish or reported a problem
    failed: bool = False

    def run(self, scenarios: list[Scenario], runtime: Runtime) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        templates = {e: prepare_template(self.workdir / f"template-{e}", runtime, e, self.settings) for e in ENGINES}
        for i, scenario in enumerate(scenarios, start=1):
            result = ScenarioResult(scenario)
            self.results.append(result)
            for engine in ENGINES:
                self.current = f"{scenario.name} ({engine})"
                started = time.monotonic()
                where = f"[{i}/{len(scenarios)}] {scenario.name}: {engine}"
                try:
                    measured = self._engine(scenario, engine, templates[engine], runtime)
                except RunFailed as exc:
                    self.say(f"{where} failed: {exc}")
                    self.failed = True
                    continue
                result.engines[engine] = measured
                self.failed = self.failed or bool(measured.problems)
                scores = [p.score for p in measured.probes if p.score is not None]
                self.say(f"{where} done in {time.monotonic() - started:.0f}s, " + (
                    f"mean probe score {sum(scores) / len(scores):.2f}" if scores else "no probe answered"))
        self.current = None

    def _engine(self, scenario: Scenario, engine: str, template: Path, runtime: Runtime) -> EngineResult:
        log = self.workdir / f"{scenario.name}-{engine}.requests.jsonl" if self.keep_logs else None
        proxy = EvalProxy(scenario, self.provider, log_path=log).start()
        try:
            run = run_scenario(scenario, engine, template, self.workdir, proxy, runtime, timeout=self.timeout,
                               command_timeout_s=self.timeout)
        finally:
            proxy.stop()
        measured = measure(scenario, run)
        if measured.snapshot is None:
            return measured
        asker = ProbeAsker(self.provider, measured.snapshot.messages, measured.snapshot.tools, CAPTURE_TEXT,
                           measured.snapshot.turns, read_chars(self.settings))
        for probe in scenario.probes:
            answered = asker.ask(probe, scenario.facts_of(probe))
            judge(self.provider, answered, scenario.facts_of(probe))
            measured.probes.append(answered)
            if self.verbose:
                self.say(f"    {engine} {probe.id} ({probe.dimension}): {answered.score} — {answered.reason}")
        return measured
