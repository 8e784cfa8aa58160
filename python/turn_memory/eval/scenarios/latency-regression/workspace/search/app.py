"""GET /v2/search: parse, build the ES query, run it, shape the response."""

from __future__ import annotations

import logging
import time

from search import settings
from search.es_client import make_client
from search.query import build_query, shape_response

log = logging.getLogger("search.app")
SETTINGS = settings.load()
CLIENT = make_client(SETTINGS)
log.info("catalog-search %s starting: workers=%d threads_per_worker=%d es.hosts=%d es.max_connections=%d "
         "es.http_compress=%s", SETTINGS.version, SETTINGS.workers, SETTINGS.threads_per_worker,
         len(SETTINGS.es.hosts), SETTINGS.es.max_connections, str(SETTINGS.es.http_compress).lower())


def search(q: str, page: int = 1, facets: tuple[str, ...] = ()) -> dict:
    started = time.monotonic()
    body = build_query(q, page, facets)
    result = CLIENT.search(index=SETTINGS.es.index, body=body)
    out = shape_response(result, facets)
    log.info("GET /v2/search?q=%s 200 %dms es_took=%dms hits=%d", q.replace(" ", "+"),
             (time.monotonic() - started) * 1000, result["took"], out["total"])
    return out
