"""Drive multi-turn DSH sessions through the official Python SDK (deepseek-harness-sdk).

Runs under the DSH 0.2.1 runtime's own venv (the SDK lives there), so it imports nothing
from turn_memory. Usage: python sdk_driver.py CONFIG.json; CONFIG holds dsh_home, dsh_bin,
profile, base_url, cwd and `runs`: [{tasks: [...], resume, before_s, linger_s}] — each run is
one SDK runtime (one DSH process); `resume` reopens the previous run's session with
`resume_session`; `before_s`/`linger_s`: seconds the script waits before its first task and
after its last. Prints one JSON object: per run the session id and each turn's answer.
"""

from __future__ import annotations

import json
import sys
import time

from deepseek_harness import DeepSeekHarness


def main(path: str) -> int:
    config = json.loads(open(path, encoding="utf-8").read())
    session_id = None
    runs = []
    for spec in config["runs"]:
        harness = DeepSeekHarness(dsh_home=config["dsh_home"], dsh_bin=config["dsh_bin"], profile=config["profile"],
                                  base_url=config["base_url"], api_key="sk-turn-memory-fake", cwd=config["cwd"],
                                  request_timeout_seconds=120)
        turns = []
        with harness:
            session = harness.resume_session(session_id) if spec.get("resume") else harness.start_session()
            session_id = session.id
            time.sleep(spec.get("before_s", 0))
            for task in spec["tasks"]:
                started = time.monotonic()
                result = session.run(task)
                turns.append({"task": task, "text": result.final_response, "finish": result.finish_reason,
                              "seconds": round(time.monotonic() - started, 3)})
            time.sleep(spec.get("linger_s", 0))
        runs.append({"session": session_id, "turns": turns})
    print(json.dumps({"runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
