"""A fixed three-turn session for the golden prompt renders (test_prompt_golden.py).

Its shape is an ordinary coding session as DSH 0.1.0-rc.8 logs it: turn 1 investigates a
data bug with four tool calls and two long reasoning blocks (re-readable data: a source
file and a 180-row CSV still on disk); turn 2 opens with the host's runtime-context snapshot
(rc8 restates it before the next turn's words after a landing) and carries a screenshot;
turn 3 is one command. Every id is fixed, so a render is the same on every run.
"""

from __future__ import annotations

from typing import Any

from surface_builders import SNAPSHOT_TEXT, LogBuilder, assistant_stream, snapshot_source
from turn_memory.host.dialect import Dialect
from turn_memory.host.dialects import RC8
from turn_memory.host.surface import SessionLog
from turn_memory.host.turn_index import node_origins

PROVIDER = {"kind": "model", "provider": "deepseek-official", "model": "deepseek-v4-flash"}
SNAPSHOT = SNAPSHOT_TEXT.replace("/work/ws", "/work/billing")
SCREENSHOT = {"attachmentId": "att-7f3a", "mediaType": "image/png", "bytes": 48211, "width": 1280, "height": 720,
              "name": "dashboard-may.png"}

REASONING_1 = (
    "The count is off by two out of 180. Either the header handling skips more than one line, or records "
    "with a newline inside a quoted field are split in two and then fail validation. The importer is small: "
    "read it before running anything. If it iterates `for line in f` and splits on commas itself, that is "
    "the second case, and csv.reader over the file object would fix it without changing import_rows().")
REASONING_2 = (
    "Confirmed by the dry run: rows 1042 and 1107 are the two orders whose `notes` field holds a newline; "
    "each becomes two 4-field fragments and is skipped as malformed, silently, because the skip counter is "
    "only logged at -v. Fix: build csv.reader(f) once and iterate its records; keep the header check "
    "(`next(reader)`). Do not touch validation: the 6-field rule is right. Then rerun the dry run and "
    "tests/test_importer.py.")
IMPORTER = """\
def import_rows(path, *, dry_run=False):
    with open(path, newline="") as f:
        header = f.readline().rstrip("\\n").split(",")
        check_header(header)
        imported = skipped = 0
        for line in f:
            fields = line.rstrip("\\n").split(",")
            if len(fields) != 6:
                skipped += 1
                continue
            imported += store(fields, dry_run=dry_run)
    log.debug("skipped %d malformed rows", skipped)
    return imported"""


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


class GoldenSession:
    def __init__(self, dialect: Dialect = RC8) -> None:
        self.dialect = dialect
        self.b = LogBuilder(dialect)
        self._ids = 0

    def _id(self, kind: str) -> str:
        self._ids += 1
        return f"{kind}-{self._ids}"

    def user(self, *content: dict[str, Any], source: dict[str, Any] | None = None) -> None:
        message = {"id": self._id("user"), "role": "user", "source": source or {"kind": "user"}, "content": list(content)}
        self.b.add("user/message", message, op="append")

    def step(self, turn: int, step: int, text: str, call: tuple[str, str, str] | None = None,
             result: str | None = None, reasoning: str | None = None) -> None:
        """One step: the assistant's message (reasoning, text, at most one call) and the call's result."""
        b = self.b
        b.turn_no, b.step_no = turn, step
        b.add("step/start", {"turn": turn, "step": step})
        content = ([{"type": "reasoning", "text": reasoning}] if reasoning else []) + [_text(text)]
        if call:
            content.append({"type": "tool-call", "id": call[0], "name": call[1], "arguments": call[2]})
        message = {"id": self._id("asst"), "role": "assistant", "source": PROVIDER, "content": content}
        extra = {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                 "stream": assistant_stream(content)} if self.dialect.assistant_requires_stream else {}
        b.add("assistant/message", self.dialect.assistant_data(turn, step, message, **extra), op="append")
        if call:
            seq = b.add("tool/call", {"turn": turn, "step": step, "callId": call[0], "name": call[1],
                                      "arguments": call[2]})
            data = {"turn": turn, "step": step,
                    "message": self.dialect.tool_result_message(self._id("tool"), call[0], [_text(result or "")])}
            b.add("tool/result", data, op="append", sources=[seq])
        b.add("step/end", {"turn": turn, "step": step})

    def build(self) -> SessionLog:
        b = self.b
        b.add("permission/preset", {"preset": "workspace-write"})
        if self.dialect.protects_system_head:
            b.system("You are a coding agent.")  # 0.2: node 0, committed inside turn 1's first step
        b.add("turn/start", {"turn": 1})
        b.add("step/start", {"turn": 1, "step": 1})
        self.user(_text("The nightly import drops rows: `python -m billing.import data/orders-2024-05.csv` reports "
                        "178 imported, but the file has 180 data rows. Find out why and fix it; keep the "
                        "signature of `import_rows()`."))
        self.user(_text(SNAPSHOT), source=snapshot_source(self.dialect))
        b.add("step/end", {"turn": 1, "step": 1})
        self.step(1, 2, "Reading the importer first.",
                  ("call-1", "bash", '{"command": "sed -n 1,40p billing/importer.py"}'), IMPORTER, REASONING_1)
        self.step(1, 3, "It splits lines itself; a dry run shows which rows are lost.",
                  ("call-2", "bash", '{"command": "python -m billing.import data/orders-2024-05.csv --dry-run -v '
                                     '2>&1 | tail -3"}'),
                  "row 1042: 4 fields, expected 6 (skipped)\nrow 1107: 4 fields, expected 6 (skipped)\n"
                  "178 imported, 2 skipped", REASONING_2)
        self.step(1, 4, "Iterating csv.reader records instead of lines.",
                  ("call-3", "edit", '{"path": "billing/importer.py", "old": "for line in f:", '
                                     '"new": "for fields in reader:"}'),
                  "Edited billing/importer.py (+4 -5)")
        self.step(1, 5, "Dry run and tests.",
                  ("call-4", "bash", '{"command": "python -m billing.import data/orders-2024-05.csv --dry-run '
                                     '&& pytest tests/test_importer.py -q"}'),
                  "180 imported, 0 skipped\n7 passed in 0.41s")
        self.step(1, 6, "Fixed. `import_rows()` read the file line by line, so the two orders with a newline "
                        "inside a quoted `notes` field (ids 1042 and 1107) were split and skipped as malformed. "
                        "It now iterates `csv.reader` records; the dry run imports 180 of 180 and "
                        "tests/test_importer.py passes (7 tests). The signature is unchanged.")
        b.add("turn/end", {"turn": 1, "reason": {"kind": "completed"}})

        b.add("turn/start", {"turn": 2})
        b.add("step/start", {"turn": 2, "step": 1})
        self.user(_text(SNAPSHOT), source=snapshot_source(self.dialect))
        self.user(_text("The dashboard still shows 178 orders for May, see the screenshot. Does it read from a "
                        "cache?"), {"type": "image", "attachment": SCREENSHOT})
        b.add("step/end", {"turn": 2, "step": 1})
        self.step(2, 2, "Looking for where the dashboard's number comes from.",
                  ("call-5", "bash", '{"command": "grep -rn monthly_totals billing/ dashboards/"}'),
                  "dashboards/orders.sql:3:  from monthly_totals\n"
                  "billing/cron.py:18:    refresh(\"monthly_totals\")  # 02:00 daily\n"
                  "billing/refresh.py:9:def refresh(view):")
        self.step(2, 3, "Yes: the dashboard reads the materialized view `monthly_totals`, which "
                        "`billing/cron.py` refreshes daily at 02:00, so it still holds the count from before "
                        "the fix. `python -m billing.refresh monthly_totals` updates it now.")
        b.add("turn/end", {"turn": 2, "reason": {"kind": "completed"}})

        b.add("turn/start", {"turn": 3})
        b.add("step/start", {"turn": 3, "step": 1})
        self.user(_text("Refresh it and check May again."))
        b.add("step/end", {"turn": 3, "step": 1})
        self.step(3, 2, "Refreshing the view.",
                  ("call-6", "bash", '{"command": "python -m billing.refresh monthly_totals && psql -Atc '
                                     '\\"select count(*) from monthly_totals where month = \'2024-05\'\\""}'),
                  "REFRESH\n180")
        self.step(3, 3, "Refreshed: May now shows 180 orders.")
        b.add("turn/end", {"turn": 3, "reason": {"kind": "completed"}})
        return SessionLog(self.dialect, b.events)


def session_log(dialect: Dialect = RC8) -> SessionLog:
    return GoldenSession(dialect).build()


def turn_positions(log: SessionLog, turn: int) -> list[int]:
    origins = node_origins(log.events, log.dialect)
    return [s for s in log.nodes if origins.get(s) == ("turn", turn)]
