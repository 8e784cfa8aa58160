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


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    compaction: ManualCompactionConfig = Field(default_factory=ManualCompactionConfig)
    #: engine -> shim call timeout for plan application and flush
    hostCallTimeoutS: float = Field(30.0, gt=0)
