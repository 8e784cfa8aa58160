"""GET /v1/orders/{order_id}."""

from __future__ import annotations

from shopfront.checkout import Response
from shopfront.db.pool import ConnectionPool


class OrdersService:
    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool

    def get_order(self, order_id: str) -> Response:
        conn = self.pool.acquire()
        try:
            rows = conn.execute("SELECT id, total_cents, currency, charge_id, created_at FROM orders WHERE id = %s",
                                order_id)
            if not rows:
                return Response(404, {"error": "not_found"})
            lines = conn.execute("SELECT sku, quantity, unit_price_cents FROM order_lines WHERE order_id = %s", order_id)
        finally:
            self.pool.release(conn)
        oid, total, currency, charge_id, created_at = rows[0]
        return Response(200, {"order_id": oid, "total_cents": total, "currency": currency, "charge_id": charge_id,
                              "created_at": str(created_at),
                              "lines": [{"sku": s, "quantity": q, "unit_price_cents": p} for s, q, p in lines]})
