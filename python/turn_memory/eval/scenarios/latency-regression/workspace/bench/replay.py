"""A load model of one catalog-search pod, for comparing configurations offline.

    python3 bench/replay.py [--config PATH] [--rps N] [--seconds N] [--set es.max_connections=48 ...]

Requests arrive at `rps` (Poisson), wait for one of workers x threads_per_worker threads, spend
app CPU time (more with http_compress: gzip both ways), then need an Elasticsearch connection:
an idle one from the pool if there is one, else a new TLS connection (handshake time, and the
data nodes' TLS CPU grows with the rate of handshakes). A connection returned to a pool that
already holds max_connections idle ones is discarded. ES service time is drawn from the slow
log's distribution. Deterministic (fixed seed): the same inputs give the same numbers.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
from pathlib import Path

APP_CPU_MS = (4.0, 9.0)
COMPRESS_CPU_MS = (2.0, 5.0)
ES_TOOK_MS = (14.0, 70.0)
HANDSHAKE_MS = (60.0, 160.0)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def run(config: dict, rps: float, seconds: float, seed: int = 7) -> dict:
    rng = random.Random(seed)
    threads = config["server"]["workers"] * config["server"]["threads_per_worker"]
    pool_size = config["es"]["max_connections"]
    compress = config["es"].get("http_compress", False)
    t, arrivals = 0.0, []
    while t < seconds * 1000:
        t += rng.expovariate(rps / 1000)
        arrivals.append(t)
    free_at = [0.0] * threads
    heapq.heapify(free_at)
    idle = pool_size  # a warm pod: the pool starts full
    returns: list[tuple[float, int]] = []  # (time a connection comes back, 1)
    latencies, new_conns, discarded, recent_handshakes = [], 0, 0, []
    for arrival in arrivals:
        start = max(arrival, heapq.heappop(free_at))
        cpu = rng.uniform(*APP_CPU_MS) + (rng.uniform(*COMPRESS_CPU_MS) if compress else 0)
        at_es = start + cpu
        while returns and returns[0][0] <= at_es:
            heapq.heappop(returns)
            if idle < pool_size:
                idle += 1
            else:
                discarded += 1
        if idle:
            idle -= 1
            connect = 0.0
        else:
            new_conns += 1
            recent_handshakes = [h for h in recent_handshakes if h > at_es - 1000] + [at_es]
            connect = rng.uniform(*HANDSHAKE_MS) * (1 + len(recent_handshakes) / 10)
        done = at_es + connect + rng.uniform(*ES_TOOK_MS)
        heapq.heappush(returns, (done, 1))
        heapq.heappush(free_at, done)
        latencies.append(done - arrival)
    return {"requests": len(latencies), "threads": threads, "pool": pool_size, "http_compress": compress,
            "p50": percentile(latencies, 0.5), "p90": percentile(latencies, 0.9), "p99": percentile(latencies, 0.99),
            "new_connections": new_conns, "discarded": discarded}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="config/search.json")
    ap.add_argument("--rps", type=float, default=400)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--set", action="append", default=[], help="dotted.key=value override")
    args = ap.parse_args()
    config = json.loads(Path(args.config).read_text())
    for item in args.set:
        key, value = item.split("=", 1)
        section, name = key.split(".", 1)
        config[section][name] = json.loads(value)
    r = run(config, args.rps, args.seconds)
    print(f"config {args.config} {' '.join(args.set)}".rstrip())
    print(f"threads={r['threads']} es.max_connections={r['pool']} http_compress={str(r['http_compress']).lower()} rps={args.rps:.0f}")
    print(f"requests={r['requests']} p50={r['p50']:.0f}ms p90={r['p90']:.0f}ms p99={r['p99']:.0f}ms "
          f"new_connections={r['new_connections']} discarded={r['discarded']}")


if __name__ == "__main__":
    main()
