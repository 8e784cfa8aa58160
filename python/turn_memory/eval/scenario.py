"""Scenario files: a recorded session, the facts planted in it and the probes that check them.

One folder per scenario: `scenario.yml` and, optionally, `workspace/` (copied into the DSH
workspace before the replay; the recorded commands run there) and any image a turn
attaches. The format is documented in docs/eval.md; `load_scenario` validates all of it and
names the file and the entry of any problem, so a user's own scenario fails before anything
runs.
"""

from __future__ import annotations

import difflib

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: the probe dimensions of the published probe evaluation, in report order
DIMENSIONS = ("recall", "artifact", "continuation", "decision")
DIMENSION_LABELS = {"recall": "recall", "artifact": "artifact trail", "continuation": "continuation",
                    "decision": "decision"}
FACT_KINDS = ("tool-output", "decision", "failed-attempt", "artifact", "finding", "user", "image")
SHIPPED_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIO_FILE = "scenario.yml"
DEFAULT_WINDOW = 128_000


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the entry."""


class UnknownScenario(ScenarioError):
    """A `--scenario` name the suite does not hold (a typo, not a broken file)."""


@dataclass(frozen=True)
class ToolCall:
    command: str
    description: str

    def arguments(self) -> dict[str, str]:
        # 0.2's bash tool asks for the description first
        return {"description": self.description, "command": self.command}


@dataclass(frozen=True)
class Step:
    """One agent request's recorded reply: reasoning, text, and the bash calls it makes."""

    text: str = ""
    reasoning: str = ""
    calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Turn:
    user: str
    steps: tuple[Step, ...]
    #: an image the user attaches (a path relative to the scenario folder)
    image: str | None = None


@dataclass(frozen=True)
class Fact:
    """A detail planted in one turn, checked verbatim (whitespace-insensitive)."""

    id: str
    text: str
    #: the turn (from 1) whose original messages hold it
    turn: int
    kind: str
    #: the words an agent looking for it would search its history with
    query: str


@dataclass(frozen=True)
class Probe:
    id: str
    dimension: str
    question: str
    reference: str
    facts: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    #: where the session's shape comes from (said in the file, shown by `--list`)
    shape: str
    directory: Path
    turns: tuple[Turn, ...]
    facts: tuple[Fact, ...]
    probes: tuple[Probe, ...]
    #: the routed model's context window for this session (tokens)
    window: int = DEFAULT_WINDOW
    #: run /compact after the last turn (False: the session's own pressure is the test)
    compact: bool = True
    #: about how many tokens the raw history holds (the cost estimate uses it)
    raw_tokens: int = 0

    @property
    def workspace(self) -> Path | None:
        path = self.directory / "workspace"
        return path if path.is_dir() else None

    def fact(self, fact_id: str) -> Fact:
        return next(f for f in self.facts if f.id == fact_id)

    def facts_of(self, probe: Probe) -> list[Fact]:
        return [self.fact(i) for i in probe.facts]

    @property
    def user_texts(self) -> set[str]:
        return {t.user for t in self.turns}

    def reasoning_blocks(self) -> list[str]:
        return [s.reasoning for t in self.turns for s in t.steps if s.reasoning]


def _need(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ScenarioError(f"{where}: missing `{key}`")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise ScenarioError(f"{where}: `{key}` must be a non-empty {getattr(kind, '__name__', 'value')}")
    return value


def _known_keys(obj: Any, keys: set[str], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = sorted(set(obj) - keys)
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(keys))}")
    return obj


def _call(raw: Any, where: str) -> ToolCall:
    if isinstance(raw, str) and raw.strip():
        command = raw.strip()
        first = command.splitlines()[0]
        return ToolCall(command, first if len(first) <= 80 else first[:77] + "...")
    obj = _known_keys(raw, {"command", "description"}, where)
    return ToolCall(_need(obj, "command", str, where).strip(), str(obj.get("description") or "").strip()
                    or _call(obj["command"], where).description)


def _step(raw: Any, where: str) -> Step:
    obj = _known_keys(raw, {"say", "think", "bash"}, where)
    bash = obj.get("bash") or []
    calls = tuple(_call(c, f"{where}.bash[{i}]") for i, c in enumerate(bash if isinstance(bash, list) else [bash]))
    step = Step(str(obj.get("say") or "").strip(), str(obj.get("think") or "").strip(), calls)
    if not (step.text or step.calls):
        raise ScenarioError(f"{where}: a step needs `say` or `bash`")
    return step


def _turn(raw: Any, where: str, folder: Path) -> Turn:
    obj = _known_keys(raw, {"user", "image", "steps"}, where)
    user = _need(obj, "user", str, where).strip()
    steps_raw = _need(obj, "steps", list, where)
    steps = tuple(_step(s, f"{where}.steps[{i}]") for i, s in enumerate(steps_raw))
    for i, step in enumerate(steps[:-1]):
        if not step.calls:
            raise ScenarioError(f"{where}.steps[{i}]: only the last step may end the turn; this one makes no bash call")
    if steps[-1].calls or not steps[-1].text:
        raise ScenarioError(f"{where}.steps[{len(steps) - 1}]: the last step is the answer: `say` only, no `bash`")
    image = obj.get("image")
    if image is not None and not (folder / str(image)).is_file():
        raise ScenarioError(f"{where}: image {image} not found in {folder}")
    return Turn(user, steps, str(image) if image is not None else None)


def _fact(raw: Any, where: str, turns: int) -> Fact:
    obj = _known_keys(raw, {"id", "text", "turn", "kind", "query"}, where)
    fact = Fact(_need(obj, "id", str, where), _need(obj, "text", str, where).strip(), _need(obj, "turn", int, where),
                _need(obj, "kind", str, where), _need(obj, "query", str, where).strip())
    if not 1 <= fact.turn <= turns:
        raise ScenarioError(f"{where}: turn {fact.turn} is not a turn of this scenario (1..{turns})")
    if fact.kind not in FACT_KINDS:
        raise ScenarioError(f"{where}: kind {fact.kind!r} is not one of {', '.join(FACT_KINDS)}")
    return fact


def _probe(raw: Any, where: str, fact_ids: set[str]) -> Probe:
    obj = _known_keys(raw, {"id", "dimension", "question", "reference", "facts"}, where)
    facts = _need(obj, "facts", list, where)
    probe = Probe(_need(obj, "id", str, where), _need(obj, "dimension", str, where),
                  _need(obj, "question", str, where).strip(), _need(obj, "reference", str, where).strip(),
                  tuple(str(f) for f in facts))
    if probe.dimension not in DIMENSIONS:
        raise ScenarioError(f"{where}: dimension {probe.dimension!r} is not one of {', '.join(DIMENSIONS)}")
    missing = [f for f in probe.facts if f not in fact_ids]
    if missing:
        raise ScenarioError(f"{where}: unknown fact id(s) {', '.join(missing)}")
    return probe


def _unique(ids: list[str], what: str, where: str) -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise ScenarioError(f"{where}: {what} {i!r} appears twice")
        seen.add(i)


def parse_scenario(data: Any, folder: Path, name: str | None = None) -> Scenario:
    """A scenario from its parsed YAML; `folder` resolves the workspace and images."""
    where = str(folder / SCENARIO_FILE)
    obj = _known_keys(data, {"name", "title", "shape", "window", "compact", "raw_tokens", "turns", "facts", "probes"},
                      where)
    turns_raw = _need(obj, "turns", list, where)
    turns = tuple(_turn(t, f"{where}: turns[{i}] (turn {i + 1})", folder) for i, t in enumerate(turns_raw))
    _unique([t.user for t in turns], "user message", where)
    facts = tuple(_fact(f, f"{where}: facts[{i}]", len(turns)) for i, f in enumerate(_need(obj, "facts", list, where)))
    _unique([f.id for f in facts], "fact id", where)
    probes = tuple(_probe(p, f"{where}: probes[{i}]", {f.id for f in facts})
                   for i, p in enumerate(_need(obj, "probes", list, where)))
    _unique([p.id for p in probes], "probe id", where)
    window = obj.get("window", DEFAULT_WINDOW)
    if not isinstance(window, int) or window < 8000:
        raise ScenarioError(f"{where}: `window` must be a number of tokens >= 8000")
    return Scenario(name=str(obj.get("name") or name or folder.name), title=_need(obj, "title", str, where).strip(),
                    shape=_need(obj, "shape", str, where).strip(), directory=folder, turns=turns, facts=facts,
                    probes=probes, window=window, compact=bool(obj.get("compact", True)),
                    raw_tokens=int(obj.get("raw_tokens") or 0))


def load_scenario(folder: Path) -> Scenario:
    path = folder / SCENARIO_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    return parse_scenario(data, folder)


def load_suite(root: Path = SHIPPED_DIR, only: list[str] | None = None) -> list[Scenario]:
    """Every scenario folder under `root` (sorted by name), or just those named in `only`."""
    if (root / SCENARIO_FILE).is_file():
        found = [load_scenario(root)]  # a single scenario folder
    else:
        found = [load_scenario(d) for d in sorted(root.iterdir()) if (d / SCENARIO_FILE).is_file()] \
            if root.is_dir() else []
    if not found:
        raise ScenarioError(f"{root}: no scenario folders (each holds a {SCENARIO_FILE})")
    _unique([s.name for s in found], "scenario name", str(root))
    if only:
        names = {s.name for s in found}
        unknown = [n for n in only if n not in names]
        if unknown:
            near = [m for n in unknown for m in difflib.get_close_matches(n, sorted(names), n=1, cutoff=0.6)]
            meant = f" (did you mean {', '.join(near)}?)" if near else ""
            raise UnknownScenario(f"unknown scenario(s) {', '.join(unknown)}{meant}; {root} has "
                                  f"{', '.join(sorted(names))}")
        found = [s for s in found if s.name in only]
    return found
