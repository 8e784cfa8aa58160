"""Where the live compaction engine sits in a composed DSH tree, and how to swap it. Pure.

Input is the composed entry list printed by `dsh --profile P --dump-config`
(parsed with :mod:`patchyaml`). Two layouts exist in the wild:

* **bundle** (dsh-base + a mode bundle, DSH 0.1.0-rc.8): `compaction-basic` is
  a root row (or a row of a root group whose `config` is a list). A patch can
  reach it by id: disable it and insert our row next to it.
* **preset** (DSH Desktop 0.2.0-rc.2): the engine that agents actually use sits
  in a `compaction` group inside `preset-standard`'s OBJECT config
  (`config: {id, order, plugins: [...]}`). DSH only indexes rows through
  `group` rows whose config is a list, so nothing inside `plugins` can be
  targeted; and an id patch replaces fields whole. The only way in is one
  patch entry `- id: preset-standard` whose `config` is the whole current
  config with our two edits made inside it, every other value copied.

A row is live unless it, or a row containing it, is disabled (`disabled`
truthy and not a `!!js` expression: an expression is decided at boot, so it is
counted as live, which is the safe side for "exactly one engine").
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from .compose import Row, RowIndex, apply_entry_patches, index_rows, js_truthy
from .patchyaml import JsExpr, canonical, load_entry_list

BASIC_ENGINE = "@deepseek-ai/dsh-compaction-basic"
OUR_PACKAGE = "dsh-turn-memory"
#: the shim's cache of the engine's last declarations (shim-js/lib/public-tools.js), beside the tarball
DECLARED_CACHE = "declared.json"
OUR_ROW_ID = "turn-memory"
ENGINE_NAMES = frozenset({BASIC_ENGINE, OUR_PACKAGE})
ROOT_SCOPE = "<root>"

Step = Union[str, int]


class LayoutError(Exception):
    """The composed tree cannot be handled safely; the message says why."""


@dataclass(frozen=True)
class RowSite:
    """One row of the composed tree and where it sits."""

    row: Row
    path: tuple[Step, ...]  # list indices and dict keys from the tree root
    scope: str  # ROOT_SCOPE, or the id of the preset row whose `plugins` hold it
    scope_path: tuple[Step, ...]  # path of that preset row; () for the root scope
    live: bool
    indexable: bool  # reachable by a patch `id`
    parent_group: str | None  # id of the group whose list config holds it (None: root list / preset plugins)
    trail: tuple[str, ...]  # human-readable location

    @property
    def name(self) -> Any:
        return self.row.get("name")

    @property
    def where(self) -> str:
        return " > ".join(self.trail)


def is_disabled(row: Mapping[str, Any]) -> bool:
    value = row.get("disabled")
    return not isinstance(value, JsExpr) and js_truthy(value)


def _is_group(row: Mapping[str, Any]) -> bool:
    return js_truthy(row.get("group")) or row.get("name") == "cordis:group"


def _is_preset(row: Mapping[str, Any]) -> bool:
    config = row.get("config")
    return isinstance(config, dict) and isinstance(config.get("plugins"), list)


def iter_rows(tree: Sequence[Any]) -> list[RowSite]:
    """Every row, depth first, through list-config groups and preset `plugins` lists."""
    out: list[RowSite] = []

    def visit(
        rows: Sequence[Any],
        base: tuple[Step, ...],
        scope: str,
        scope_path: tuple[Step, ...],
        live: bool,
        indexable: bool,
        parent_group: str | None,
        trail: tuple[str, ...],
    ) -> None:
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                continue
            path = base + (i,)
            row_live = live and not is_disabled(row)
            here = trail + (str(row.get("id") or row.get("name") or f"#{i}"),)
            out.append(RowSite(row, path, scope, scope_path, row_live, indexable, parent_group, here))
            config = row.get("config")
            if isinstance(config, list) and _is_group(row):
                # DSH's patch index only descends through rows flagged `group`.
                child_indexable = indexable and js_truthy(row.get("group"))
                group_id = row.get("id") if isinstance(row.get("id"), str) else None
                visit(config, path + ("config",), scope, scope_path, row_live, child_indexable, group_id, here)
            elif isinstance(config, dict) and _is_preset(row):  # _is_preset checks the same
                preset_scope = str(row.get("id") or here[-1])
                visit(config["plugins"], path + ("config", "plugins"), preset_scope, path, row_live, False, None, here)

    visit(tree, (), ROOT_SCOPE, (), True, True, None, ())
    return out


def live_engines(tree: Sequence[Any]) -> dict[str, list[RowSite]]:
    """Live rows of either engine package, grouped by scope (root or preset id)."""
    census: dict[str, list[RowSite]] = {}
    for site in iter_rows(tree):
        if site.live and site.name in ENGINE_NAMES:
            census.setdefault(site.scope, []).append(site)
    return census


@dataclass(frozen=True)
class BundleLayout:
    engines: tuple[RowSite, ...]  # live compaction-basic rows, all id-reachable
    insert_group: str | None  # group our row goes into (None: root list)
    kind: str = "bundle"

    @property
    def locations(self) -> tuple[str, ...]:
        return (ROOT_SCOPE,)


@dataclass(frozen=True)
class PresetTarget:
    site: RowSite  # the preset row (root-level, id-reachable)
    engines: tuple[RowSite, ...]  # live compaction-basic rows inside it

    @property
    def row_id(self) -> str:
        return str(self.site.row["id"])


@dataclass(frozen=True)
class PresetLayout:
    presets: tuple[PresetTarget, ...]
    host_engines: tuple[RowSite, ...] = ()  # live root-scope engines (agents do not use them)
    kind: str = "preset"

    @property
    def locations(self) -> tuple[str, ...]:
        return tuple(p.row_id for p in self.presets)


Layout = Union[BundleLayout, PresetLayout]


def _require_reachable(site: RowSite, tree: Sequence[Any], what: str) -> None:
    row_id = site.row.get("id")
    if not isinstance(row_id, str) or not row_id:
        raise LayoutError(f"{what} at {site.where} has no id, so no patch can target it")
    if not site.indexable:
        raise LayoutError(f"{what} at {site.where} sits inside an object config; DSH patches cannot reach it")
    index: RowIndex = {}
    index_rows(tree, index)
    if index.get(row_id) is not site.row:
        # DSH's id index keeps the LAST row with a given id; a patch would hit another row.
        raise LayoutError(f"{what} at {site.where}: id {row_id!r} is not unique, a patch would hit another row")


def classify(tree: Sequence[Any]) -> Layout:
    """Find the live stock engine(s) and decide how to swap them."""
    sites = iter_rows(tree)
    ours = [s for s in sites if s.live and s.name == OUR_PACKAGE]
    if ours:
        raise LayoutError(
            f"{OUR_PACKAGE} is already live at {ours[0].where} outside the installer's managed block "
            "(your own patch entry or a bundle layer); remove it first"
        )
    basic = [s for s in sites if s.live and s.name == BASIC_ENGINE]
    in_presets = [s for s in basic if s.scope != ROOT_SCOPE]
    if in_presets:
        targets: list[PresetTarget] = []
        for scope_path in dict.fromkeys(s.scope_path for s in in_presets):
            owner = next(s for s in sites if s.path == scope_path)
            _require_reachable(owner, tree, "preset row")
            engines = tuple(s for s in in_presets if s.scope_path == scope_path)
            targets.append(PresetTarget(owner, engines))
        host = tuple(s for s in basic if s.scope == ROOT_SCOPE)
        return PresetLayout(tuple(targets), host)
    if basic:
        for site in basic:
            _require_reachable(site, tree, BASIC_ENGINE)
        return BundleLayout(tuple(basic), basic[0].parent_group)
    raise LayoutError(f"no live {BASIC_ENGINE} row found in the composed tree: nothing to replace")


def make_row(command: Sequence[str], extra_config: Mapping[str, Any] | None = None) -> Row:
    """Our engine row: the shim package, told how to start the Python engine."""
    config: dict[str, Any] = {"engine": {"command": list(command)}}
    if extra_config:
        config = deep_merge(config, extra_config)
    return {"id": OUR_ROW_ID, "name": OUR_PACKAGE, "config": config}


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def rewrite_preset_config(target: PresetTarget, row: Row) -> dict[str, Any]:
    """The preset's config with its engines disabled and ``row`` right after the first one."""
    config = copy.deepcopy(target.site.row["config"])
    # Paths of the engines relative to the preset's `config` value.
    start = len(target.site.path) + 1
    rel = [site.path[start:] for site in target.engines]

    def at(path: Sequence[Step]) -> Any:
        node: Any = config
        for step in path:
            node = node[step]
        return node

    for path in rel:
        at(path)["disabled"] = True  # in place: an existing key keeps its position, as in JS
    first = rel[0]
    at(first[:-1]).insert(int(first[-1]) + 1, copy.deepcopy(row))
    return config


# ---- managed block rendering -------------------------------------------------------------

_PLACEHOLDER = re.compile(r"^\$[A-Z][A-Z_]*$")


class _Drop:
    """Placeholder value meaning: leave this key out."""


DROP = _Drop()


def _placeholders(value: Any) -> set[str]:
    if isinstance(value, str) and not isinstance(value, JsExpr) and _PLACEHOLDER.match(value):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_placeholders(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_placeholders(v) for v in value)) if value else set()
    return set()


def _substitute(value: Any, ctx: Mapping[str, Any]) -> Any:
    if isinstance(value, str) and not isinstance(value, JsExpr) and _PLACEHOLDER.match(value):
        if value not in ctx:
            raise LayoutError(f"template placeholder {value} has no value")
        found = ctx[value]
        return found if found is DROP else copy.deepcopy(found)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            new = _substitute(item, ctx)
            if new is not DROP:
                out[key] = new
        return out
    if isinstance(value, list):
        return [v for v in (_substitute(item, ctx) for item in value) if v is not DROP]
    return value


@dataclass(frozen=True)
class Template:
    header: tuple[str, ...]  # leading comment lines, kept inside the block
    entries: tuple[Row, ...]


def parse_template(text: str) -> Template:
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            header.append(line)
        elif line.strip():
            break
    return Template(tuple(header), tuple(load_entry_list(text, what="template")))


def render_entries(template: Template, common: Mapping[str, Any], items: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Entries using a per-item placeholder are emitted once per item, the rest once."""
    item_keys = set().union(*(set(i) for i in items)) if items else set()
    out: list[Row] = []
    for entry in template.entries:
        if _placeholders(entry) & item_keys:
            out.extend(_substitute(entry, {**common, **item}) for item in items)
        else:
            out.append(_substitute(entry, common))
    return out


@dataclass(frozen=True)
class Plan:
    """What install writes (entries) and what the composed tree must become (predicted)."""

    layout: Layout
    entries: list[Row]
    predicted: list[Row]
    changes: list[str] = field(default_factory=list)


def plan_install(base: list[Row], layout: Layout, row: Row, template: Template) -> Plan:
    if isinstance(layout, BundleLayout):
        entries = render_entries(
            template,
            {"$INSERT_GROUP_ID": layout.insert_group if layout.insert_group else DROP, "$TURN_MEMORY_ROW": row},
            [{"$ENGINE_ROW_ID": site.row["id"]} for site in layout.engines],
        )
        changes = [f"disable {site.where} ({BASIC_ENGINE})" for site in layout.engines]
        where = f"group {layout.insert_group!r}" if layout.insert_group else "the root list"
        changes.append(f"insert {OUR_ROW_ID} ({OUR_PACKAGE}) at the end of {where}")
    else:
        items = []
        changes = []
        for target in layout.presets:
            name = target.site.row.get("name")
            items.append(
                {
                    "$PRESET_ROW_ID": target.row_id,
                    "$PRESET_ROW_NAME": name if isinstance(name, str) else DROP,
                    "$PRESET_CONFIG": rewrite_preset_config(target, row),
                }
            )
            kept = sum(1 for s in iter_rows([target.site.row]) if s.scope != ROOT_SCOPE) - len(target.engines)
            changes.append(f"rewrite {target.row_id}.config whole ({kept} other plugin rows copied unchanged)")
            changes.extend(f"  then disable {site.where} ({BASIC_ENGINE})" for site in target.engines)
            changes.append(f"  then insert {OUR_ROW_ID} ({OUR_PACKAGE}) right after {target.engines[0].where}")
        entries = render_entries(template, {"$TURN_MEMORY_ROW": row}, items)
    predicted, warnings = apply_entry_patches(base, entries)
    if warnings:
        raise LayoutError("the managed block would not apply cleanly: " + "; ".join(warnings))
    return Plan(layout, entries, predicted, changes)


# ---- verification ---------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    ok: bool
    lines: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def diff_trees(actual: Sequence[Any], expected: Sequence[Any]) -> list[str]:
    """Top-level rows (and preset plugin rows) that differ, for a readable failure."""
    out: list[str] = []
    a_rows = {s.path: s for s in iter_rows(actual)}
    e_rows = {s.path: s for s in iter_rows(expected)}
    for path in sorted(set(a_rows) | set(e_rows), key=lambda p: [str(x) for x in p]):
        a, e = a_rows.get(path), e_rows.get(path)
        if a is None:
            assert e is not None  # every path came from one of the two maps
            out.append(f"missing: {e.where}")
        elif e is None:
            out.append(f"unexpected: {a.where}")
        elif canonical(_shallow(a.row)) != canonical(_shallow(e.row)):
            out.append(f"differs: {a.where}")
    return out or ["trees differ"]


def _shallow(row: Row) -> Row:
    # Compare a row without the child rows that are reported on their own.
    if isinstance(row.get("config"), list) and _is_group(row):
        return {k: v for k, v in row.items() if k != "config"}
    if _is_preset(row):
        return {**row, "config": {k: v for k, v in row["config"].items() if k != "plugins"}}
    return row


def verify_installed(after: Sequence[Any], predicted: Sequence[Any], layout: Layout) -> Verdict:
    lines: list[str] = []
    ok = True
    census = live_engines(after)
    for location in layout.locations:
        engines = census.get(location, [])
        names = ", ".join(f"{s.name} at {s.where}" for s in engines) or "none"
        if len(engines) == 1 and engines[0].name == OUR_PACKAGE:
            lines.append(f"OK   {location}: exactly one live compaction engine, ours ({engines[0].where})")
        else:
            ok = False
            lines.append(f"FAIL {location}: {len(engines)} live compaction engine(s): {names}")
    if canonical(list(after)) == canonical(list(predicted)):
        lines.append("OK   every other row is unchanged (composed tree == predicted tree)")
    else:
        ok = False
        lines.append("FAIL the composed tree is not what the managed block should produce:")
        lines.extend(f"       {d}" for d in diff_trees(after, predicted)[:20])
    return Verdict(ok, tuple(lines))


def verify_uninstalled(after: Sequence[Any], expected: Sequence[Any] | None) -> Verdict:
    lines: list[str] = []
    warnings: list[str] = []
    ok = True
    ours = [s for s in iter_rows(after) if s.live and s.name == OUR_PACKAGE]
    if ours:
        ok = False
        lines.append("FAIL dsh-turn-memory is still live at " + ", ".join(s.where for s in ours))
    try:
        layout = classify(after)
    except LayoutError as err:
        ok = False
        lines.append(f"FAIL {err}")
    else:
        census = live_engines(after)
        for location in layout.locations:
            sites = census.get(location, [])
            lines.append(f"OK   {location}: {BASIC_ENGINE} live again ({', '.join(s.where for s in sites)})")
    if expected is not None and canonical(list(after)) != canonical(list(expected)):
        warnings.append("the composed tree differs from the tree recomposed without the managed block:")
        warnings.extend(f"  {d}" for d in diff_trees(after, expected)[:20])
    return Verdict(ok, tuple(lines), tuple(warnings))
