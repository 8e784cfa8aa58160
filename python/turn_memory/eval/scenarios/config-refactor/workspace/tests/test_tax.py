import unittest
from decimal import Decimal

from invoicer import config, tax


class TaxTest(unittest.TestCase):
    def test_totals_with_default_vat(self):
        t = tax.totals([(Decimal("10"), Decimal("95.00")), (Decimal("2.5"), Decimal("120.00"))])
        self.assertEqual((t["net"], t["vat"], t["gross"]), (Decimal("1250.00"), Decimal("237.50"), Decimal("1487.50")))

    def test_reduced_vat(self):
        config.VAT_RATE = 0.07  # leaks into every later test
        t = tax.totals([(Decimal("1"), Decimal("100.00"))])
        self.assertEqual(t["vat"], Decimal("7.00"))

    def test_half_even_rounding(self):
        config.ROUNDING = "half_even"
        self.assertEqual(tax.line_total(Decimal("0.5"), Decimal("0.05")), Decimal("0.02"))
