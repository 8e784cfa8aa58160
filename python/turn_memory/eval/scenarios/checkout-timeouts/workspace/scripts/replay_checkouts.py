"""Replay the checkout outcomes of a gateway log against CheckoutService with a fake database.

Usage: python3 scripts/replay_checkouts.py logs/payments-gateway-2024-05-14.log

Each charge in the log (status 200 or 402) becomes one checkout through the real service and
the real pool (size and acquire timeout from config/shopfront.ini or SHOPFRONT_DB_* overrides;
the replay does not sleep: a wait that would time out counts as a PoolTimeout at once).
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shopfront import settings  # noqa: E402
from shopfront.checkout import CartLine, CheckoutRequest, CheckoutService  # noqa: E402
from shopfront.db.pool import ConnectionPool, PoolTimeout  # noqa: E402
from tests.fakes import FakeConnection, FakeGateway  # noqa: E402

LINE = re.compile(r"status=(\d{3})")


def main(path: str) -> int:
    cfg = settings.load()
    outcomes = ["declined" if m.group(1) == "402" else "ok" for m in map(LINE.search, Path(path).read_text().splitlines()) if m]
    stock = {"TSH-BLK-M": 10**6}
    pool = ConnectionPool(lambda: FakeConnection(stock), cfg.db.pool_size, acquire_timeout_ms=0)
    service = CheckoutService(pool, FakeGateway(*outcomes))
    counts = {"201": 0, "402": 0, "PoolTimeout": 0}
    first_timeout = None
    for n in range(1, len(outcomes) + 1):
        try:
            status = service.place_order(CheckoutRequest(f"c-{n:06d}", "cu-1", "tok", "EUR",
                                                         (CartLine("TSH-BLK-M", 1, 2500),))).status
            counts[str(status)] += 1
        except PoolTimeout:
            counts["PoolTimeout"] += 1
            first_timeout = first_timeout or n
            service.payments.outcomes.pop(0) if service.payments.outcomes else None
    print(f"config: pool_size={cfg.db.pool_size} acquire_timeout_ms={cfg.db.acquire_timeout_ms}")
    print(f"replayed {len(outcomes)} checkouts: 201={counts['201']} 402={counts['402']} PoolTimeout={counts['PoolTimeout']}")
    print(f"connections in use at the end: {pool.in_use()} of {pool.size}")
    if first_timeout:
        print(f"first PoolTimeout at checkout #{first_timeout}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
