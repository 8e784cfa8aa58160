"""The one pnpm build rule the shim needs, written into the profile's pnpm-workspace.yaml.

pnpm 11 (what DSH Desktop 0.2 and the 0.2.1 runtime run) refuses any dependency build script
that the workspace does not list under `allowBuilds` (ERR_PNPM_IGNORED_BUILDS), so `dsh plugin
add` of the shim fails on zeromq's install script. That script only locates or compiles the
native addon, and zeromq 6 ships prebuilt addons for every platform DSH supports, so the rule
we add is `zeromq: false` — "known, do not run" — not a permission: the profile's other build
rules are left exactly as they are, and a choice the user already made for zeromq is kept.
pnpm 10 (DSH 0.1.0-rc.8) never runs dependency builds by default and ignores the key.
"""

from __future__ import annotations

import re

PACKAGE = "zeromq"
_KEY = re.compile(r"^allowBuilds:[ \t]*(#.*)?$", re.M)
_FLOW = re.compile(r"^allowBuilds:[ \t]*\{", re.M)


def with_zeromq_rule(text: str | None) -> str | None:
    """The workspace text with our rule added, or None when nothing needs to change."""
    text = text or ""
    if re.search(rf"^[ \t]+['\"]?{PACKAGE}['\"]?[ \t]*:", _section(text), re.M):
        return None  # the user (or an earlier install) already decided for zeromq
    if _FLOW.search(text):
        return _FLOW.sub(f"allowBuilds: {{ {PACKAGE}: false,", text, count=1)
    key = _KEY.search(text)
    if key:
        return text[: key.end()] + f"\n  {PACKAGE}: false" + text[key.end():]
    sep = "" if not text or text.endswith("\n") else "\n"
    return f"{text}{sep}allowBuilds:\n  {PACKAGE}: false\n"


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
