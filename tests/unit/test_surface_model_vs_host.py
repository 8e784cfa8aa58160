"""Differential test: our rc8 surface model against the real DSH 0.1.0-rc.8 session validator.

Every case is a base log (ending in session/end-seed, so the host adds no marker of its own)
plus a planned batch. The real host judges it twice, in one node run for all cases:
- seed: the whole log as stored (Session.create seed validation + the known-type gate);
- append: session.append of each planned event, then a reload of what was committed.
Our verdicts (check_plan, the mirror `append`, the constructor) must match.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from surface_builders import (
    LogBuilder,
    base_log,
    compaction_plan,
    rewritten_tool_result,
    span,
    user_message,
)
from turn_memory.host.dialects import RC8, V02
from turn_memory.host.surface import SessionLog, SurfaceError

Event = dict[str, Any]
Marks = list[dict[str, int]]
SCRIPT = Path(__file__).with_name("rc8_host_verdicts.mjs")


def _base() -> tuple[list[Event], Marks]:
    events, marks = base_log(RC8, turns=2)
    b = LogBuilder(RC8, len(events))
    b.end_seed()
    return events + b.events, marks


BASE, MARKS = _base()
BASE_LOG = SessionLog(RC8, BASE)
NODES = list(BASE_LOG.nodes)
N = len(BASE)


def _p() -> LogBuilder:
    return LogBuilder(RC8, N)


def _replace(etype: str, data: Any, first: int, last: int, *, sources: Any = "cover", op: Any = None) -> list[Event]:
    p = _p()
    cited = span(NODES, first, last) if sources == "cover" else sources
    p.add(etype, data, op=op if op is not None else RC8.replace_op(first, last), sources=cited)
    return p.events


def _one(kind: str, mutate: Callable[[Event], None], **kw: Any) -> list[Event]:
    p = _p()
    {"user": p.user, "assistant": p.assistant, "tool": lambda **k: p.tool_result("c1", **k)}[kind](**kw)
    mutate(p.events[0])
    return p.events


def _msg(event: Event) -> dict[str, Any]:
    return event["data"] if event["type"] == "user/message" else event["data"]["message"]


def _set(path: str, value: Any) -> Callable[[Event], None]:
    """Mutator setting a dotted path inside the event's message ('-' deletes)."""

    def mutate(event: Event) -> None:
        target = _msg(event)
        *parents, leaf = path.split(".")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value == "-":
            del target[leaf]
        else:
            target[leaf] = value

    return mutate


def _tool_rewrite(mutate: Callable[[Event], None] | None = None, **override: Any) -> list[Event]:
    ev = rewritten_tool_result(BASE[MARKS[0]["tool_result"]], N, RC8)
    ev.update(override)
    if mutate:
        mutate(ev)
    return [ev]


def _extra(etype: str, data: Any, **kw: Any) -> list[Event]:
    p = _p()
    p.add(etype, data, **kw)
    return p.events


def _same_batch() -> list[Event]:
    p = _p()
    a, b = p.user("one"), p.user("two")
    p.add("user/message", user_message("both"), op=RC8.replace_op(a, b), sources=[a, b])
    return p.events


def _tool_rewrite_in_batch() -> list[Event]:
    p = _p()
    p.assistant("call", tool_calls=("cx",))
    first = p.tool_result("cx", "long output")
    ev = rewritten_tool_result(p.events[-1], p.next_seq, RC8)
    assert ev["surfaceOp"] == RC8.replace_op(first, first)
    return p.events + [ev]


t0, t1 = MARKS
U, ANS, TR, CALL_A = t0["user"], t0["answer"], t0["tool_result"], t0["call_assistant"]
OP = RC8.replace_op

#: name -> (plan, strict). "ok-"/"bad-" is the host's append-then-reload verdict. Strict cases
#: are plans check_plan refuses on purpose although the host's append would take them:
#: True, the shim would silently drop the extra key, so the plan does not say what will land;
#: MODEL, the provider would be sent a tool call without its result (or a result without its
#: call), which the host's session does not check but the model's API refuses.
MODEL = "model"
CASES: dict[str, tuple[list[Event], bool | str]] = {
    # valid
    "ok-user-append": (_one("user", lambda e: None), False),
    "ok-user-replace-full-citation": (_replace("user/message", user_message("s"), U, ANS), False),
    "ok-user-replace-extra-citation": (_replace("user/message", user_message("s"), U, ANS, sources=[0, t0["turn_start"], *span(NODES, U, ANS)]), False),
    "ok-assistant-replace-cited": (_replace("assistant/message", RC8.assistant_data(1, 2, BASE[ANS]["data"]["message"] | {"id": "new"}), CALL_A, ANS), False),
    "ok-assistant-replace-leaving-a-call-unanswered": (_replace("assistant/message", RC8.assistant_data(1, 2, BASE[ANS]["data"]["message"] | {"id": "new"}), TR, ANS), MODEL),
    "ok-assistant-append-empty-sources": (_one("assistant", lambda e: None, sources=[]), False),
    "ok-tool-content-rewrite": (_tool_rewrite(), False),
    "ok-compaction-transaction": (compaction_plan(RC8, N, span(NODES, U, ANS)), False),
    "ok-same-batch-replace": (_same_batch(), False),
    "ok-unknown-ignorable-dropped-by-append": (_extra("compaction/prune", {"x": 1}, ignorable=True), True),
    "ok-typo-key-dropped-by-append": (_one("user", lambda e: None, sourceEventSeq=[1]), True),
    # surface op shape
    "bad-v02-op-keys": (_replace("user/message", user_message("s"), U, U, op=V02.replace_op(U, U)), False),
    "bad-op-extra-key": (_replace("user/message", user_message("s"), U, U, op={**OP(U, U), "x": 1}), False),
    "bad-op-missing-key": (_replace("user/message", user_message("s"), U, U, op={"op": "replace", "start": U}), False),
    "bad-op-string-endpoint": (_replace("user/message", user_message("s"), U, U, op={"op": "replace", "start": str(U), "end": U}), False),
    "bad-op-fraction-endpoint": (_replace("user/message", user_message("s"), U, U, op={"op": "replace", "start": U + 0.5, "end": U}), False),
    "bad-op-negative-endpoint": (_replace("user/message", user_message("s"), U, U, op={"op": "replace", "start": -1, "end": U}), False),
    "bad-op-bool-endpoint": (_replace("user/message", user_message("s"), U, U, op={"op": "replace", "start": True, "end": U}), False),
    "bad-op-string": (_one("user", lambda e: None, op="replace"), False),
    "bad-op-null": (_one("user", lambda e: None, surfaceOp=None), False),
    # eligibility
    "bad-op-on-turn-start": (_extra("turn/start", {"turn": 3}, op="append"), False),
    "bad-sources-on-compaction-start": (_extra("compaction/start", {"compactionId": "c", "turn": None}, sources=[0]), False),
    "bad-system-message-with-op": (_extra("system/message", {"message": {"id": "s", "role": "system", "source": {"kind": "x"}, "content": []}}, op="append"), False),
    "bad-user-without-op": (_one("user", lambda e: None, op=None), False),
    "bad-assistant-without-op": (_one("assistant", lambda e: None, op=None), False),
    "bad-tool-without-op": (_one("tool", lambda e: None, op=None), False),
    # provenance
    "bad-shadowed-not-cited": (_replace("user/message", user_message("s"), U, ANS, sources=[U, ANS]), False),
    "bad-replace-without-sources": (_replace("user/message", user_message("s"), U, U, sources=None), False),
    "bad-empty-sources-user": (_one("user", lambda e: None, sources=[]), False),
    "bad-empty-sources-tool": (_one("tool", lambda e: None, sources=[]), False),
    "bad-duplicate-sources": (_replace("user/message", user_message("s"), U, U, sources=[U, U]), False),
    "bad-self-source": (_one("user", lambda e: None, sources=[N]), False),
    "bad-later-source": (_one("user", lambda e: None, sources=[N + 5]), False),
    "bad-non-array-sources": (_one("user", lambda e: None, sources=3), False),
    "bad-source-entry": (_one("user", lambda e: None, sources=[0, "1"]), False),
    "bad-assistant-replace-empty-sources": (_replace("assistant/message", RC8.assistant_data(1, 2, BASE[ANS]["data"]["message"]), ANS, ANS, sources=[]), False),
    # range
    "bad-endpoint-off-surface": (_replace("user/message", user_message("s"), U, U, op=OP(t0["turn_start"], U)), False),
    "bad-endpoint-self": (_replace("user/message", user_message("s"), U, U, op=OP(U, N)), False),
    "bad-start-after-end": (_replace("user/message", user_message("s"), U, ANS, op=OP(ANS, U)), False),
    # tool rewrite
    "bad-tool-rewrite-two-nodes": (_tool_rewrite(surfaceOp=OP(TR, ANS), sourceEventSeqs=[TR, ANS]), False),
    "bad-tool-rewrite-non-tool-target": (_tool_rewrite(surfaceOp=OP(ANS, ANS), sourceEventSeqs=[ANS]), False),
    "bad-tool-rewrite-is-error": (_tool_rewrite(lambda e: e["data"]["message"]["content"][0].update(isError=True)), False),
    "bad-tool-rewrite-message-id": (_tool_rewrite(lambda e: e["data"]["message"].update(id="other")), False),
    "bad-tool-rewrite-turn": (_tool_rewrite(lambda e: e["data"].update(turn=9)), False),
    # message shapes (reload)
    "bad-user-role": (_one("user", _set("role", "assistant")), False),
    "bad-assistant-role": (_one("assistant", _set("role", "user")), False),
    "bad-tool-role-tool": (_one("tool", _set("role", "tool")), False),
    "bad-user-source-empty-kind": (_one("user", _set("source", {"kind": ""})), False),
    "bad-user-source-missing": (_one("user", _set("source", "-")), False),
    "bad-assistant-source-plugin": (_one("assistant", _set("source", {"kind": "plugin", "plugin": "turn-memory"})), False),
    "bad-assistant-source-no-model": (_one("assistant", _set("source", {"kind": "model", "provider": "p"})), False),
    "bad-tool-source-kind": (_one("tool", _set("source", {"kind": "plugin", "callId": "c1"})), False),
    "bad-tool-call-id-mismatch": (_one("tool", _set("source", {"kind": "tool", "callId": "c2"})), False),
    "bad-user-missing-id": (_one("user", _set("id", "-")), False),
    "bad-assistant-empty-id": (_one("assistant", _set("id", "")), False),
    "bad-tool-missing-id": (_one("tool", _set("id", "-")), False),
    "bad-content-not-array": (_one("user", _set("content", "hi")), False),
    "bad-tool-no-block": (_one("tool", _set("content", [])), False),
    "bad-tool-two-blocks": (_one("tool", lambda e: e["data"]["message"]["content"].append(copy.deepcopy(e["data"]["message"]["content"][0]))), False),
    "bad-tool-text-block": (_one("tool", _set("content", [{"type": "text", "text": "x"}])), False),
    "bad-tool-block-content": (_one("tool", _set("content.0.content", "x")), False),
    "ok-assistant-without-stream": (_one("assistant", lambda e: None), False),
    # vocabulary and envelope
    "bad-unknown-type": (_extra("turn-memory/ledger", {"x": 1}), False),
    "bad-system-message-unknown-to-rc8": (_extra("system/message", {"message": {}}), False),
    "bad-v02-only-type": (_extra("model/selection", {"provider": "p", "model": "m"}), False),
    "bad-legacy-header-delta": (_extra("request/header-delta", {}), False),
    "bad-legacy-header-fallback": (_extra("request/header", {"reason": "fallback", "header": {"config": {"provider": "p", "model": "m"}}}), False),
    "bad-header-without-model": (_extra("request/header", {"header": {"config": {"provider": "p"}}}), False),
    "bad-header-adapter-defaults": (_extra("request/header", {"header": {"config": {"provider": "p", "model": "m"}, "adapterDefaults": {"maxTokens": True}}}), False),
    "ok-request-header": (_extra("request/header", {"header": {"config": {"provider": "p", "model": "m", "maxTokens": 9}, "adapterDefaults": {"maxTokens": True}}}), False),
    "ok-user-replaces-tool-result": (_replace("user/message", user_message("s"), TR, TR), MODEL),
    "ok-tool-rewrite-of-same-batch-result": (_tool_rewrite_in_batch(), False),
    "bad-data-missing": ([{"type": "todo/write", "seq": N, "time": 1}], False),
    "ok-data-null": (_extra("todo/write", None), False),
}


def session_lib(dsh_runtime: Any) -> Path:
    """DSH 0.1.0-rc.8's own session code, which the cached runtime always holds."""
    lib = Path(dsh_runtime.node_modules) / "@deepseek-ai/dsh-session/lib/index.js"
    assert lib.is_file(), f"{lib} is missing: the cached DSH 0.1.0-rc.8 runtime is incomplete (`./run test` sets it up)"
    return lib


@pytest.fixture(scope="module")
def host_verdicts(node: str, dsh_runtime: Any) -> dict[str, dict[str, dict[str, Any]]]:
    lib = session_lib(dsh_runtime)
    names = list(CASES)
    batch = []
    for name in names:
        plan = CASES[name][0]
        batch.append({"mode": "seed", "seed": BASE + plan})
        batch.append({"mode": "append", "seed": BASE, "plan": plan})
    run = subprocess.run(
        [node, str(SCRIPT), str(lib)],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    results = json.loads(run.stdout)
    return {name: {"seed": results[2 * i], "append": results[2 * i + 1]} for i, name in enumerate(names)}


def _unbalanced_log() -> list[Event]:
    """A surface whose first turn lost its calling assistant to a replacement (orphan result)."""
    return BASE + _replace("user/message", user_message("s"), U, CALL_A)


BALANCE_LOGS: dict[str, list[Event]] = {
    "base": BASE,
    "compacted": BASE + compaction_plan(RC8, N, span(NODES, U, ANS)),
    "open-call": BASE + _one("assistant", lambda e: None, tool_calls=("x", "y")),
    "orphan-result": _unbalanced_log(),
}


@pytest.fixture(scope="module")
def host_balance(node: str, dsh_runtime: Any) -> dict[str, dict[str, Any]]:
    lib = session_lib(dsh_runtime)
    batch = [{"mode": "balance", "seed": events} for events in BALANCE_LOGS.values()]
    run = subprocess.run(
        [node, str(SCRIPT), str(lib)], input=json.dumps(batch), capture_output=True, text=True, timeout=120, check=True
    )
    return dict(zip(BALANCE_LOGS, json.loads(run.stdout)))


@pytest.mark.parametrize("name", list(BALANCE_LOGS))
def test_tool_pairing_balance_matches_host(name: str, host_balance: dict[str, Any]) -> None:
    host = host_balance[name]
    log = SessionLog(RC8, BALANCE_LOGS[name])
    if "error" in host:
        with pytest.raises(SurfaceError, match="no matching tool-call"):
            log.balanced_before(log.nodes[0])
        return
    assert log.nodes == host["nodes"]
    assert [[log.balanced_before(s), log.balanced_after(s)] for s in log.nodes] == host["cuts"]


def _verdict(fn: Callable[[], Any]) -> tuple[bool, str]:
    try:
        fn()
    except SurfaceError as error:
        return False, str(error)
    return True, ""


def test_base_log_is_valid_for_the_model() -> None:
    assert BASE_LOG.reload_problems == [] and BASE[-1]["type"] == "session/end-seed"


@pytest.mark.parametrize("name", list(CASES))
def test_seed_verdict_matches_host(name: str, host_verdicts: dict[str, Any]) -> None:
    plan, _ = CASES[name]
    host = host_verdicts[name]["seed"]
    log_events = BASE + plan

    def mirror() -> None:
        log = SessionLog(RC8, log_events)
        if log.reload_problems:
            raise SurfaceError("reload", "; ".join(log.reload_problems))

    ours, why = _verdict(mirror)
    assert ours == host["ok"], f"mirror: ours={ours} ({why}) host={host}"
    if "ignorable" in plan[0]:
        return  # a stored log may carry the marker; a plan never can (check_plan refuses it)
    ours, why = _verdict(lambda: SessionLog(RC8).check_plan(log_events))
    if CASES[name][1] == MODEL:
        assert not ours and host["ok"] and "[rule: model-" in why, f"model-strict case: ours={ours} ({why}) host={host}"
    else:
        assert ours == host["ok"], f"check_plan: ours={ours} ({why}) host={host}"


@pytest.mark.parametrize("name", list(CASES))
def test_append_verdict_matches_host(name: str, host_verdicts: dict[str, Any]) -> None:
    plan, strict = CASES[name]
    host = host_verdicts[name]["append"]
    assert "setupError" not in host, host
    # mirror what the host committed; the event it refused must be refused by us too
    mirror = SessionLog(RC8, BASE)
    problems: list[str] = []
    for event in host["committed"]:
        problems += mirror.append(event)
    if not host["appendOk"]:
        refused = plan[host["failedAt"]]
        with pytest.raises(SurfaceError):
            mirror.append(refused)
    else:
        assert (problems == []) == host["reloadOk"], f"mirror reload problems {problems} vs host {host}"
    host_ok = host["appendOk"] and host["reloadOk"]
    ours, why = _verdict(lambda: BASE_LOG.check_plan(plan))
    if strict == MODEL:
        assert not ours and host_ok and "[rule: model-" in why, f"model-strict case: ours={ours} ({why}) host={host}"
    elif strict:
        assert not ours and host_ok, f"strict case: ours={ours} ({why}) host={host}"
    else:
        assert ours == host_ok, f"check_plan: ours={ours} ({why}) host={host}"
    assert name.startswith("ok-") == host_ok, f"case label disagrees with the host: {host}"
