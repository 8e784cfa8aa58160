"""Route table and process wiring for the storefront API."""

from __future__ import annotations

import logging
import os

from shopfront import settings
from shopfront.checkout import CheckoutService
from shopfront.db.pool import ConnectionPool
from shopfront.payments.client import PaymentsClient

log = logging.getLogger("shopfront.app")

ROUTES = {
    ("GET", "/v1/catalog"): "catalog.list_products",
    ("GET", "/v1/catalog/{sku}"): "catalog.get_product",
    ("GET", "/v1/cart/{cart_id}"): "cart.get_cart",
    ("POST", "/v1/cart/{cart_id}/lines"): "cart.add_line",
    ("DELETE", "/v1/cart/{cart_id}/lines/{sku}"): "cart.remove_line",
    ("POST", "/v1/checkout"): "checkout.place_order",
    ("GET", "/v1/orders/{order_id}"): "orders.get_order",
    ("GET", "/healthz"): "health.check",
}


def build(connect) -> dict:
    cfg = settings.load()
    pool = ConnectionPool(connect, cfg.db.pool_size, cfg.db.acquire_timeout_ms)
    payments = PaymentsClient(cfg.payments.gateway_url, os.environ.get("SHOPFRONT_PAYMENTS_KEY", ""),
                              cfg.payments.connect_timeout_ms, cfg.payments.read_timeout_ms)
    log.info("pool_size=%d acquire_timeout_ms=%d workers=%d", cfg.db.pool_size, cfg.db.acquire_timeout_ms, cfg.workers)
    return {"pool": pool, "checkout": CheckoutService(pool, payments)}
