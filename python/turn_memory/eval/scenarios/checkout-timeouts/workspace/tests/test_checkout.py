import unittest

from shopfront.checkout import CartLine, CheckoutRequest, CheckoutService
from shopfront.db.pool import ConnectionPool
from shopfront.payments.client import GatewayTimeout
from tests.fakes import FakeConnection, FakeGateway

STOCK = {"TSH-BLK-M": 5, "MUG-CER-01": 2}


def request(*lines: CartLine) -> CheckoutRequest:
    return CheckoutRequest("c-000042", "cu-7", "tok_visa", "EUR", lines or (CartLine("TSH-BLK-M", 1, 2500),))


class CheckoutTest(unittest.TestCase):
    def setUp(self) -> None:
        self.stock = dict(STOCK)
        self.pool = ConnectionPool(lambda: FakeConnection(self.stock), size=2, acquire_timeout_ms=50)

    def test_successful_checkout_writes_the_order_and_releases_the_connection(self):
        service = CheckoutService(self.pool, FakeGateway("ok"))
        response = service.place_order(request())
        self.assertEqual(response.status, 201)
        self.assertEqual(response.body["charge_id"], "ch_0001")
        self.assertEqual(self.pool.available(), 2)

    def test_out_of_stock_is_409_and_releases_the_connection(self):
        service = CheckoutService(self.pool, FakeGateway("ok"))
        response = service.place_order(request(CartLine("MUG-CER-01", 3, 1200)))
        self.assertEqual(response.status, 409)
        self.assertEqual(response.body["sku"], "MUG-CER-01")
        self.assertEqual(self.pool.available(), 2)

    def test_gateway_timeout_propagates_and_releases_the_connection(self):
        service = CheckoutService(self.pool, FakeGateway("timeout"))
        with self.assertRaises(GatewayTimeout):
            service.place_order(request())
        self.assertEqual(self.pool.available(), 2)

    def test_declined_payment_is_402(self):
        service = CheckoutService(self.pool, FakeGateway("declined"))
        response = service.place_order(request())
        self.assertEqual(response.status, 402)
        self.assertEqual(response.body, {"error": "payment_declined", "code": "card_declined"})


if __name__ == "__main__":
    unittest.main()
