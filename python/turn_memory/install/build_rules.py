"""The one pnpm build rule the shim needs, written into the profile's pnpm-workspace.yaml.

pnpm 11 (what DSH Desktop 0.2 and the 0.2.1 runtime run) refuses any dependency build script
that the workspace does not list under `allowBuilds` (ERR_PNPM_IGNORED_BUILDS), so `dsh plugin
add` of the shim fails on zeromq's install script. That script only locates or compiles the
native addon, and zeromq 6 ships prebuilt addons for every platform DSH supports, so the rule
we add is `zeromq: false` — "known, do not run" — not a permission: the profile's other build
rules are left exactly as they are, and a choice the user already made for zeromq is kept.
pnpm 10 (DSH 0.1.0-rc.8) never runs dependency builds by default and ignores the key.
A workspace file saved on Windows keeps its CRLF line ends and a UTF-8 byte order mark: the
key is found through both (missing it would add a second `allowBuilds:`, a duplicate key
pnpm refuses), and the rule is written with the file's own line end.
"""

from __future__ import annotations

import re

PACKAGE = "zeromq"
BOM = "\ufeff"
_KEY = re.compile(r"^allowBuilds:[ \t]*(#[^\r\n]*)?(?=\r?$)", re.M)
_FLOW = re.compile(r"^allowBuilds:[ \t]*\{", re.M)


def with_zeromq_rule(text: str | None) -> str | None:
    """The workspace text with our rule added, or None when nothing needs to change."""
    text = text or ""
    bom = BOM if text.startswith(BOM) else ""
    text = text[len(bom):]
    nl = "\r\n" if "\r\n" in text else "\n"
    if re.search(rf"^[ \t]+['\"]?{PACKAGE}['\"]?[ \t]*:", _section(text), re.M):
        return None  # the user (or an earlier install) already decided for zeromq
    if _FLOW.search(text):
        return bom + _FLOW.sub(f"allowBuilds: {{ {PACKAGE}: false,", text, count=1)
    key = _KEY.search(text)
    if key:
        return bom + text[: key.end()] + f"{nl}  {PACKAGE}: false" + text[key.end():]
    sep = "" if not text or text.endswith("\n") else nl
    return f"{bom}{text}{sep}allowBuilds:{nl}  {PACKAGE}: false{nl}"


def _section(text: str) -> str:
    """The block-style `allowBuilds:` mapping's body ('' when absent)."""
    key = _KEY.search(text)
    if not key:
        flow = _FLOW.search(text)
        return text[flow.start(): text.find("}", flow.start()) + 1].replace(",", "\n ").replace("{", "\n ") if flow else ""
    body = []
    for line in text[key.end():].splitlines()[1:]:
        if line.strip() and not line[0].isspace():
            break
        body.append(line)
    return "\n".join(body)
