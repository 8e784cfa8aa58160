"""The suite run: every scenario on both engines, then its probes asked, then judged.

It owns the order of the work and nothing else: one DSH template per engine, then per
scenario three passes. First each engine's replay (a proxy, `session_run`, `measure`), in
`order`; then every probe asked against each engine's memory (from memory, then, where the
engine offers it, with read_session_history); then every answer judged. So
whoever plays the model (a relayed or human-played one) writes both engines' memory before it
sees a question, and answers every question before it sees a reference answer; the default
order, turn-memory first, has its per-turn workers written before stock's summary request
shows the whole session. A Ctrl-C, or a provider that is down (`ProviderDown`), raises through
it; what finished (judged) is in `results`, and `current` says what was cut short.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Callable

from turn_memory.config import EngineConfig
from turn_memory.devtools.runtime import Runtime
from turn_memory.eval.measure import EngineResult, measure
from turn_memory.eval.probes import ProbeAsker, ProbeResult, judge, offers_history
from turn_memory.eval.provider import Provider
from turn_memory.eval.proxy import CAPTURE_TEXT, EvalProxy
from turn_memory.eval.report import ScenarioResult
from turn_memory.eval.scenario import Scenario
from turn_memory.eval.session_run import ENGINES, STOCK, TURN_MEMORY, RunFailed, prepare_template, run_scenario

#: --engine-order: which engine's replay runs first
ENGINE_ORDERS = {"turn-memory,stock": (TURN_MEMORY, STOCK), "stock,turn-memory": (STOCK, TURN_MEMORY)}
DEFAULT_ORDER = "turn-memory,stock"


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
    #: the engines' replays, first to last
    order: tuple[str, ...] = ENGINE_ORDERS[DEFAULT_ORDER]
    #: the run's turn-memory config (the probes read history as it does)
    config: EngineConfig = field(default_factory=EngineConfig)
    results: list[ScenarioResult] = field(default_factory=list)
    #: "scenario (what)" while it runs
    current: str | None = None
    #: some run did not finish or reported a problem
    failed: bool = False

    def run(self, scenarios: list[Scenario], runtime: Runtime) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        templates = {e: prepare_template(self.workdir / f"template-{e}", runtime, e, self.settings) for e in ENGINES}
        for i, scenario in enumerate(scenarios, start=1):
            where = f"[{i}/{len(scenarios)}] {scenario.name}"
            measured = self._replays(scenario, where, templates, runtime)
            self._ask(scenario, measured)
            self._judge(scenario, measured)
            result = ScenarioResult(scenario)
            result.engines = {e: measured[e] for e in ENGINES if e in measured}  # the report's order
            self.results.append(result)
            for engine, m in result.engines.items():
                self.say(f"{where}: {engine} {progress(m.probes, m.history_probes, self.provider.scripted)}")
        self.current = None

    def _replays(self, scenario: Scenario, where: str, templates: dict[str, Path],
                 runtime: Runtime) -> dict[str, EngineResult]:
        """Pass 1: each engine's replay, which writes its memory."""
        out: dict[str, EngineResult] = {}
        for engine in self.order:
            self.current = f"{scenario.name} ({engine} replay)"
            started = time.monotonic()
            try:
                measured = self._replay(scenario, engine, templates[engine], runtime)
            except RunFailed as exc:
                self.say(f"{where}: {engine} failed: {exc}")
                self.failed = True
                continue
            self.failed = self.failed or bool(measured.problems)
            out[engine] = measured
            self.say(f"{where}: {engine} replayed in {time.monotonic() - started:.0f}s")
        return out

    def _replay(self, scenario: Scenario, engine: str, template: Path, runtime: Runtime) -> EngineResult:
        log = self.workdir / f"{scenario.name}-{engine}.requests.jsonl" if self.keep_logs else None
        proxy = EvalProxy(scenario, self.provider, log_path=log).start()
        try:
            run = run_scenario(scenario, engine, template, self.workdir, proxy, runtime, timeout=self.timeout,
                               command_timeout_s=self.timeout, scripted=self.provider.scripted,
                               user_keys=frozenset(s.partition("=")[0].strip() for s in self.settings))
        finally:
            proxy.stop()
        return measure(scenario, run)

    def _ask(self, scenario: Scenario, measured: dict[str, EngineResult]) -> None:
        """Pass 2: every probe, against each engine's memory: from memory (no tool), then with
        read_session_history where the engine offers it."""
        for engine, m in measured.items():
            if m.snapshot is None:
                continue
            self.current = f"{scenario.name} ({engine} probes)"
            for use_history, into in ((False, m.probes), (True, m.history_probes)):
                if use_history and not offers_history(m.snapshot.tools):
                    continue
                asker = ProbeAsker(self.provider, m.snapshot.messages, m.snapshot.tools, CAPTURE_TEXT,
                                   m.snapshot.turns, self.config.sessionHistory.maxReadChars, use_history)
                into.extend(asker.ask(probe, scenario.facts_of(probe)) for probe in scenario.probes)

    def _judge(self, scenario: Scenario, measured: dict[str, EngineResult]) -> None:
        """Pass 3: every answer judged, once all are in."""
        self.current = f"{scenario.name} (judging)"
        for engine, m in measured.items():
            for answered in [*m.probes, *m.history_probes]:
                judge(self.provider, answered, scenario.facts_of(answered.probe))
                if self.verbose:
                    how = "with history" if answered.with_history else "from memory"
                    self.say(f"    {engine} {answered.probe.id} ({answered.probe.dimension}, {how}): {answered.score} — "
                             f"{answered.reason}")


def _mean_score(probes: list[ProbeResult]) -> float | None:
    scores = [p.score for p in probes if p.score is not None]
    return mean(scores) if scores else None


def progress(memory: list[ProbeResult], history: list[ProbeResult], scripted: bool) -> str:
    """An engine's line once its scenario is judged: the mean from memory, and with history apart."""
    kept, searched = _mean_score(memory), _mean_score(history)
    if kept is None:
        return "no probe answered"
    what = "scripted probe check (machinery, not a model)" if scripted else "mean probe score"
    return f"{what} {kept:.2f} from memory" + (f", {searched:.2f} with history search" if searched is not None else "")
