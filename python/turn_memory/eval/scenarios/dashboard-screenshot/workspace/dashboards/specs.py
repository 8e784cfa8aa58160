"""Panel declarations, one list per dashboard. Units are Grafana unit ids ("s", "ms", "bytes",
"reqps", "percentunit"); Grafana scales within a family (a value of 0.0012 with unit "s" shows
as 1.2 ms), so a unit must name what the query returns, not how it should look."""

CHECKOUT = [
    {"title": "Checkout requests", "unit": "reqps",
     "expr": 'sum(rate(checkout_requests_total[5m]))'},
    {"title": "Checkout p95", "unit": "ms",
     "expr": 'histogram_quantile(0.95, sum by (le) (rate(checkout_request_duration_seconds_bucket[5m])))'},
    {"title": "Checkout errors", "unit": "percentunit",
     "expr": 'sum(rate(checkout_requests_total{status=~"5.."}[5m])) / sum(rate(checkout_requests_total[5m]))'},
    {"title": "Payment gateway p99", "unit": "ms",
     "expr": 'histogram_quantile(0.99, sum by (le) (rate(payment_gateway_duration_seconds_bucket[5m])))'},
    {"title": "DB pool in use", "unit": "short",
     "expr": 'max(shopfront_db_pool_in_use)'},
]

SEARCH = [
    {"title": "Search requests", "unit": "reqps",
     "expr": 'sum(rate(search_requests_total[5m]))'},
    {"title": "Search p50", "unit": "ms",
     "expr": 'histogram_quantile(0.50, sum by (le) (rate(search_request_duration_seconds_bucket[5m])))'},
    {"title": "Search p99", "unit": "s",
     "expr": 'histogram_quantile(0.99, sum by (le) (rate(search_request_duration_seconds_bucket[5m])))'},
    {"title": "Response size p90", "unit": "bytes",
     "expr": 'histogram_quantile(0.90, sum by (le) (rate(search_response_size_bytes_bucket[5m])))'},
]

DASHBOARDS = {"checkout": ("Checkout", CHECKOUT), "search": ("Search", SEARCH)}
