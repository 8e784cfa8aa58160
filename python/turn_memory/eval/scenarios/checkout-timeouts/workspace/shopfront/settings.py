"""Settings: config/shopfront.ini, then SHOPFRONT_<SECTION>_<KEY> environment overrides."""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

CONFIG = Path(__file__).resolve().parent.parent / "config" / "shopfront.ini"


@dataclass(frozen=True)
class DbSettings:
    dsn: str
    pool_size: int
    acquire_timeout_ms: int
    statement_timeout_ms: int
    max_idle_s: int


@dataclass(frozen=True)
class PaymentSettings:
    gateway_url: str
    connect_timeout_ms: int
    read_timeout_ms: int
    max_retries: int


@dataclass(frozen=True)
class Settings:
    db: DbSettings
    payments: PaymentSettings
    request_timeout_ms: int
    workers: int


def _value(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text


def _override(section: str, values: dict) -> dict:
    out = {key: _value(value) for key, value in values.items()}
    for key in values:
        env = os.environ.get(f"SHOPFRONT_{section.upper()}_{key.upper()}")
        if env is not None:
            out[key] = _value(env)
    return out


def load(path: Path = CONFIG) -> Settings:
    raw = configparser.ConfigParser(inline_comment_prefixes=("#",))
    raw.read(path)
    db = _override("db", raw["db"])
    payments = _override("payments", raw["payments"])
    server = _override("server", raw["server"])
    return Settings(
        db=DbSettings(**db),
        payments=PaymentSettings(**payments),
        request_timeout_ms=int(server["request_timeout_ms"]),
        workers=int(server["workers"]),
    )
