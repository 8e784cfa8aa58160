"""The engine's policy configuration: every key of the plugin row's config except `engine`.

Sent by the shim in the handshake and validated here, so a typo in a profile patch fails
the handshake with a clear message instead of being silently ignored.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CompactionConfig(BaseModel):
    """Session compaction: automatic at pressure, `/compact`, context-overflow recovery (D-005/6/11)."""

    model_config = ConfigDict(extra="forbid")
    #: automatic compaction at pressure (the agent/pre-step hook)
    auto: bool = True
    #: compact when the measured context reaches this share of the routed model's window
    thresholdRatio: float = Field(0.8, gt=0, lt=1)
    #: keep at least this share of the window verbatim at the tail
    retainRatio: float = Field(0.16, ge=0, lt=1)
    #: complete turns `/compact` keeps verbatim after the checkpoint (fewer when the session is shorter)
    retainTurns: int = Field(1, ge=0)
    #: `workers`: segmented working checkpoint edited by forked workers (D-006);
    #: `summary`: one summary request through DSH's llm service (cheaper, less structured)
    method: Literal["workers", "summary"] = "workers"
    #: token budget of one segment (a single larger turn is its own segment)
    segmentTokens: int = Field(32000, ge=100)
    #: consecutive workers without an accepted mutation before a segment fails
    workerAttempts: int = Field(3, ge=1)
    #: hard cap on workers per segment, progress or not
    maxWorkers: int = Field(8, ge=1)
    maxWorkerRequests: int = Field(32, ge=1)
    workerTimeoutS: float = Field(900.0, gt=0)
    #: pressure passes per pre-step before giving up on reaching the threshold
    maxPasses: int = Field(3, ge=1)
    #: characters of earlier working memory handed to the next segment's worker
    handoffChars: int = Field(6000, ge=0)
    readLimitChars: int = Field(24000, ge=1000)
    #: output cap and timeout of the one-shot summary request (method `summary`)
    maxTokens: int | None = Field(None, ge=1)
    llmTimeoutS: float = Field(600.0, gt=0)


class TurnConfig(BaseModel):
    """Per-turn compression (design D-007, D-008)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    #: consecutive workers without an accepted replacement before the job gives up
    workerAttempts: int = Field(3, ge=1)
    #: hard cap on workers per turn, progress or not: a job can never spin
    maxWorkers: int = Field(8, ge=1)
    #: model requests one worker may make before it is stopped (counts as no progress)
    maxWorkerRequests: int = Field(24, ge=1)
    #: how long the next turn's first request waits for this turn's landing, then proceeds raw
    landingWaitS: float = Field(30.0, ge=0)
    #: characters one read_turn_nodes call returns before paging
    readLimitChars: int = Field(24000, ge=1000)
    #: wall-clock bound of one worker
    workerTimeoutS: float = Field(900.0, gt=0)
    #: a completed turn smaller than this (DSH's token estimate of its surface nodes) gets
    #: the no-op marker and no worker: compressing it would cost more than it saves (see
    #: turns/eligibility.py; 0 compresses every turn the model answered)
    minTurnTokens: int = Field(600, ge=0)


class ThoughtHintsConfig(BaseModel):
    """One-shot hint requests for long reasoning blocks, read by turn compression (D-014)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    #: a reasoning block shorter than this (characters) gets no hint request
    minimumChars: int = Field(2000, ge=1)
    #: DSH llm route; unset: the provider/model the session itself last routed to
    provider: str | None = None
    model: str | None = None
    #: set: call this OpenAI-compatible endpoint (e.g. `http://host:8000/v1`) with the
    #: `openai` client instead of DSH's llm service; `model` is then required
    baseUrl: str | None = None
    #: name of the environment variable that holds the endpoint's key (preferred over apiKey)
    apiKeyEnv: str | None = None
    apiKey: str | None = None
    #: output cap of one hint request
    maxOutputTokens: int = Field(1024, ge=1)
    #: bound of one hint request, and of the turn job's wait for its turn's hints
    timeoutS: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _endpoint_needs_model(self) -> "ThoughtHintsConfig":
        if self.baseUrl and not self.model:
            raise ValueError("thoughtHints.baseUrl needs thoughtHints.model (the endpoint's model id)")
        return self


class SessionHistoryConfig(BaseModel):
    """The public `read_session_history` tool (design D-017)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    #: characters one read of a turn returns; a longer turn continues with `offset`
    maxReadChars: int = Field(160000, ge=1000)
class TurnContinuationConfig(BaseModel):
    """Long-turn hand-off (design D-013): milestone reminders and the continuation tool."""

    model_config = ConfigDict(extra="forbid")
    #: only in effect while per-turn compression is enabled
    enabled: bool = True
    #: remind at every multiple of this many open-turn nodes; the tool needs at least one
    reminderIntervalNodes: int = Field(30, ge=1)


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    turns: TurnConfig = Field(default_factory=TurnConfig)
    thoughtHints: ThoughtHintsConfig = Field(default_factory=ThoughtHintsConfig)
    sessionHistory: SessionHistoryConfig = Field(default_factory=SessionHistoryConfig)
    turnContinuation: TurnContinuationConfig = Field(default_factory=TurnContinuationConfig)
    #: engine -> shim call timeout for plan application and flush
    hostCallTimeoutS: float = Field(30.0, gt=0)
