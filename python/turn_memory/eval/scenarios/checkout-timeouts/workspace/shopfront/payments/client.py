"""Client of the payment gateway's v3 API (charges are idempotent by `idempotency_key`)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass

log = logging.getLogger("shopfront.payments")


class PaymentError(Exception):
    pass


class PaymentDeclined(PaymentError):
    """The gateway answered: the card was declined (HTTP 402). Not retryable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class GatewayTimeout(PaymentError):
    """No answer within read_timeout_ms. The charge may or may not have happened."""


@dataclass(frozen=True)
class Charge:
    id: str
    amount_cents: int
    currency: str
    status: str


class PaymentsClient:
    def __init__(self, gateway_url: str, api_key: str, connect_timeout_ms: int, read_timeout_ms: int) -> None:
        self.gateway_url = gateway_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = (connect_timeout_ms + read_timeout_ms) / 1000

    def charge(self, *, order_id: str, amount_cents: int, currency: str, token: str) -> Charge:
        body = json.dumps({"amount": amount_cents, "currency": currency, "source": token,
                           "metadata": {"order_id": order_id}}).encode()
        request = urllib.request.Request(
            f"{self.gateway_url}/charges", data=body, method="POST",
            headers={"authorization": f"Bearer {self.api_key}", "content-type": "application/json",
                     # the gateway deduplicates on this key for 24 h: a replay never charges twice
                     "idempotency-key": f"order-{order_id}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                data = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 402:
                detail = json.load(exc)
                raise PaymentDeclined(detail.get("code", "card_declined"), detail.get("message", "")) from None
            raise PaymentError(f"gateway HTTP {exc.code}") from exc
        except TimeoutError as exc:
            raise GatewayTimeout(f"no answer within {self.timeout_s:.1f}s") from exc
        log.info("charged order %s: %s %d %s", order_id, data["id"], amount_cents, currency)
        return Charge(data["id"], amount_cents, currency, data["status"])
