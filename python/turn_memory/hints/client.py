"""The one-shot hint request: a fixed system prompt plus the reasoning as the only message.

No tools, no history, no ids: the request is the same for the same thought, wherever it
came from, so a provider can reuse the cached system-prompt prefix. Two routes:
DSH's own llm service through the shim (default: the session's own provider and model),
or any OpenAI-compatible endpoint through the `openai` client when `baseUrl` is set.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from dataclasses import dataclass
from typing import Protocol

from turn_memory.bridge.port import HostPort
from turn_memory.bridge.protocol import AgentOptions, LlmRequest
from turn_memory.config import ThoughtHintsConfig
from turn_memory.host.llm_stream import StreamAssembler
from turn_memory.host.routes import NoRoute, route
from turn_memory.host.surface import SessionLog


class HintFailed(Exception):
    pass


class HintClient(Protocol):
    @property
    def label(self) -> str:
        """Names the route in log lines; read-only, so a property serves."""
        ...

    async def generate(self, system: str, reasoning: str) -> str: ...


@dataclass
class DshLlmHints:
    port: HostPort
    session_id: str
    provider: str
    model: str
    max_tokens: int
    timeout: float

    @property
    def label(self) -> str:
        return f"dsh llm {self.provider}/{self.model}"

    async def generate(self, system: str, reasoning: str) -> str:
        request = LlmRequest(provider=self.provider, model=self.model, system=system, maxTokens=self.max_tokens,
                             messages=[{"role": "user", "content": [{"type": "text", "text": reasoning}]}])
        assembler = StreamAssembler()
        # no toolHistory: the hint model sees the thought and nothing else
        await self.port.llm_stream(self.session_id, request, assembler.extend, self.timeout, with_tool_history=False)
        out = assembler.result()
        if out.finish.get("kind") in ("error", "aborted"):
            failure = out.finish.get("failure") or {}
            raise HintFailed(f"{out.finish.get('kind')}: {failure.get('message', 'no detail')}")
        return out.text  # a hint cut at the output cap is still a useful index


@dataclass
class EndpointHints:
    base_url: str
    api_key: str
    model: str
    max_tokens: int
    timeout: float

    @property
    def label(self) -> str:
        return f"{self.base_url} {self.model}"

    async def generate(self, system: str, reasoning: str) -> str:
        from openai import AsyncOpenAI  # imported on first use: most sessions never take this route

        # no retries: a hint is optional and the turn's compression is waiting for it
        client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout, max_retries=0)
        try:
            # streamed: some local servers only stream, and a long answer keeps the read alive
            stream = await client.chat.completions.create(
                model=self.model, max_tokens=self.max_tokens, stream=True,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": reasoning}])
            parts: list[str] = []
            async for chunk in stream:
                for choice in chunk.choices:
                    if choice.delta and choice.delta.content:
                        parts.append(choice.delta.content)
            return "".join(parts)
        finally:
            await client.close()


def make_client(config: ThoughtHintsConfig, port: HostPort, session_id: str, log: SessionLog) -> HintClient:
    """The configured route; DSH's llm service falls back to the session's own route."""
    if config.baseUrl:
        assert config.model is not None  # enforced by the config validator
        key = (os.environ.get(config.apiKeyEnv) if config.apiKeyEnv else None) or config.apiKey
        # local OpenAI-compatible servers often need no key, but the client insists on one
        return EndpointHints(config.baseUrl, key or "no-key", config.model, config.maxOutputTokens, config.timeoutS)
    try:
        provider, model = route(log, AgentOptions(provider=config.provider, model=config.model))
    except NoRoute as exc:
        raise HintFailed(f"no route for the hint request: {exc}") from exc
    # an explicit config route wins over the session's
    provider, model = config.provider or provider, config.model or model
    return DshLlmHints(port, session_id, provider, model, config.maxOutputTokens, config.timeoutS)


def warm_up(config: ThoughtHintsConfig) -> None:
    """Import the `openai` client off the event loop now (about a second), not at the first thought."""
    if config.enabled and config.baseUrl:
        asyncio.get_running_loop().run_in_executor(None, importlib.import_module, "openai")
