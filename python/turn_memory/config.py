"""The plugin row's configuration: every key, default, bound and description, in one place.

`EngineConfig` is the single source of truth for the row's `config`:

* the engine validates what the shim sends in the handshake against it (a refusal names
  the bad key and the nearest valid one: `config_problems`);
* `turn-memory install --set/--config-json` validates against it before writing anything;
* `turn-memory doctor` runs the handshake with the profile's actual config;
* `turn-memory config` (`config_command.py`) lists every key, and writes the README's
  configuration table from it; a unit test keeps the two equal.

The `engine` section is read by the JS shim before the engine exists (how to start it,
timeouts); the shim keeps its own copy of those defaults (`shim-js/lib/defaults.js`, tested
equal to `ShimConfig`) and sends the section along in the handshake, so a bad value there is
refused like any other: the shim validates nothing itself (a value it cannot start the
engine with, it replaces by its default until the engine has named it).
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if TYPE_CHECKING:  # only annotations use it, and typing.TypeIs is 3.13+
    from typing_extensions import TypeIs


#: the longest delay a Node timer takes (2^31 - 1 ms, 24.8 days): a longer one fires at once
NODE_TIMER_MAX_MS = 2**31 - 1
#: the most each wait of the pre-step may be: the shim holds a step for 2 s + turns.landingWaitS
#: + compaction.rewriteWaitS + compaction.workerTimeoutS on one Node timer (3 x this < its limit)
PRE_STEP_PART_MAX_S = 700_000


def _node_timer_ms(value: int) -> int:
    if value > NODE_TIMER_MAX_MS:
        raise ValueError(f"at most {NODE_TIMER_MAX_MS} ms (24.8 days), the longest a Node timer waits")
    return value


def _pre_step_part_s(value: float) -> float:
    if not value <= PRE_STEP_PART_MAX_S:
        raise ValueError(f"at most {PRE_STEP_PART_MAX_S} s (8.1 days): the shim holds a step for "
                         "turns.landingWaitS + compaction.rewriteWaitS + compaction.workerTimeoutS on one Node "
                         "timer, which waits at most 24.8 days")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ShimConfig(_Section):
    """How the JS shim starts and talks to the engine."""

    command: list[str] = Field(["turn-memory", "serve"], min_length=1, description=(
        "how the shim starts the engine (argv); `turn-memory install` records "
        "`[<its python>, -m, turn_memory, serve]`"))
    transport: Literal["auto", "ipc", "tcp"] = Field("auto", description=(
        "`ipc` (socket in a private 0700 dir), `tcp` (127.0.0.1, random port), `auto` = ipc, tcp on Windows"))
    logFile: str | None = Field(None, description="also append the engine's log (names session and turn) to this file")
    startTimeoutMs: int = Field(20000, ge=0, description="how long `/compact` waits for an engine that is still booting")
    hookTimeoutMs: int = Field(2000, ge=0, description=(
        "timeout of per-step hook calls; on timeout the agent proceeds (fail open)"))
    manualTimeoutMs: int = Field(600000, ge=0, description="timeout of one `/compact`")
    restartDelayMs: int = Field(500, ge=0, description=(
        "first restart delay after the engine dies (doubles until a handshake succeeds, max 30 s)"))
    recycleAfterTimeouts: int = Field(3, ge=0, description=(
        "consecutive timeouts after which a hung engine is restarted"))
    livenessMs: int = Field(5000, ge=100, le=3_600_000, description=(
        "a long call (a pre-step that may wait, `/compact`) pings the engine this often; a ping unanswered "
        "within twice this (at least `hookTimeoutMs`) means the engine hung, and the call fails open"))

    @field_validator("startTimeoutMs", "hookTimeoutMs", "manualTimeoutMs", "restartDelayMs", "recycleAfterTimeouts",
                     "livenessMs", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        # the shim reads these as JavaScript numbers: "100" or true is none to it (pydantic would take them)
        if isinstance(value, (bool, str)):
            raise ValueError("must be a whole number")
        return value

    @field_validator("startTimeoutMs", "hookTimeoutMs", "manualTimeoutMs", "restartDelayMs", "livenessMs")
    @classmethod
    def _a_timer(cls, value: int) -> int:
        return _node_timer_ms(value)


class TurnConfig(_Section):
    """Per-turn compression."""

    enabled: bool = Field(True, description="compress every completed turn of user sessions")
    workerAttempts: int = Field(3, ge=1, description=(
        "consecutive workers without progress before a turn is left raw (an edit that leaves the working turn "
        "as it was, or as it was when a finish was refused, is no progress)"))
    maxWorkers: int = Field(8, ge=1, description="hard cap on workers per turn, progress or not: a job never spins")
    maxWorkerRequests: int = Field(24, ge=1, description=(
        "model requests one worker may make before it is stopped (counts as no progress)"))
    maxJobRequests: int = Field(96, ge=1, description=(
        "model requests all workers of one turn may make together (a batch's turns share one budget); then the "
        "turn is left raw"))
    jobTimeoutS: float = Field(1800.0, gt=0, description=(
        "wall-clock bound of one turn's compression, all workers together (a batch's turns share one bound); "
        "then the turn is left raw"))
    landingBarrier: bool = Field(False, description=(
        "off: a finished compression lands at the first pre-step after it is ready and no request waits "
        "for it; on: each turn's first request waits (`turns.landingWaitS`) for the previous turn's "
        "compression, so it already carries that turn compressed"))
    landingWaitS: float = Field(30.0, ge=0, description=(
        "with `turns.landingBarrier`: how long a turn's first request waits for the previous turn's "
        "compression, then proceeds raw (it lands at a later pre-step)"))
    # 0 by measurement: in bench/session_cost.py's coding session a worker (46 s) outlasts a turn
    # (27 s), so no block forms; waiting 1 turn start landed all 17 turns flattened anyway, one turn
    # later (cost 0.89x stock vs 0.83x, peak request 0.46x vs 0.40x on 0.2.1)
    shapeWaitTurns: int = Field(0, ge=0, description=(
        "0.2 hosts with `turns.assistantNodes=rewrite`: a ready compression that could land now only as one user message (`User: … Assistant: …`: "
        "later turns follow it on the surface) waits for a landing that keeps its user/assistant shape (the turns "
        "after it ready too: they land together at a turn's first request) until this many turn starts have "
        "passed, then lands as it can; 0: it lands at the first pre-step, 1: at the next turn start. rc.8 always "
        "keeps the shape"))
    assistantNodes: Literal["auto", "keep", "rewrite"] = Field("auto", description=(
        "`keep`: workers leave a turn's assistant nodes as they are and rewrite its user and tool nodes, so the "
        "compressed turn lands where it stands, keeping its user/assistant shape whatever the worker lag, and DSH's "
        "chat keeps every turn's usage and fold; `rewrite`: workers may also fold and rewrite assistant nodes "
        "(rc.8 replaces them in place; a 0.2 host can only append an assistant at the session's end, so there such "
        "a turn keeps its shape only if it still ends the surface when it lands, else it lands as one user "
        "message); `auto`: `rewrite` on rc.8, `keep` on 0.2"))
    failingRequests: int = Field(40, ge=1, description=(
        "worker model requests a session may spend while no compression finishes (every job together, "
        "however many run at once); then it stops compressing, says so once, and leaves its turns raw until "
        "`/compact`, a config change or a new DSH process"))
    failingJobs: int = Field(3, ge=1, description=(
        "compressions in a row that gave up before a session stops compressing (as `turns.failingRequests`)"))
    maxParts: int = Field(6, ge=1, le=16, description=(
        "at most this many workers rewrite one big turn (what a worker may rewrite of it at least "
        "`turns.batchTokens`) at once, each a part of it (whole steps), when one worker would not finish within "
        "the time the session's turns take (at the speed its workers, or before them its model, wrote so far); "
        "1: one worker per turn"))
    workerStart: Literal["spawn", "fork"] = Field("spawn", description=(
        "how a turn job's first worker starts: `spawn`, fresh, its task carrying the turn's text (up to 128,000 "
        "characters); `fork`, a copy of the agent's conversation that also sees the earlier turns, at a higher "
        "price (its request starts with the worker's own prompt, so it reads the copied conversation without the "
        "agent's cache; bench/session_cost.py), and that starts fresh instead once copying the session's log would "
        "hold the agent. Later workers of a job always start fresh"))
    readLimitChars: int = Field(24000, ge=1000, description="characters one `read_turn_nodes` call returns before paging")
    workerTimeoutS: float = Field(900.0, gt=0, description="wall-clock bound of one worker")
    batchTurns: int = Field(4, ge=1, description=(
        "one worker compresses up to this many turns together: turns dispatched while every worker slot "
        "(`turns.concurrentJobs`) is busy (fast turns behind slower workers, a restart), and small turns "
        "held until they are worth a worker; each still lands on its own; 1: one worker per turn"))
    batchTokens: int = Field(4000, ge=1, description=(
        "a worker takes further turns only while their tokens together stay within this: a bigger turn gets "
        "a worker of its own, in parallel with the others (one request writing several big rewrites would "
        "land them all late)"))
    concurrentJobs: int = Field(3, ge=1, le=16, description=(
        "compression jobs of one session that may run at once (workers for different turns in parallel); "
        "landings stay one at a time and in turn order"))
    policy: Literal["value", "size"] = Field("value", description=(
        "`value`: a completed turn, with the turns held before it, gets a worker once what it saves over the "
        "requests the session is expected to make yet (as many as it made so far, plus `turns.horizonRequests` "
        "once it used a tool) pays for the worker, or once "
        "the surface is past half of the compaction threshold; until then it is held, raw and pending "
        "(README \"What it costs\"); `size`: as soon as the held turns reach `turns.minTurnTokens` together"))
    horizonTurns: int = Field(5, ge=0, description=(
        "the `value` policy's and background checkpoints' horizon: a session that has used a tool is expected "
        "to go on for at least this many more turns of the length its turns have had (their mean requests), "
        "where that is more than as many requests again as it made so far (0: only that Lindy estimate)"))
    horizonRequests: int = Field(0, ge=0, description=(
        "the `value` policy's and background checkpoints' horizon: agent requests a session that has used a tool "
        "is expected to make beyond the estimate above (`turns.horizonTurns`, or as many again as it made so far)"))
    minTurnTokens: int = Field(600, ge=0, description=(
        "turns smaller than this together (DSH's token estimate of their surface nodes) never get a worker: "
        "they are held, raw and pending, until later turns join them (0: every turn the model answered gets "
        "a worker at once, whatever `turns.policy`; a hand-off turn, which asked for its compression, always "
        "gets one)"))

    @field_validator("landingWaitS")
    @classmethod
    def _a_pre_step_wait(cls, value: float) -> float:
        return _pre_step_part_s(value)


class ThoughtHintsConfig(_Section):
    """One-shot hint requests for long reasoning blocks, read by turn compression."""

    enabled: bool = Field(True, description=(
        "one-shot hint request per long reasoning block, read by that turn's compression"))
    minimumChars: int = Field(2000, ge=1, description="a reasoning block shorter than this gets no hint")
    provider: str | None = Field(None, description=(
        "DSH llm route (provider) of the hint request; unset: the session's own route"))
    model: str | None = Field(None, description=(
        "DSH llm route (model) of the hint request, or the endpoint's model id with `thoughtHints.baseUrl`; "
        "unset: the session's own route"))
    baseUrl: str | None = Field(None, description=(
        "call this OpenAI-compatible endpoint (`openai` client, e.g. `http://host:8000/v1`) instead of DSH's "
        "llm service; needs `thoughtHints.model`"))
    apiKeyEnv: str | None = Field(None, description=(
        "name of the environment variable that holds the endpoint's key (preferred over `thoughtHints.apiKey`)"))
    apiKey: str | None = Field(None, description="the endpoint's key, literally")
    maxOutputTokens: int = Field(1024, ge=1, description="output cap of one hint")
    timeoutS: float = Field(60.0, gt=0, description=(
        "bound of one hint request and of the compression's wait for its turn's hints"))

    @model_validator(mode="after")
    def _endpoint_needs_model(self) -> "ThoughtHintsConfig":
        if self.baseUrl and not self.model:
            raise ValueError("thoughtHints.baseUrl needs thoughtHints.model (the endpoint's model id)")
        return self


class TurnContinuationConfig(_Section):
    """Long-turn continuation: milestone reminders, the continuation tool and its follow-up."""

    enabled: bool = Field(True, description=(
        "long-turn reminders, the hand-off tool and its follow-up (needs `turns.enabled`)"))
    reminderIntervalNodes: int = Field(30, ge=1, description=(
        "remind at every multiple of this many nodes of the open turn; the tool needs one"))


class CompactionConfig(_Section):
    """Session compaction: automatic at pressure, `/compact`, context-overflow recovery."""

    auto: bool = Field(True, description="automatic compaction at pressure (in the pre-step)")
    thresholdRatio: float = Field(0.8, gt=0, lt=1, description="pressure trigger, share of the routed model's context window")
    retainRatio: float = Field(0.16, ge=0, lt=1, description="share of the window kept verbatim at the tail")
    background: bool = Field(True, description=(
        "fold the older history into a checkpoint in the background once that pays for itself (what the smaller "
        "context saves on the requests still expected, against the fold's requests and its one cache break) and "
        "the turns it folds have been carried for as much as a fold's fixed part; the checkpoint lands at a later "
        "step, and a step waits for it only when `thresholdRatio` is reached first"))
    backgroundRetainRatio: float = Field(0.05, ge=0, lt=1, description=(
        "share of the window a background fold keeps at the tail (the open turn included); turns whose own "
        "compression may still land are always kept"))
    retainTurns: int = Field(1, ge=0, description=(
        "complete turns `/compact` keeps verbatim after the checkpoint (fewer when the session is shorter)"))
    method: Literal["workers", "summary"] = Field("workers", description=(
        "`workers`: segmented working checkpoint edited by worker sessions; `summary`: one summary request "
        "through DSH's llm service (cheaper, less structured)"))
    segmentTokens: int = Field(32000, ge=100, description="token budget of one segment (a larger turn is its own segment)")
    workerAttempts: int = Field(3, ge=1, description=(
        "per segment: consecutive workers without progress before the compaction fails (an edit that leaves "
        "the working checkpoint as it was, or as it was when a finish was refused, is no progress)"))
    maxWorkers: int = Field(8, ge=1, description="hard cap on workers per segment, progress or not")
    maxWorkerRequests: int = Field(32, ge=1, description="model requests one segment worker may make")
    maxJobRequests: int = Field(1024, ge=1, description=(
        "model requests all workers of one compaction may make together (every segment); then it fails and the "
        "surface is unchanged"))
    jobTimeoutS: float = Field(3600.0, gt=0, description=(
        "wall-clock bound of one compaction's workers, all segments together; then it fails and the surface is "
        "unchanged"))
    workerTimeoutS: float = Field(900.0, gt=0, description=(
        "wall-clock bound of one segment worker (also bounds how long an automatic compaction holds a step)"))
    rewriteWaitS: float = Field(30.0, ge=0, description=(
        "how long a compaction that is about to run (at pressure, on overflow, `/compact`, compactRegion) waits "
        "for the turn compression in flight before it selects its range; that turn's landing is refused if the "
        "checkpoint took it"))
    maxPasses: int = Field(3, ge=1, description="pressure passes per step before waiting for further growth")
    handoffChars: int = Field(6000, ge=0, description=(
        "characters of the working checkpoint written so far handed to the next segment's worker"))
    readLimitChars: int = Field(24000, ge=1000, description=(
        "characters of a segment's text one `read_session_source` call returns before paging (a worker's task "
        "carries its whole segment, up to `segmentTokens`)"))
    maxTokens: int | None = Field(None, ge=1, description=(
        "output cap of the one-shot summary request (method `summary`); unset: the route's own"))
    llmTimeoutS: float = Field(600.0, gt=0, description="timeout of the one-shot summary request (method `summary`)")

    @field_validator("rewriteWaitS", "workerTimeoutS")
    @classmethod
    def _a_pre_step_wait(cls, value: float) -> float:
        return _pre_step_part_s(value)


class SessionHistoryConfig(_Section):
    """The public `read_session_history` tool."""

    enabled: bool = Field(True, description="offer `read_session_history` to the main agent")
    maxReadChars: int = Field(160000, ge=1000, description=(
        "characters one read of a turn returns; longer turns continue with `offset`"))


class EngineConfig(_Section):
    """The whole `config` of the `turn-memory` plugin row."""

    engine: ShimConfig = Field(default_factory=ShimConfig)
    turns: TurnConfig = Field(default_factory=TurnConfig)
    thoughtHints: ThoughtHintsConfig = Field(default_factory=ThoughtHintsConfig)
    turnContinuation: TurnContinuationConfig = Field(default_factory=TurnContinuationConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    sessionHistory: SessionHistoryConfig = Field(default_factory=SessionHistoryConfig)
    hostCallTimeoutS: float = Field(30.0, gt=0, description="engine→shim call timeout (apply, flush, measure)")
    maxActiveWorkers: int = Field(6, ge=1, description=(
        "turn-memory workers of one session running at once, turn and compaction workers together; a worker "
        "over it waits for one to end. DSH 0.2 starts them from the session's own pool of subagent slots "
        "(`maxActiveSubagents`, 8 by default) and refuses the agent's own subagents once it is full, so this "
        "leaves the rest of the pool to the agent: lower it where the agent runs more than two subagents at once"))


# ---- keys ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    name: str  # dotted, e.g. "turns.enabled"
    default: Any
    description: str


def _is_section(annotation: Any) -> TypeIs[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def config_keys(model: type[BaseModel] = EngineConfig, prefix: str = "") -> Iterator[Key]:
    """Every leaf key of the row config, in declaration order."""
    for name, info in model.model_fields.items():
        if _is_section(info.annotation):
            yield from config_keys(info.annotation, f"{prefix}{name}.")
        else:
            assert info.description, f"{prefix}{name} has no description"
            yield Key(prefix + name, info.get_default(call_default_factory=True), info.description)


def section_docs() -> dict[str, str]:
    """Each top-level section and what it is (its model's docstring)."""
    return {name: (info.annotation.__doc__ or "").strip() for name, info in EngineConfig.model_fields.items()
            if _is_section(info.annotation)}


def _sections(model: type[BaseModel] = EngineConfig, prefix: str = "") -> Iterator[str]:
    for name, info in model.model_fields.items():
        if _is_section(info.annotation):
            yield prefix + name
            yield from _sections(info.annotation, f"{prefix}{name}.")


# ---- validation with messages a user can act on -------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    key: str  # dotted key the problem is about ("" = the config as a whole)
    message: str  # one clause that names the key
    nearest: str | None = None  # for an unknown key: the closest valid one
    value: Any = None  # the value given for the key


class ConfigError(ValueError):
    def __init__(self, problems: list[ConfigProblem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems

    def fix(self, profile: str = "NAME") -> str:
        """The commands or edits that fix it, for the named profile."""
        return config_fix(self.problems, profile)


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value)


def nearest_key(key: str) -> str | None:
    candidates = [k.name for k in config_keys()] + list(_sections())
    found = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not found:  # a typo in the section name: compare that part alone
        head, _, _ = key.partition(".")
        found = difflib.get_close_matches(head, list(_sections()), n=1, cutoff=0.6)
    return found[0] if found else None


def config_problems(data: Any) -> list[ConfigProblem]:
    """What is wrong with a row config, one problem per bad key; [] when it is valid."""
    try:
        EngineConfig.model_validate(data if data is not None else {})
    except ValidationError as exc:
        return [_problem(error) for error in exc.errors(include_url=False)]
    return []


def _problem(error: Mapping[str, Any]) -> ConfigProblem:
    key = ".".join(str(part) for part in error.get("loc", ()))
    value = error.get("input")
    kind = error.get("type")
    if kind == "extra_forbidden":
        nearest = nearest_key(key)
        hint = f" (did you mean {nearest}?)" if nearest else " (`turn-memory config` lists every key)"
        return ConfigProblem(key, f"unknown key {key}{hint}", nearest, value)
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return ConfigProblem(key, f"{key or 'the config'} must be a mapping of keys, got {value!r}", None, value)
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if key and not message.startswith(key):
        message = f"{key}: {message} (got {value!r})"
    return ConfigProblem(key, message, None, value)


def check_config(data: Any) -> EngineConfig:
    """The validated config, or ConfigError naming every bad key."""
    problems = config_problems(data)
    if problems:
        raise ConfigError(problems)
    return EngineConfig.model_validate(data if data is not None else {})


def suggested_sets(problems: list[ConfigProblem]) -> list[str]:
    """`--set NEAREST=VALUE` options that say what each misspelt key most likely meant."""
    leaves = {k.name for k in config_keys()}
    out: list[str] = []
    for p in problems:
        if p.nearest in leaves and not isinstance(p.value, (dict, list)):
            out += ["--set", f"{p.nearest}={_yaml_scalar(p.value)}"]
    return out


def fix_options(problems: list[ConfigProblem]) -> list[str]:
    """`install` options that fix a row's config: each misspelt key's value under its nearest
    name, and every bad key removed (`--unset`: back to its default; install keeps the rest)."""
    unsets: list[str] = []
    for p in problems:
        unsets += ["--unset", p.key] if p.key else ["--replace-config"]
    return suggested_sets(problems) + list(dict.fromkeys(unsets))


def config_fix(problems: list[ConfigProblem], profile: str = "NAME") -> str:
    """How to fix the problems: the edit, and the install command that writes a valid config."""
    renames = [p for p in problems if p.nearest]
    edit = "; ".join(f"rename {p.key} to {p.nearest}" for p in renames) or "correct " + ", ".join(
        p.key or "the config" for p in problems)
    install = shlex.join(["turn-memory", "install", "--profile", profile, *fix_options(problems)])
    return (f"{edit} in the turn-memory row's config (the profile's cordis.patch.yml), or run `{install}` "
            "(install keeps the row's other keys); `turn-memory config` lists every key")
