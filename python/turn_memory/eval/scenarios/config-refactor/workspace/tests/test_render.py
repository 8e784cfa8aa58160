import datetime as dt
import unittest
from decimal import Decimal

from invoicer import render


class RenderTest(unittest.TestCase):
    def test_due_date_and_vat_line(self):
        out = render.render({"name": "Acme Logistics AG"}, "LP-2024-0007", dt.date(2024, 5, 31),
                            [{"text": "Consulting", "hours": Decimal("10"), "rate": Decimal("95.00")}])
        self.assertIn("due 14.06.2024", out)
        self.assertIn("VAT 19% 180.50", out)
