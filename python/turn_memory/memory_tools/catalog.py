"""Which public tools and runtime-context sections the engine offers (one place to add one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from turn_memory.config import EngineConfig
from turn_memory.host.mirror import MirroredSession
from turn_memory.memory_tools import read_image
from turn_memory.memory_tools.registry import PublicTool
from turn_memory.workers import SharedTool


@dataclass(frozen=True)
class ContextSection:
    """A named runtime-context section: its text for the coming step ('' = not shown)."""

    name: str
    render: Callable[[MirroredSession, int, int, EngineConfig], str]
    enabled: Callable[[EngineConfig], bool] = lambda config: True


def public_tools() -> list[PublicTool]:
    return [read_image.public_tool()]


def worker_tools() -> dict[str, SharedTool]:
    """Public tools also mounted in both compression-worker scopes, answered for the parent session."""
    return {read_image.NAME: read_image.read_image}


def context_sections() -> list[ContextSection]:
    return []
