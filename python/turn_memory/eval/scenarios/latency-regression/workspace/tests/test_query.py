import unittest

from search.query import PAGE_SIZE, build_query


class QueryTest(unittest.TestCase):
    def test_pages_are_24_items(self):
        body = build_query("yoga mat", 3, ())
        self.assertEqual((body["from"], body["size"]), (2 * PAGE_SIZE, PAGE_SIZE))

    def test_facets_become_terms_aggregations(self):
        body = build_query("desk", 1, ("brand",))
        self.assertEqual(body["aggs"], {"brand": {"terms": {"field": "brand", "size": 20}}})

    def test_in_stock_items_are_boosted(self):
        functions = build_query("desk", 1, ())["query"]["function_score"]["functions"]
        self.assertIn({"filter": {"term": {"in_stock": True}}, "weight": 1.4}, functions)
