"""A small blocking connection pool in front of Postgres.

We keep our own instead of psycopg_pool because the checkout path needs to know how long a
request waited for a connection (it is logged as `pool acquire waited`), and because the
pool must never grow past `pool_size`: the primary has max_connections = 100 shared by four
API hosts and the batch jobs.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Protocol

log = logging.getLogger("shopfront.db.pool")

#: a wait longer than this is logged as a warning
SLOW_ACQUIRE_MS = 500


class Connection(Protocol):
    def execute(self, sql: str, *params: object) -> list[tuple]: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


class PoolTimeout(Exception):
    """No connection became free within acquire_timeout_ms."""


class ConnectionPool:
    def __init__(self, connect: Callable[[], Connection], size: int, acquire_timeout_ms: int) -> None:
        self._connect = connect
        self.size = size
        self.acquire_timeout_ms = acquire_timeout_ms
        self._idle: list[Connection] = []
        self._in_use = 0
        self._cond = threading.Condition()

    def available(self) -> int:
        """Connections that could be handed out right now without waiting."""
        with self._cond:
            return self.size - self._in_use

    def in_use(self) -> int:
        with self._cond:
            return self._in_use

    def acquire(self) -> Connection:
        started = time.monotonic()
        deadline = started + self.acquire_timeout_ms / 1000
        with self._cond:
            while self._in_use >= self.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeout(f"no connection within {self.acquire_timeout_ms}ms "
                                      f"(in_use={self._in_use} size={self.size})")
                self._cond.wait(left)
            self._in_use += 1
            conn = self._idle.pop() if self._idle else None
        waited_ms = (time.monotonic() - started) * 1000
        if waited_ms > SLOW_ACQUIRE_MS:
            log.warning("pool acquire waited %dms (in_use=%d size=%d)", waited_ms, self._in_use, self.size)
        if conn is None:
            try:
                conn = self._connect()
            except Exception:
                with self._cond:
                    self._in_use -= 1
                    self._cond.notify()
                raise
        return conn

    def release(self, conn: Connection) -> None:
        with self._cond:
            self._in_use -= 1
            self._idle.append(conn)
            self._cond.notify()

    def discard(self, conn: Connection) -> None:
        """A broken connection: close it and free its slot."""
        try:
            conn.close()
        finally:
            with self._cond:
                self._in_use -= 1
                self._cond.notify()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection for the block; rolled back and returned on any exit."""
        conn = self.acquire()
        try:
            yield conn
        except BaseException:
            conn.rollback()
            raise
        finally:
            self.release(conn)
