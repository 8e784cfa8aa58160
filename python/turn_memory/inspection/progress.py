"""A one-line progress bar on stderr for long reads (bytes read of the file's size)."""

from __future__ import annotations

import time
from typing import TextIO

#: below this size a log reads in well under a second: no bar
MIN_BYTES = 32 * 1024 * 1024


class ProgressBar:
    def __init__(self, total: int, out: TextIO, *, width: int = 30, interval_s: float = 0.1) -> None:
        self.total = max(total, 1)
        self.out = out
        self.width = width
        self.interval_s = interval_s
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s and done < self.total:
            return  # redrawing per frame would cost more than the read
        self._last = now
        share = min(done / self.total, 1.0)
        filled = int(share * self.width)
        self.out.write(f"\rinspect [{'#' * filled}{'.' * (self.width - filled)}] {share * 100:3.0f}% "
                       f"{done / 1e6:,.0f}/{self.total / 1e6:,.0f} MB")
        self.out.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:  # erase the bar so the report starts on a clean line
            self.out.write("\r" + " " * (self.width + 40) + "\r")
            self.out.flush()


def wants_bar(size: int, out: TextIO, json_output: bool) -> bool:
    return not json_output and size >= MIN_BYTES and out.isatty()
