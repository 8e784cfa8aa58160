"""config/search.json, loaded once per process."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CONFIG = Path(__file__).resolve().parent.parent / "config" / "search.json"


@dataclass(frozen=True)
class EsSettings:
    hosts: tuple[str, ...]
    index: str
    max_connections: int
    http_compress: bool
    request_timeout_ms: int
    retry_on_timeout: bool


@dataclass(frozen=True)
class Settings:
    version: str
    workers: int
    threads_per_worker: int
    request_timeout_ms: int
    es: EsSettings


def load(path: Path = CONFIG) -> Settings:
    raw = json.loads(path.read_text())
    es = raw["es"]
    return Settings(
        version=raw["version"],
        workers=raw["server"]["workers"],
        threads_per_worker=raw["server"]["threads_per_worker"],
        request_timeout_ms=raw["server"]["request_timeout_ms"],
        es=EsSettings(tuple(es["hosts"]), es["index"], es["max_connections"], es.get("http_compress", False),
                      es["request_timeout_ms"], es["retry_on_timeout"]),
    )
