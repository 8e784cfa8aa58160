"""One scenario on one engine, through a real DSH host: seed, replay, snapshot, clean up.

Each run gets a fresh DSH home copied from a per-engine template (stock: the profile as DSH
ships it, compaction-basic live; turn-memory: the same profile after `turn-memory
install`), the scenario's workspace, and a route whose context window is the scenario's.
DSH runs in its own process group: on Ctrl-C, a timeout, a provider that is down or any
error the whole group — DSH, its subprocesses and turn-memory's engine — is stopped before
this returns.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from turn_memory.config import NODE_TIMER_MAX_MS, PRE_STEP_PART_MAX_S, EngineConfig
from turn_memory.devtools.dsh_home import DshHome
from turn_memory.devtools.runtime import Runtime
from turn_memory.eval.proxy import CAPTURE_TEXT, EvalProxy
from turn_memory.eval.scenario import Scenario
from turn_memory.logs.reader import read_session_log, session_log_for

STOCK = "stock"
TURN_MEMORY = "turn-memory"
ENGINES = (STOCK, TURN_MEMORY)
#: the memory measured is the steady state: each turn's compression lands before the next
#: turn starts, however slow the provider (a user's default lets a late one land later)
EVAL_OVERRIDES = {"turns": {"landingBarrier": True}}
#: the scripted model's run is exact: nothing in it may depend on the clock. How many workers
#: share a turn (`turns.maxParts`) is read off the measured worker speed and turn pace, and jobs
#: that run side by side finish in any order, while the landing barrier waits only for the
#: previous turn's: so turns landed at different points (one block, or one by one) run to run
SCRIPTED_OVERRIDES = {"turns": {"maxParts": 1, "concurrentJobs": 1}}
#: turn-memory's waits a slow provider could outlast, in seconds: each is raised to the replay's
#: limit (unless `--set`), so that a slow worker, hint or `/compact` is waited for, not skipped
PATIENT_S = ("turns.landingWaitS", "turns.workerTimeoutS", "turns.jobTimeoutS", "thoughtHints.timeoutS",
             "compaction.rewriteWaitS", "compaction.workerTimeoutS", "compaction.jobTimeoutS")
#: the same in milliseconds (the shim's `/compact` timer)
PATIENT_MS = ("engine.manualTimeoutMs",)
#: of those, the waits the shim adds up on one timer (config.py bounds each)
PRE_STEP_WAITS = ("turns.landingWaitS", "compaction.rewriteWaitS", "compaction.workerTimeoutS")
STOP_GRACE_S = 5.0
#: how often a replay looks whether the provider went down
STOP_POLL_S = 0.2
#: placeholder model URL of the templates; each run's home points at its own proxy
_NO_MODEL = "http://127.0.0.1:9"


def eval_overrides(timeout_s: float, user_keys: frozenset[str] = frozenset(), *,
                   scripted: bool = False) -> dict[str, Any]:
    """The turn-memory config the eval adds for a replay limited to `timeout_s` (`user_keys`: the
    keys the user `--set`, kept as they are; `scripted`: the scripted model's run, pinned)."""
    out: dict[str, Any] = {section: dict(values) for section, values in EVAL_OVERRIDES.items()}
    for section, values in (SCRIPTED_OVERRIDES if scripted else {}).items():
        out.setdefault(section, {}).update({k: v for k, v in values.items() if f"{section}.{k}" not in user_keys})
    defaults = EngineConfig()
    for key in (*PATIENT_S, *PATIENT_MS):
        if key in user_keys:
            continue
        section, name = key.split(".")
        default = getattr(getattr(defaults, section), name)
        value = max(default, request_limit_ms(timeout_s) if key in PATIENT_MS else timeout_s)
        out.setdefault(section, {})[name] = min(value, PRE_STEP_PART_MAX_S) if key in PRE_STEP_WAITS else value
    return out


def request_limit_ms(timeout_s: float) -> int:
    """How long DSH waits for the model's next bytes in a replay: as long as the replay may last.
    DSH's own limit (300 s) would abort a slower provider's request, and DSH then sends it again."""
    return max(1, min(int(timeout_s * 1000), NODE_TIMER_MAX_MS))


class RunFailed(RuntimeError):
    """DSH did not finish the scenario; the message says how far it got."""


@dataclass
class EngineRun:
    engine: str
    home: DshHome
    proxy: EvalProxy
    session_id: str
    events: list[dict[str, Any]]
    records: list[dict[str, Any]]
    seconds: float
    engine_log: str = ""
    #: /compact's result ({kind, text}), None when the scenario does not compact
    compact: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    #: what happened that is worth knowing but is no fault (e.g. a step after an in-turn compaction)
    notes: list[str] = field(default_factory=list)

    @property
    def captured(self) -> Any:
        return self.proxy.captured


def prepare_template(root: Path, runtime: Runtime, engine: str, settings: list[str]) -> Path:
    """A DSH home with the profile `tm`, turn-memory installed for that engine
    (`settings`: `--set KEY=VALUE` arguments for its installer)."""
    home = DshHome(root, runtime, _NO_MODEL).create()
    if engine == TURN_MEMORY:
        sets = [a for s in settings for a in ("--set", s)]
        done = home.install_turn_memory(*sets, check=False)
        if done.returncode != 0:
            raise RunFailed(f"turn-memory install failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")
    return root


def driver_tasks(scenario: Scenario) -> list[Any]:
    tasks: list[Any] = [t.user if t.image is None else {"image": str(scenario.directory / t.image), "text": t.user}
                        for t in scenario.turns]
    if scenario.compact:
        tasks.append("/compact")
    return [*tasks, CAPTURE_TEXT]


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop DSH and everything it started (its own process group), politely, then not."""
    if proc.poll() is not None and sys.platform == "win32":
        return
    try:
        if sys.platform == "win32":
            subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True, timeout=30)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline:
                proc.poll()  # reap DSH itself: a dead leader left a zombie would keep its group "alive"
                try:
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextmanager
def _uninterrupted() -> Iterator[None]:
    """A second Ctrl-C must not cut the clean-up of the first short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_dsh(home: DshHome, argv: list[str], timeout: float, log_dir: Path,
            stop: threading.Event | None = None) -> int | None:
    """Run DSH to the end of its tasks, or until `stop` is set (None then); the group is stopped
    on any exit from here."""
    # its own process group (the other one of each pair is Popen's default); an if statement,
    # so the checker takes the Windows-only constant as Windows-only
    if sys.platform == "win32":
        creationflags, new_session = subprocess.CREATE_NEW_PROCESS_GROUP, False
    else:
        creationflags, new_session = 0, True
    with open(log_dir / "dsh.stdout", "wb") as out, open(log_dir / "dsh.stderr", "wb") as err:
        proc = subprocess.Popen(argv, cwd=home.workspace, env=home.env(), stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, creationflags=creationflags, start_new_session=new_session)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    return proc.wait(timeout=min(STOP_POLL_S, max(0.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    if stop is not None and stop.is_set():
                        return None
                    if time.monotonic() >= deadline:
                        raise RunFailed(f"DSH did not finish within {timeout:.0f}s") from None
        finally:
            with _uninterrupted():
                _stop_group(proc)  # also after a normal exit: nothing DSH started may outlive it


def run_scenario(scenario: Scenario, engine: str, template: Path, workdir: Path, proxy: EvalProxy,
                 runtime: Runtime, *, timeout: float, command_timeout_s: float,
                 user_keys: frozenset[str] = frozenset(), scripted: bool = False) -> EngineRun:
    """Raises `ProviderDown` as soon as the provider is (the replay is stopped), `RunFailed`
    when DSH did not open a session or outlasted `timeout`."""
    root = workdir / f"{scenario.name}-{engine}"
    shutil.copytree(template, root, symlinks=True)
    home = DshHome(root, runtime, proxy.base_url, context_window=scenario.window,
                   image_input=any(t.image for t in scenario.turns), stream_idle_timeout_ms=request_limit_ms(timeout))
    if scenario.workspace is not None:
        shutil.copytree(scenario.workspace, home.workspace, dirs_exist_ok=True)
    engine_log = root / "turn-memory-engine.log"
    overrides = None
    if engine == TURN_MEMORY:
        overrides = eval_overrides(timeout, user_keys, scripted=scripted)
        overrides.setdefault("engine", {})["logFile"] = str(engine_log)
    argv, report = home.run_argv(driver_tasks(scenario), engine_overrides=overrides,
                                 driver={"commandTimeoutMs": int(command_timeout_s * 1000)})
    started = time.monotonic()
    code = run_dsh(home, argv, timeout, root, proxy.stopped)
    if proxy.down is not None:
        raise proxy.down
    records = home.read_report(report)
    seconds = time.monotonic() - started
    session = next((r["session"] for r in records if "session" in r), None)
    if session is None:
        tail = (root / "dsh.stderr").read_text(errors="replace")[-2000:]
        raise RunFailed(f"DSH exited with {code} before it opened a session: {tail.strip() or '(no output)'}")
    _, events = read_session_log(session_log_for(root / "sessions", session))
    compact = next((r.get("result") for r in records if r.get("command") == "/compact"), None)
    problems = [f"turn {i + 1} ended {r['reason'].get('kind')}" for i, r in enumerate(r for r in records if "task" in r)
                if (r.get("reason") or {}).get("kind") != "completed"]
    problems += [f"off-script: {o}" for o in proxy.replay.off_script]
    problems += [f"the provider failed a {f.purpose} request: {f.error}" for f in proxy.forwarded if f.error]
    if proxy.captured is None:
        problems.append(f"no memory snapshot: DSH exited with {code} before the questions")
    if code != 0:
        problems.append(f"DSH exited with {code}")
    notes = [f"a step after a compaction past the recorded answer: {e}" for e in proxy.replay.extra]
    return EngineRun(engine, home, proxy, session, events, records, seconds,
                     engine_log.read_text(errors="replace") if engine_log.exists() else "",
                     compact if scenario.compact else None, problems, notes)
