"""The dialect registry (`host/dialects/`): each DSH host version is one module, and the shim's
probe, run on each real host's own session code, picks that host's dialect.

A new host version adds its module to `DIALECTS`, its replace-op shape to
`shim-js/lib/host-probe.js` (if new) and a `PROBED` row here; these tests then hold the three
together (docs/architecture.md, "Adding a DSH host version").
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import pytest

from turn_memory.bridge.protocol import HelloParams
from turn_memory.bridge.server import Peer, RemoteError
from turn_memory.devtools.runtime import DSH_VERSION, V021_VERSION
from turn_memory.host.dialects import (
    DIALECTS,
    RC8,
    V02,
    dialect_for_format,
    dialect_for_host,
    dialect_for_records,
    dialect_for_version,
    dialect_named,
)

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "shim-js" / "lib" / "host-probe.js"
HOOK = ROOT / "shim-js" / "test" / "resolve-node-path.mjs"


def test_each_dialect_is_told_apart_by_its_name_probe_format_and_log_file():
    assert [d.name for d in DIALECTS] == ["rc8", "v02"]
    for field in ("name", "replace_keys", "session_format_version", "log_file_stem", "first_version"):
        values = [getattr(d, field) for d in DIALECTS]
        assert len(set(values)) == len(values), field
    assert [d.first_version for d in DIALECTS] == sorted(d.first_version for d in DIALECTS)  # oldest first
    for dialect in DIALECTS:
        assert dialect.surface_event_types <= dialect.known_event_types, dialect.name


def test_the_probe_tries_every_dialects_replace_op_and_nothing_else():
    shapes = re.search(r"const REPLACE_SHAPES = \{(.*?)\n\};", PROBE.read_text(), re.S)
    assert shapes is not None, "host-probe.js lost REPLACE_SHAPES"
    assert sorted(re.findall(r"^\s*'([^']+)':", shapes.group(1), re.M)) == sorted("/".join(d.replace_keys)
                                                                                    for d in DIALECTS)


def _probe(node: str, modules: Path) -> dict:
    script = f"import({json.dumps(PROBE.as_uri())}).then((m) => console.log(JSON.stringify(m.probeHost())))"
    run = subprocess.run([node, "--import", HOOK.as_uri(), "--input-type=module", "-e", script],
                         env={"NODE_PATH": str(modules)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def probed(node: str, dsh_runtime, dsh_v021_modules) -> dict[str, dict]:
    """What the shim's probe reports on each cached real host, by the host's version."""
    return {DSH_VERSION: _probe(node, Path(dsh_runtime.node_modules)), V021_VERSION: _probe(node, dsh_v021_modules)}


@pytest.mark.parametrize("version, dialect", [(DSH_VERSION, RC8), (V021_VERSION, V02)], ids=["rc8", "v021"])
def test_the_probe_on_each_real_host_picks_its_dialect(probed, version, dialect):
    facts = probed[version]
    assert facts["replaceKeys"] == ["/".join(dialect.replace_keys)]
    assert dialect_for_host(facts["replaceKeys"]) is dialect
    assert facts["sessionFormatVersion"] == dialect.session_format_version
    assert facts["checkpointSource"] == dialect.checkpoint_source("probe")
    assert dialect_for_version(version) is dialect and dialect.support(version) == "tested end to end"


def test_a_probe_that_decides_nothing_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=re.escape("the host accepted replace ops ['start/end', 'startSeq/endSeq']: "
                                                   "no single known dialect matches")):
        dialect_for_host(["start/end", "startSeq/endSeq"])
    with pytest.raises(ValueError, match=r"^the host accepted replace ops \[\]: no single known dialect matches$"):
        dialect_for_host([])
    with pytest.raises(ValueError, match=r"^the host probe failed: \{'error': 'no Session'\}$"):
        dialect_for_host({"error": "no Session"})
    with pytest.raises(ValueError, match=r"^the client sent neither a host probe nor a dialect$"):
        dialect_for_host(None)
    assert dialect_for_host(None, "v02") is V02 and dialect_named("rc8") is RC8
    with pytest.raises(ValueError, match=re.escape("unknown dialect 'v03' (known: rc8, v02)")):
        dialect_for_host(None, "v03")


def test_the_engine_refuses_a_handshake_that_claims_an_unknown_dialect():
    from turn_memory.engine import Engine

    hello = HelloParams(protocol=1, dshVersion="0.3.0", dialect="v03", secret="s", pid=1,
                        checkpointSource={"kind": "compact-checkpoint", "compactionId": "probe"})

    async def shake():
        return Engine().on_hello(Peer(b"p"), hello)

    with pytest.raises(RemoteError) as refused:
        asyncio.run(shake())
    assert (refused.value.info.code, refused.value.info.message) == (
        "dialect", "cannot tell this DSH's dialect: unknown dialect 'v03' (known: rc8, v02)")


@pytest.mark.parametrize("version, name", [
    ("0.1.0-rc.8", "rc8"), ("0.1.4", "rc8"), ("0.1.5", "v02"), ("0.2.0-rc.2", "v02"), ("0.2.1-rc.2", "v02"),
    ("0.3.0", "v02"),
])
def test_a_version_speaks_the_dialect_of_the_newest_first_version_at_or_below_it(version, name):
    assert dialect_for_version(version).name == name


def test_a_version_no_dialect_speaks_is_refused():
    with pytest.raises(ValueError, match=re.escape("unrecognised DSH version 'dsh'")):
        dialect_for_version("dsh")
    with pytest.raises(ValueError, match=re.escape("DSH 0.0.9 is older than every known dialect")):
        dialect_for_version("0.0.9")


def test_what_this_project_says_about_each_version():
    assert V02.support("0.2.0-rc.2") == "supported by contract: 0.2.0-rc.2 is DSH Desktop's"
    assert V02.support("0.2.1-rc.2") == RC8.support("0.1.0-rc.8") == "tested end to end"
    assert V02.support("0.2.2") == RC8.support("0.2.1-rc.2") == ""


@pytest.mark.parametrize("version, name", [(0, "rc8"), (4, "v02"), (1, None), (5, None), (True, None), ("4", None),
                                           (None, None)])
def test_a_log_header_s_session_format_names_the_dialect_that_wrote_it(version, name):
    found = dialect_for_format(version)
    assert (found.name if found else None) == name


def _op(dialect, seq=1):
    return {"type": "user/message", "seq": seq + 1, "surfaceOp": dialect.replace_op(seq, seq), "sourceEventSeqs": [seq]}


@pytest.mark.parametrize("records, name", [
    ([{"type": "assistant/chunk"}], "rc8"),  # 0.2 dropped assistant/chunk
    ([{"type": "system/message"}], "v02"),  # only 0.2 has a system node
    ([{"type": "turn/start"}, _op(RC8)], "rc8"),  # start/end replace keys
    ([{"type": "turn/start"}, _op(V02)], "v02"),  # startSeq/endSeq
    ([{"type": "turn/start"}, {"type": "user/message", "surfaceOp": "append"}], None),  # both write these
    ([{"type": "plugin/own-record", "ignorable": True}], None),  # nobody's: tells nothing
    ([{"type": "assistant/chunk"}, _op(V02)], None),  # contradicts itself
    ([], None),
])
def test_records_name_the_dialect_only_when_exactly_one_fits_them(records, name):
    found = dialect_for_records(records)
    assert (found.name if found else None) == name
