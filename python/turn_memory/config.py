"""The engine's policy configuration: every key of the plugin row's config except `engine`.

Sent by the shim in the handshake and validated here, so a typo in a profile patch fails
the handshake with a clear message instead of being silently ignored.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ManualCompactionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: complete turns kept verbatim after the checkpoint (fewer when the session is shorter)
    retainTurns: int = Field(1, ge=0)
    #: cap on the summary's output tokens (None: the route's default)
    maxTokens: int | None = Field(None, ge=1)
    #: how long one summary request may take
    llmTimeoutS: float = Field(600.0, gt=0)


class TurnConfig(BaseModel):
    """Per-turn compression (design D-007, D-008)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    #: consecutive workers without an accepted replacement before the job gives up
    workerAttempts: int = Field(3, ge=1)
    #: model requests one worker may make before it is stopped (counts as no progress)
    maxWorkerRequests: int = Field(24, ge=1)
    #: how long the next turn's first request waits for this turn's landing, then proceeds raw
    landingWaitS: float = Field(30.0, ge=0)
    #: characters one read_turn_nodes call returns before paging
    readLimitChars: int = Field(24000, ge=1000)
    #: wall-clock bound of one worker
    workerTimeoutS: float = Field(900.0, gt=0)


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    compaction: ManualCompactionConfig = Field(default_factory=ManualCompactionConfig)
    turns: TurnConfig = Field(default_factory=TurnConfig)
    #: engine -> shim call timeout for plan application and flush
    hostCallTimeoutS: float = Field(30.0, gt=0)
