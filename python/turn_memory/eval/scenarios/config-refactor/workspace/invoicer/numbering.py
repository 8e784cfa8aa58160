"""Invoice numbers: <prefix><year>-<sequence>, sequence per year, persisted in a small file."""

from pathlib import Path

from invoicer import config

STATE = Path.home() / ".invoicer-sequence"


def next_number(year: int, state: Path = STATE) -> str:
    last = {}
    if state.exists():
        for line in state.read_text().splitlines():
            y, n = line.split("=")
            last[int(y)] = int(n)
    last[year] = last.get(year, 0) + 1
    state.write_text("\n".join(f"{y}={n}" for y, n in sorted(last.items())) + "\n")
    return f"{config.NUMBER_PREFIX}{year}-{last[year]:04d}"
