"""GET /v1/catalog and GET /v1/catalog/{sku} (cached for catalog_ttl_s)."""

from __future__ import annotations

import time

from shopfront.checkout import Response
from shopfront.db.pool import ConnectionPool


class CatalogService:
    def __init__(self, pool: ConnectionPool, ttl_s: int = 120) -> None:
        self.pool = pool
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, Response]] = {}

    def _cached(self, key: str, load) -> Response:
        hit = self._cache.get(key)
        if hit and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        conn = self.pool.acquire()
        try:
            response = load(conn)
        finally:
            self.pool.release(conn)
        self._cache[key] = (time.monotonic(), response)
        return response

    def list_products(self) -> Response:
        return self._cached("all", lambda conn: Response(200, {"products": [
            {"sku": sku, "name": name, "price_cents": price}
            for sku, name, price in conn.execute("SELECT sku, name, price_cents FROM products WHERE active ORDER BY sku")]}))

    def get_product(self, sku: str) -> Response:
        def load(conn):
            rows = conn.execute("SELECT sku, name, price_cents, on_hand - reserved FROM products JOIN stock USING (sku) "
                                "WHERE sku = %s", sku)
            if not rows:
                return Response(404, {"error": "not_found"})
            s, name, price, available = rows[0]
            return Response(200, {"sku": s, "name": name, "price_cents": price, "available": available})
        return self._cached(sku, load)
