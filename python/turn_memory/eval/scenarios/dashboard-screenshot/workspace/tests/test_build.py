import unittest

import build
from dashboards.specs import CHECKOUT


class BuildTest(unittest.TestCase):
    def test_panels_carry_unit_and_query(self):
        p = build.panel(1, CHECKOUT[1])
        self.assertEqual(p["fieldConfig"]["defaults"]["unit"], CHECKOUT[1]["unit"])
        self.assertEqual(p["targets"][0]["expr"], CHECKOUT[1]["expr"])

    def test_two_panels_per_row(self):
        self.assertEqual([build.panel(i, CHECKOUT[0])["gridPos"]["x"] for i in range(3)], [0, 12, 0])
