"""Which provider/model a session's requests go to, read from its last request header. Pure."""

from __future__ import annotations

from typing import Any, Protocol

from turn_memory.host.surface import SessionLog


class AgentRoute(Protocol):
    """The agent's own route (`AgentOptions` on the wire)."""

    @property
    def provider(self) -> str | None: ...

    @property
    def model(self) -> str | None: ...


class NoRoute(Exception):
    """Neither the log nor the agent names a provider and model."""


def request_header(log: SessionLog) -> dict[str, Any] | None:
    for event in reversed(log.events):
        if event["type"] == "request/header":
            return (event.get("data") or {}).get("header")
    return None


def route(log: SessionLog, agent: AgentRoute) -> tuple[str, str]:
    """The provider/model the session last routed a request to, else the agent's own."""
    config = (request_header(log) or {}).get("config") or {}
    provider = config.get("provider") or agent.provider
    model = config.get("model") or agent.model
    if not provider or not model:
        raise NoRoute("no provider/model to compact with: route one request first or set the agent's model")
    return provider, model
