"""A throwaway DSH home with a multi-turn profile, for the demo and the end-to-end tests.

The profile `tm` is what a user's headless profile looks like (bundles dsh-base +
dsh-headless) with turn-memory installed by the real installer. Each run adds a `--patch`
overlay that swaps the one-shot headless runner for the multi-turn driver with that run's
tasks, so the installed profile itself is never edited by the harness.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turn_memory.devtools.runtime import Runtime
from turn_memory.host.dialect import Dialect
from turn_memory.host.dialects import dialect_for_version
from turn_memory.install.layout import deep_merge
from turn_memory.install.patchyaml import dump, load
from turn_memory.logs.reader import read_session_log, session_log_for

def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


DRIVER_DIR = Path(__file__).resolve().parent / "driver"
SDK_DRIVER = Path(__file__).resolve().parent / "sdk_driver.py"
PROFILE = "tm"
#: the mode bundle on top of dsh-base: the `sdk` profile is what the official Python SDK boots
MODE_BUNDLES = {"sdk": "@deepseek-ai/dsh-sdk-app", "web": "@deepseek-ai/dsh-web-app"}
#: the rows that run the headless app, replaced by the multi-turn driver for a run
HEADLESS_APP_ROWS = ("headless-startup", "headless-runner")


@dataclass
class RunResult:
    returncode: int
    records: list[dict[str, Any]]
    stdout: str
    stderr: str
    seconds: float

    @property
    def session_id(self) -> str:
        return next(r["session"] for r in self.records if "session" in r)

    def tasks(self, agent: str | None = None) -> list[dict[str, Any]]:
        """The main agent's turns, or those of the agent `{spawn: agent}` opened."""
        return [r for r in self.records if "task" in r and r.get("agent") == agent]

    def commands(self, agent: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.records if "command" in r and r.get("agent") == agent]

    def session_of(self, agent: str) -> str:
        """The session id of the agent `{spawn: agent}` opened."""
        return next(r["session"] for r in self.records if r.get("agent") == agent and "session" in r)

    @property
    def killed(self) -> bool:
        """The driver SIGKILLed its own DSH process (`{killSelf: true}`)."""
        return any(r.get("killSelf") for r in self.records)

    def logs(self, *types: str) -> list[dict[str, Any]]:
        """Warnings/errors DSH's plugins logged during the run (all, or of these types)."""
        return [r for r in self.records if "log" in r and (not types or r["log"] in types)]

    def pre_steps(self) -> list[dict[str, Any]]:
        """Every pre-step of the driven agent: {turn, step, ms} (ms: how long its hooks held it)."""
        return [r["preStep"] for r in self.records if "preStep" in r]


@dataclass
class DshHome:
    root: Path
    runtime: Runtime
    #: scripted model server; None: the user's own configured provider
    model_url: str | None
    profile: str = PROFILE
    extra_env: dict[str, str] = field(default_factory=dict)
    #: route the default model through a generic OpenAI-style route with this context
    #: window (tokens) instead of DSH's deepseek route (whose window is 1M)
    context_window: int | None = None
    #: use that generic route (window 128k unless set) and let its `fake-model` accept images;
    #: its `fake-text-model` stays text-only
    image_input: bool = False
    #: which of the generic route's models is the default
    route_model: str = "fake-model"
    #: the session log's encoding ("zstd", DSH's default, or "none" for plain session.jsonl)
    log_compression: str | None = None
    #: how long the generic route waits for the model's next bytes (pi-ai's stream watchdog;
    #: None: DSH's default, 300 s)
    stream_idle_timeout_ms: int | None = None

    @property
    def profile_dir(self) -> Path:
        return self.root / "profiles" / self.profile

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def host(self) -> str:
        return self.runtime.host

    @property
    def dialect(self) -> Dialect:
        return dialect_for_version(self.runtime.version)

    @property
    def generic_route(self) -> bool:
        """Route the default model through pi-ai's openai-completions adapter at the fake."""
        return bool(self.model_url) and bool(self.context_window or self.image_input)

    def env(self) -> dict[str, str]:
        model = {"DEEPSEEK_BASE_URL": self.model_url, "DEEPSEEK_API_KEY": "sk-turn-memory-fake"} if self.model_url else {}
        if self.model_url and self.runtime.host == "v021":
            # 0.2's bash refuses to run without a sandbox backend (bubblewrap); the scripted
            # model only runs its own fixed commands in this throwaway workspace. Never set
            # for a real provider.
            model["DSH_PERMISSION_MODE"] = "danger-full-access"
        return self.runtime.env(DSH_HOME=str(self.root), **model, **self.extra_env)

    def create(self) -> "DshHome":
        """Write the profile skeleton `dsh` would create, plus the driver plugin."""
        p = self.profile_dir
        (p / "node_modules").mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)
        (p / "cordis.yml").write_text("[]\n")
        (p / "cordis.patch.yml").write_text("# user patch layer\n[]\n")
        (p / "pnpm-workspace.yaml").write_text("packages:\n  - .\n\nnodeLinker: hoisted\nautoInstallPeers: false\n")
        (p / "package.json").write_text(json.dumps({
            "name": f"dsh-profile-{self.profile}", "private": True, "dependencies": {},
            "dsh": {"profile": {"bundles": ["@deepseek-ai/dsh-base", MODE_BUNDLES.get(self.profile, "@deepseek-ai/dsh-headless")]}},
        }, indent=2) + "\n")
        # a plugin copied into the profile resolves its @deepseek-ai peers through the home
        shutil.copytree(DRIVER_DIR, p / "node_modules" / "turn-memory-driver", dirs_exist_ok=True)
        # let dsh materialize $DSH_HOME/profiles/node_modules for this home
        self.dsh("--profile", self.profile, "--dump-config")
        return self

    def dsh(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.runtime.dsh), *args], cwd=self.workspace, env=self.env(), text=True,
                              capture_output=True, timeout=timeout, check=check)

    def install_turn_memory(self, *extra: str, cli: str | None = None,
                            check: bool = True) -> subprocess.CompletedProcess[str]:
        """`turn-memory install` into this home's profile: with `cli` (an installed
        `turn-memory` executable, as the e2e tests use), else with this Python's turn_memory."""
        argv = [cli] if cli else [sys.executable, "-m", "turn_memory"]
        return subprocess.run(
            [*argv, "install", "--profile", self.profile, "--dsh-home", str(self.root), "--dsh", str(self.runtime.dsh),
             *extra],
            cwd=self.workspace, env=self.env(), text=True, capture_output=True, timeout=300, check=check)

    def run_sdk(self, runs: list[dict[str, Any]], *, timeout: float = 120) -> dict[str, Any]:
        """Drive sessions through the official Python SDK (0.2.1 runtime venv): each run is one
        SDK runtime, i.e. one DSH process ({tasks, resume?, before_s?, linger_s?}); see sdk_driver.py."""
        if self.runtime.python is None:
            raise RuntimeError(f"DSH {self.runtime.version} has no Python SDK")
        config = self.root / f"sdk-{time.time_ns()}.json"
        config.write_text(json.dumps({"dsh_home": str(self.root), "dsh_bin": str(self.runtime.dsh),
                                      "profile": self.profile, "base_url": self.model_url,
                                      "cwd": str(self.workspace), "runs": runs}))
        proc = subprocess.run([str(self.runtime.python), str(SDK_DRIVER), str(config)], env=self.env(), text=True,
                              capture_output=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"SDK driver failed ({proc.returncode}): {proc.stderr[-3000:]}")
        return json.loads(proc.stdout)

    def row_config(self) -> dict[str, Any]:
        """The installed turn-memory row's config, as DSH composes it."""
        tree = load(self.dsh("--profile", self.profile, "--dump-config").stdout)
        return next(row for row in tree if isinstance(row, dict) and row.get("id") == "turn-memory").get("config") or {}

    def run(self, tasks: list[Any], *, resume: str | None = None, timeout: float = 60,
            engine_overrides: dict[str, Any] | None = None) -> RunResult:
        """Boot DSH once, run `tasks` as successive turns/commands, return the driver's report.

        `engine_overrides` is deep-merged into the installed row's config for this run only.
        """
        argv, report = self.run_argv(tasks, resume=resume, engine_overrides=engine_overrides)
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=self.workspace, env=self.env(), text=True, capture_output=True,
                                  timeout=timeout)
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:  # report how far it got instead of a bare timeout
            code, out, err = -9, _text(exc.stdout), _text(exc.stderr) + f"\n[harness] timed out after {timeout}s"
        return RunResult(code, self.read_report(report), out, err, time.monotonic() - started)

    @staticmethod
    def read_report(report: Path) -> list[dict[str, Any]]:
        """The driver's records so far (one JSON line each)."""
        return [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []

    def run_argv(self, tasks: list[Any], *, resume: str | None = None, engine_overrides: dict[str, Any] | None = None,
                 driver: dict[str, Any] | None = None) -> tuple[list[str], Path]:
        """The `dsh` command line that runs `tasks` (see `run`), and the report file its driver
        writes: for a caller that runs the process itself (run it in `workspace` with `env()`).
        `driver`: more driver options (e.g. `commandTimeoutMs`)."""
        stamp = f"{time.time_ns()}"
        report = self.root / f"run-{stamp}.jsonl"
        driver_config: dict[str, Any] = {**(driver or {}), "tasks": tasks, "reportFile": str(report)}
        if resume:
            driver_config["resumeSessionId"] = resume
        overlay: list[dict[str, Any]] = [
            *({"id": row, "disabled": True} for row in HEADLESS_APP_ROWS),
            {"insert": [{"id": "turn-memory-driver", "name": "turn-memory-driver", "config": driver_config}]},
        ]
        if self.generic_route:
            overlay += self._small_window_route()
        if self.log_compression:
            # an id patch replaces the whole config: restate the sessions root DSH's base sets
            overlay.append({"id": "session-persistence-jsonl", "config": {
                "root": str(self.root / "sessions"), "compression": self.log_compression}})
        if engine_overrides:
            # a patch replaces the row's whole config: restate it with the overrides merged in
            overlay.append({"id": "turn-memory", "config": deep_merge(self.row_config(), engine_overrides)})
        overlay_path = self.root / f"run-{stamp}.patch.yml"
        overlay_path.write_text(dump(overlay))
        return [str(self.runtime.dsh), "--profile", self.profile, "--patch", str(overlay_path)], report

    def _small_window_route(self) -> list[dict[str, Any]]:
        window = self.context_window or 128_000
        idle = {} if self.stream_idle_timeout_ms is None else {"streamIdleTimeoutMs": self.stream_idle_timeout_ms}
        return [
            {"id": "llm-pi-ai", "config": {"providers": {"fake-local": {
                "displayName": "Fake local", "apiKeyEnv": "DEEPSEEK_API_KEY", "api": "openai-completions",
                "baseURL": f"{self.model_url}/v1", "compat": {"supportsDeveloperRole": False, "maxTokensField": "max_tokens"},
                **idle,
                "models": [
                    {"id": "fake-model", "name": "Fake Model", "contextWindow": window, "maxTokens": 4096,
                     "input": ["text", "image"] if self.image_input else ["text"]},
                    {"id": "fake-text-model", "name": "Fake Text Model", "contextWindow": window, "maxTokens": 4096,
                     "input": ["text"]},
                ],
            }}}},
            {"id": "agent-default-model", "config": {"provider": "fake-local", "model": self.route_model}},
        ]

    def session_log(self, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return read_session_log(session_log_for(self.root / "sessions", session_id))
