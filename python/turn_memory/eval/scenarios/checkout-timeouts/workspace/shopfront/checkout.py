"""POST /v1/checkout: reserve the cart's stock, charge the card, write the order.

Everything that touches the database runs on one pooled connection and one transaction, so
a failed charge leaves no reservation behind.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from shopfront.db.pool import Connection, ConnectionPool
from shopfront.payments.client import GatewayTimeout, PaymentDeclined, PaymentsClient

log = logging.getLogger("shopfront.checkout")


class OutOfStock(Exception):
    def __init__(self, sku: str, wanted: int, left: int) -> None:
        super().__init__(f"{sku}: wanted {wanted}, {left} left")
        self.sku = sku


@dataclass(frozen=True)
class CartLine:
    sku: str
    quantity: int
    unit_price_cents: int


@dataclass(frozen=True)
class CheckoutRequest:
    cart_id: str
    customer_id: str
    payment_token: str
    currency: str
    lines: tuple[CartLine, ...]

    @property
    def total_cents(self) -> int:
        return sum(line.quantity * line.unit_price_cents for line in self.lines)


@dataclass(frozen=True)
class Response:
    status: int
    body: dict


class CheckoutService:
    def __init__(self, pool: ConnectionPool, payments: PaymentsClient) -> None:
        self.pool = pool
        self.payments = payments

    def place_order(self, req: CheckoutRequest) -> Response:
        order_id = uuid.uuid4().hex[:16]
        conn = self.pool.acquire()
        try:
            self._reserve_inventory(conn, req)
        except OutOfStock as exc:
            conn.rollback()
            self.pool.release(conn)
            return Response(409, {"error": "out_of_stock", "sku": exc.sku})
        try:
            charge = self.payments.charge(order_id=order_id, amount_cents=req.total_cents,
                                          currency=req.currency, token=req.payment_token)
        except PaymentDeclined as exc:
            log.info("checkout %s: payment declined (%s)", req.cart_id, exc.code)
            conn.rollback()
            return Response(402, {"error": "payment_declined", "code": exc.code})
        except GatewayTimeout:
            conn.rollback()
            self.pool.release(conn)
            raise
        self._write_order(conn, order_id, req, charge.id)
        conn.commit()
        self.pool.release(conn)
        return Response(201, {"order_id": order_id, "charge_id": charge.id})

    def _reserve_inventory(self, conn: Connection, req: CheckoutRequest) -> None:
        for line in req.lines:
            rows = conn.execute("UPDATE stock SET reserved = reserved + %s "
                                "WHERE sku = %s AND on_hand - reserved >= %s RETURNING on_hand - reserved",
                                line.quantity, line.sku, line.quantity)
            if not rows:
                left = conn.execute("SELECT on_hand - reserved FROM stock WHERE sku = %s", line.sku)
                raise OutOfStock(line.sku, line.quantity, left[0][0] if left else 0)

    def _write_order(self, conn: Connection, order_id: str, req: CheckoutRequest, charge_id: str) -> None:
        conn.execute("INSERT INTO orders (id, customer_id, cart_id, total_cents, currency, charge_id) "
                     "VALUES (%s, %s, %s, %s, %s, %s)",
                     order_id, req.customer_id, req.cart_id, req.total_cents, req.currency, charge_id)
        for line in req.lines:
            conn.execute("INSERT INTO order_lines (order_id, sku, quantity, unit_price_cents) VALUES (%s, %s, %s, %s)",
                         order_id, line.sku, line.quantity, line.unit_price_cents)
