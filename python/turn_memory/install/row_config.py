"""The turn-memory row's config on (re-)install: what the profile has, merged with what was given. Pure.

`install` keeps every key of the installed row unless the user gives it (`--set`,
`--config-json`) or removes it (`--unset`); `--replace-config` starts from an empty row, the
old behaviour. `engine.command` is always the one this install records (the Python it runs
with) unless given. Every run lists what happens to each key, so nothing is dropped unseen.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from turn_memory.config import EngineConfig, config_keys, nearest_key

from .layout import OUR_PACKAGE, deep_merge
from .patchyaml import load_entry_list

ChangeKind = Literal["kept", "set", "changed", "removed"]


def installed_config(block_text: str | None) -> dict[str, Any] | None:
    """The config of our row in the managed block; None without a block or a row in it."""
    if not block_text:
        return None
    found = _find_row(load_entry_list(block_text, what="the turn-memory managed block"))
    if found is None:
        return None
    config = found.get("config")
    return copy.deepcopy(config) if isinstance(config, dict) else {}


def _find_row(value: Any) -> dict[str, Any] | None:
    # the row sits in an `insert` list (bundle layout) or deep in a preset's config (preset layout)
    if isinstance(value, dict):
        if value.get("name") == OUR_PACKAGE:
            return value
        children: Iterable[Any] = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return None
    for child in children:
        if (found := _find_row(child)) is not None:
            return found
    return None


def leaves(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of every leaf (a list or a scalar; an empty mapping is a leaf too)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(leaves(value, name + "."))
        else:
            out[name] = value
    return out


def without_keys(config: Mapping[str, Any], keys: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
    """`config` without the dotted keys (a section key removes the section); and the keys it did not hold."""
    out = copy.deepcopy(dict(config))
    missing = []
    for key in keys:
        *parents, last = key.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            missing.append(key)
            continue
        del node[last]
    return _prune(out), missing


def _prune(config: dict[str, Any]) -> dict[str, Any]:
    """Sections left empty by a removal go too (an empty section and a missing one mean the same)."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            value = _prune(value)
            if not value:
                continue
        out[key] = value
    return out


@dataclass(frozen=True)
class Change:
    key: str
    kind: ChangeKind
    old: Any = None
    new: Any = None
    why: str = ""  # for a removal: the option that removed it

    def line(self) -> str:
        if self.kind == "kept":
            return f"kept     {self.key} = {show(self.old)}"
        if self.kind == "set":
            return f"set      {self.key} = {show(self.new)}  (new)"
        if self.kind == "changed":
            return f"changed  {self.key} = {show(self.new)}  (was {show(self.old)})"
        return f"removed  {self.key} = {show(self.old)}" + (f"  ({self.why})" if self.why else "")


def show(value: Any) -> str:
    """A value as `--set` would take it back (YAML flow / JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def diff(old: Mapping[str, Any], new: Mapping[str, Any], removed_by: str = "") -> list[Change]:
    """Every leaf key of either config and what happens to it, in the new config's order."""
    before, after = leaves(old), leaves(new)
    changes = []
    for key, value in after.items():
        if key not in before:
            changes.append(Change(key, "set", new=value))
        elif before[key] == value and type(before[key]) is type(value):
            changes.append(Change(key, "kept", old=value))
        else:
            changes.append(Change(key, "changed", old=before[key], new=value))
    changes += [Change(key, "removed", old=value, why=removed_by) for key, value in before.items() if key not in after]
    return changes


@dataclass(frozen=True)
class Merged:
    config: dict[str, Any]
    changes: list[Change]
    #: --unset keys the installed row did not hold
    not_there: list[str]
    #: how the config was built, for the report
    how: str


def merge_config(installed: Mapping[str, Any] | None, command: list[str], given: Mapping[str, Any],
                 unset: list[str], *, replace: bool) -> Merged:
    """The row config install writes, and what changed against the installed one."""
    old = dict(installed or {})
    base: dict[str, Any] = {} if replace else copy.deepcopy(old)
    base = deep_merge(base, {"engine": {"command": list(command)}})
    config, not_there = without_keys(deep_merge(base, given), unset)
    if replace:
        how = "--replace-config: written from this command's options only"
        removed_by = "--replace-config"
    elif installed is None:
        how = "new row"
        removed_by = ""
    else:
        how = "merged into the installed row (a key is kept unless given; --unset KEY removes one)"
        removed_by = "--unset"
    return Merged(config, diff(old, config, removed_by), not_there, how)


#: what `--set KEY=…` means by a boolean: YAML's JSON schema reads only true/false as one
_TRUE, _FALSE = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0"})


def typed_values(config: Mapping[str, Any], model: type[BaseModel] = EngineConfig) -> dict[str, Any]:
    """`config` with each boolean key's yes/no/on/off/1/0 as the boolean it means (DSH and the
    shim would read `no` as a string, which is true); every other value as it is."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        info = model.model_fields.get(key)
        kind = info.annotation if info is not None else None
        if isinstance(value, Mapping) and isinstance(kind, type) and issubclass(kind, BaseModel):
            out[key] = typed_values(value, kind)
        elif kind is bool and isinstance(value, (str, int)) and not isinstance(value, bool) \
                and str(value).strip().lower() in _TRUE | _FALSE:
            out[key] = str(value).strip().lower() in _TRUE
        else:
            out[key] = value
    return out


def known_names() -> set[str]:
    """Every dotted key and section a row config may hold."""
    names: set[str] = set()
    for key in config_keys():
        parts = key.name.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def unknown_unsets(merged: Merged) -> list[tuple[str, str | None]]:
    """(key, nearest valid key) of each `--unset` key that is neither in the row nor a key at all:
    a misspelling, which would otherwise remove nothing unseen."""
    known = known_names()
    return [(key, nearest_key(key)) for key in merged.not_there if key not in known]


def clashes(given: Mapping[str, Any], unset: Iterable[str]) -> list[str]:
    """Keys both set and unset by one command (a section unset covers its keys)."""
    keys = leaves(given)
    return [u for u in unset if any(k == u or k.startswith(u + ".") or u.startswith(k + ".") for k in keys)]
