"""Read and write DSH's entry-list YAML dialect from Python.

DSH parses `cordis.patch.yml` and prints `--dump-config` with js-yaml's JSON
schema (YAML 1.2 core: only `true/false`, `null/~`, decimal/0x/0o/0b ints and
plain floats are implicit) extended by one tag, `!!js`, whose scalar is a
JavaScript expression the loader evaluates later. PyYAML's safe schema is
YAML 1.1 (`yes`, `on`, `2024-01-01`, `012`, `1:30`, `1_000` all change type),
so reading a dump with it and writing the values back would silently change
meaning. This module therefore:

* loads with exactly the js-yaml implicit types (everything else is a str),
  turning `!!js` scalars into :class:`JsExpr`, a ``str`` subclass;
* dumps so that js-yaml AND PyYAML read every value back unchanged: a string
  that either schema would resolve to a non-string is quoted, and `JsExpr`
  prints as `!!js <expr>`.

Everything here is pure (text in, objects out and back).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

JS_TAG = "tag:yaml.org,2002:js"


class JsExpr(str):
    """An opaque `!!js` expression: kept verbatim, never evaluated.

    It is a ``str`` so code that only copies values needs no special case;
    compare trees with :func:`canonical` because ``JsExpr("x") == "x"``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JsExpr({str.__repr__(self)})"


# js-yaml 4 JSON_SCHEMA implicit types (lib/type/{null,bool,int,float}.js).
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_RE = re.compile(r"^[-+]?(?:0b[01]+|0x[0-9a-fA-F]+|0o[0-7]+|[0-9]+)$")
_FLOAT_RE = re.compile(
    r"^(?:[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"
    r"|\.[0-9]+(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN))$"
)

_TAG_NULL = "tag:yaml.org,2002:null"
_TAG_BOOL = "tag:yaml.org,2002:bool"
_TAG_INT = "tag:yaml.org,2002:int"
_TAG_FLOAT = "tag:yaml.org,2002:float"
_TAG_STR = "tag:yaml.org,2002:str"

_CORE_RESOLVERS: list[tuple[str, re.Pattern[str], list[str | None]]] = [
    (_TAG_NULL, _NULL_RE, ["~", "n", "N", ""]),
    (_TAG_BOOL, _BOOL_RE, list("tTfF")),
    # int before float: "12" matches both; js-yaml also tries int first.
    (_TAG_INT, _INT_RE, list("-+0123456789")),
    (_TAG_FLOAT, _FLOAT_RE, list("-+0123456789.")),
]


def _parse_js_int(text: str) -> int:
    # Mirrors js-yaml parseYamlInteger: a leading 0 is NOT octal ("012" == 12).
    sign = -1 if text.startswith("-") else 1
    body = text[1:] if text[:1] in "+-" else text
    if body.startswith("0b"):
        return sign * int(body[2:], 2)
    if body.startswith("0x"):
        return sign * int(body[2:], 16)
    if body.startswith("0o"):
        return sign * int(body[2:], 8)
    return sign * int(body, 10)


def _parse_js_float(text: str) -> float:
    lowered = text.lower()
    if lowered in (".inf", "+.inf"):
        return math.inf
    if lowered == "-.inf":
        return -math.inf
    if lowered == ".nan":
        return math.nan
    return float(text)


class DshLoader(yaml.SafeLoader):
    """SafeLoader narrowed to js-yaml's JSON schema plus `!!js`."""


# Replace (not extend) the inherited YAML 1.1 resolvers.
DshLoader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in _CORE_RESOLVERS:
    DshLoader.add_implicit_resolver(_tag, _regexp, _first)


# every node kind the composer builds; a tag can sit on any of them (`!!int [1]`)
_AnyNode = yaml.ScalarNode | yaml.SequenceNode | yaml.MappingNode


def _scalar_text(loader: yaml.SafeLoader, node: _AnyNode) -> str:
    """`loader.construct_scalar`, with its refusal of a sequence spelled out (same error) so the
    checker sees the narrowing; a mapping it takes through its `=` value key, or refuses."""
    if isinstance(node, yaml.SequenceNode):
        raise yaml.constructor.ConstructorError(
            None, None, f"expected a scalar node, but found {node.id}", node.start_mark
        )
    return loader.construct_scalar(node)


def _construct_int(loader: yaml.SafeLoader, node: _AnyNode) -> int:
    return _parse_js_int(_scalar_text(loader, node))


def _construct_float(loader: yaml.SafeLoader, node: _AnyNode) -> float:
    return _parse_js_float(_scalar_text(loader, node))


def _construct_js(loader: yaml.SafeLoader, node: yaml.Node) -> JsExpr:
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, "!!js must tag a scalar (a JavaScript expression)", node.start_mark
        )
    return JsExpr(loader.construct_scalar(node))


def _construct_timestamp_as_str(loader: yaml.SafeLoader, node: _AnyNode) -> str:
    # An explicit !!timestamp is not part of js-yaml's JSON schema; keep the text.
    return str(_scalar_text(loader, node))


DshLoader.add_constructor(_TAG_INT, _construct_int)
DshLoader.add_constructor(_TAG_FLOAT, _construct_float)
DshLoader.add_constructor(JS_TAG, _construct_js)
DshLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp_as_str)


class DshDumper(yaml.SafeDumper):
    """SafeDumper that quotes any string either YAML 1.1 or js-yaml would retype."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 - js-yaml dumps with noRefs
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent block sequences under their key, as DSH's own dumps do.
        return super().increase_indent(flow, False)

    def choose_scalar_style(self) -> str:
        # PyYAML never prints a tagged scalar plain; DSH's own dumps do
        # (`root: !!js dshHomePath('sessions')`). An explicit tag makes the plain
        # form unambiguous, so use it whenever the text allows a plain scalar.
        # the emitter only asks this while it emits a ScalarEvent
        event = self.event
        if isinstance(event, yaml.ScalarEvent) and event.tag == JS_TAG and not event.style:
            if self.analysis is None:
                self.analysis = self.analyze_scalar(event.value)
            a = self.analysis
            if not (a.empty or a.multiline) and a.allow_block_plain and not self.flow_level and not self.simple_key_context:
                return ""
        return super().choose_scalar_style()


# Keep PyYAML's own 1.1 resolvers (so our own reader and PyYAML users agree) and
# add the js-yaml ones: a plain scalar is only emitted when BOTH read it as str.
DshDumper.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeDumper.yaml_implicit_resolvers.items()}
for _tag, _regexp, _first in _CORE_RESOLVERS:
    DshDumper.add_implicit_resolver(_tag, _regexp, _first)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # Multi-line text reads best (and diffs best) as a literal block.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar(_TAG_STR, str(data), style=style)


def _represent_js(dumper: yaml.SafeDumper, data: JsExpr) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar(JS_TAG, str(data), style=style)


def _represent_float(dumper: yaml.SafeDumper, data: float) -> yaml.ScalarNode:
    if math.isnan(data):
        text = ".nan"
    elif math.isinf(data):
        text = ".inf" if data > 0 else "-.inf"
    else:
        text = repr(data)
        # "1e+20" is a valid YAML 1.2 float but not YAML 1.1; js-yaml reads both.
    return dumper.represent_scalar(_TAG_FLOAT, text)


DshDumper.add_representer(str, _represent_str)
DshDumper.add_representer(JsExpr, _represent_js)
DshDumper.add_representer(float, _represent_float)


def load(text: str) -> Any:
    """Parse one YAML document in DSH's dialect."""
    return yaml.load(text, Loader=DshLoader)  # noqa: S506 - DshLoader is a SafeLoader


def dump(data: Any) -> str:
    """Render ``data`` in block style; js-yaml reads every value back unchanged."""
    return yaml.dump(
        data,
        Dumper=DshDumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        width=100,
        indent=2,
    )


def canonical(value: Any) -> Any:
    """A comparison form: JsExpr becomes ``{"__jsExpr": text}`` (as js-yaml constructs it).

    Needed because ``JsExpr`` is a ``str`` and would compare equal to a plain string.
    """
    if isinstance(value, JsExpr):
        return {"__jsExpr": str(value)}
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def load_entry_list(text: str, *, what: str) -> list[dict[str, Any]]:
    """Parse a patch list / dump: a top-level sequence of mappings (empty text -> error, like DSH)."""
    data = load(text)
    if not isinstance(data, list):
        raise ValueError(f"{what} must be a top-level YAML array of entries")
    for index, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ValueError(f"{what}: entry {index + 1} must be a mapping")
    return data
