"""DSH's patch algorithm (`applyEntryPatches`, dsh-app-boot), in Python. Pure.

The installer uses it for two things, never as the authority on what DSH
composes (that is always `dsh --dump-config`):

* predicting the tree our managed block must produce, so verification can
  demand the real dump equals the prediction (every other row untouched);
* recomposing "the profile without our block" from `--dump-default-config`
  plus the user's own entries, so a re-install or a dry-run never has to
  write the patch file just to ask DSH what the tree looks like without it.

Semantics mirrored (dsh-app-boot lib/index.js `applyEntryPatches`):
* the id index holds root rows and, recursively, rows of `group` rows whose
  `config` is a list (rows inside an object config are unreachable);
* `insert` without `id` appends to the root list; with `id` it appends into
  that group's `config` (made a list if it is not); inserted rows are indexed;
* any other entry needs `id`; a given `name` must equal the target's name
  (otherwise skipped); every other key replaces the target's field whole;
* a patch that matches nothing only produces a warning.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterable
from typing import Any

Row = dict[str, Any]
# DSH keys its id index by whatever truthy value a row's `id` holds (in practice a string)
RowIndex = dict[Hashable, Row]


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness: `[]` and `{}` are true, `0`, `""`, `null`, `false` are not."""
    if isinstance(value, (list, dict)):
        return True
    return bool(value) and not (isinstance(value, float) and value != value)


def index_rows(rows: Iterable[Any], index: RowIndex) -> None:
    for row in rows:
        if not isinstance(row, dict):
            continue
        row_id = row.get("id")
        if js_truthy(row_id):
            index[row_id] = row
        if js_truthy(row.get("group")) and isinstance(row.get("config"), list):
            index_rows(row["config"], index)


def apply_entry_patches(data: list[Row], patches: list[Row]) -> tuple[list[Row], list[str]]:
    """Return (composed copy of ``data``, warnings). Inputs are not mutated."""
    tree: list[Row] = copy.deepcopy(data)
    warnings: list[str] = []
    index: RowIndex = {}
    index_rows(tree, index)
    for patch in copy.deepcopy(patches):
        row_id = patch.get("id")
        insert = patch.get("insert")
        name = patch.get("name")
        if js_truthy(insert):
            if not isinstance(insert, list):
                # DSH would throw spreading a non-array; refuse the entry instead.
                warnings.append(f"patch insert: {row_id or 'root'!r} insert is not a list")
                continue
            if js_truthy(row_id):
                target = index.get(row_id)
                if target is None:
                    warnings.append(f"patch insert: entry {row_id!r} not found")
                    continue
                if not js_truthy(target.get("group")):
                    warnings.append(f"patch insert: entry {row_id!r} is not a group")
                    continue
                if not isinstance(target.get("config"), list):
                    target["config"] = []
                target["config"].extend(insert)
            else:
                tree.extend(insert)
            index_rows(insert, index)
            continue
        if not js_truthy(row_id):
            warnings.append("patch: id is required for non-insert patches")
            continue
        target = index.get(row_id)
        if target is None:
            warnings.append(f"patch: entry {row_id!r} not found")
            continue
        if js_truthy(name) and name != target.get("name"):
            warnings.append(f"patch: name mismatch for {row_id!r} (expected {target.get('name')!r}, got {name!r}), skipping")
            continue
        for key, value in patch.items():
            if key in ("id", "insert", "name"):
                continue
            target[key] = value
    return tree, warnings
