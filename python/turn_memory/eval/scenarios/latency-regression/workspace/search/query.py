"""The Elasticsearch query for a search, and the response shape."""

from __future__ import annotations

PAGE_SIZE = 24


def build_query(q: str, page: int, facets: tuple[str, ...]) -> dict:
    body: dict = {
        "from": (page - 1) * PAGE_SIZE,
        "size": PAGE_SIZE,
        "query": {"function_score": {
            "query": {"multi_match": {"query": q, "fields": ["title^3", "brand^2", "description"],
                                      "minimum_should_match": "2<75%"}},
            "functions": [{"filter": {"term": {"in_stock": True}}, "weight": 1.4},
                          {"gauss": {"published_at": {"scale": "30d"}}}],
        }},
        "_source": ["sku", "title", "brand", "price_cents", "image"],
    }
    if facets:
        body["aggs"] = {f: {"terms": {"field": f, "size": 20}} for f in facets}
    return body


def shape_response(result: dict, facets: tuple[str, ...]) -> dict:
    hits = result["hits"]
    return {"total": hits["total"]["value"], "items": [h["_source"] for h in hits["hits"]],
            "facets": {f: [{"value": b["key"], "count": b["doc_count"]} for b in result.get("aggregations", {}).get(f, {}).get("buckets", [])]
                       for f in facets}}
