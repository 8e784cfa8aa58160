"""In-memory stand-ins for Postgres connections and the payment gateway."""

from __future__ import annotations

from shopfront.payments.client import Charge, GatewayTimeout, PaymentDeclined


class FakeConnection:
    def __init__(self, stock: dict[str, int]) -> None:
        self.stock = stock
        self.statements: list[str] = []
        self.committed = False
        self.rolled_back = False

    def execute(self, sql: str, *params: object) -> list[tuple]:
        self.statements.append(sql.split()[0])
        if sql.startswith("UPDATE stock"):
            quantity, sku = params[0], params[1]
            if self.stock.get(sku, 0) >= quantity:
                self.stock[sku] -= quantity
                return [(self.stock[sku],)]
            return []
        if sql.startswith("SELECT on_hand"):
            return [(self.stock.get(params[0], 0),)]
        return []

    def commit(self) -> None:
        self.committed = True

    def rollback(self) -> None:
        self.rolled_back = True

    def close(self) -> None:
        pass


class FakeGateway:
    """Answers charges in order from a script: "ok", "declined" or "timeout"."""

    def __init__(self, *outcomes: str) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def charge(self, *, order_id: str, amount_cents: int, currency: str, token: str) -> Charge:
        self.calls += 1
        outcome = self.outcomes.pop(0) if self.outcomes else "ok"
        if outcome == "declined":
            raise PaymentDeclined("card_declined", "Your card was declined.")
        if outcome == "timeout":
            raise GatewayTimeout("no answer within 6.8s")
        return Charge(f"ch_{self.calls:04d}", amount_cents, currency, "succeeded")
