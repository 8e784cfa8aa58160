"""The process-wide Elasticsearch client.

One client per worker process, shared by its threads. `max_connections` is handed to the
transport as `connections_per_node`: urllib3 keeps at most that many idle connections per
data node; a thread that finds none idle opens a new TLS connection, and a connection
returned to a full pool is closed ("Connection pool is full, discarding connection").
"""

from __future__ import annotations

from elasticsearch import Elasticsearch

from search.settings import Settings


def make_client(settings: Settings) -> Elasticsearch:
    es = settings.es
    return Elasticsearch(
        list(es.hosts),
        connections_per_node=es.max_connections,
        http_compress=es.http_compress,
        request_timeout=es.request_timeout_ms / 1000,
        retry_on_timeout=es.retry_on_timeout,
        max_retries=0,
    )
