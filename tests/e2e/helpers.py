"""Reading what a real DSH run left behind: its log on disk and its model requests."""

from __future__ import annotations

import re

from typing import Any

from turn_memory.devtools.dsh_home import DshHome
from turn_memory.host.surface import SessionLog

CHECKPOINT_MARK = "[turn-memory checkpoint]"
#: engine override for the foundation tests: no per-turn compression workers, and `/compact`
#: through one summary request on DSH's llm service (no session workers)
NO_TURNS = {"turns": {"enabled": False}, "compaction": {"method": "summary", "auto": False}}


def reload(home: DshHome, events: list[dict[str, Any]]) -> SessionLog:
    """Fold the on-disk log through the surface model with the host's reload checks."""
    log = SessionLog(home.dialect)
    for event in events:
        problems = log.append(event)
        assert not problems, f"seq {event['seq']} would not reload: {problems}"
    return log


def transactions(home: DshHome, events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Compaction brackets: compaction/start … compaction/end, grouped by compactionId."""
    out: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if event["type"].startswith("compaction/"):
            out.setdefault(event["data"]["compactionId"], []).append(event)
        elif event["type"] == "user/message" and home.dialect.is_checkpoint_source(event["data"].get("source")):
            out.setdefault(event["data"]["source"]["compactionId"], []).append(event)
    return list(out.values())


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def turn_tasks(n: int) -> list[str]:
    return [f"Step {i + 1}: " + "please inspect the parser module and report what you find. " * 6 for i in range(n)]


def engine_connected(engine_log) -> dict[str, Any]:
    """A driver task: wait until the engine (run with `engine.logFile` = engine_log) has
    answered the shim's handshake. A booting engine holds no step, so a test whose point
    needs the engine at a given step waits for it explicitly."""
    return {"waitFile": str(engine_log), "contains": "shim connected", "timeoutMs": 30000}


#: host warnings about this machine, not about any session: 0.2.1's subprocess runner on a
#: box without a user-systemd scope
ENVIRONMENT_LOGGERS = {"local-subprocess-runtime"}


def host_problems(run: Any) -> list[dict[str, Any]]:
    """Warnings and errors DSH's plugins logged during a run (session store, token meter,
    turn-memory …), leaving out the machine's own."""
    return [r for r in run.logs() if r.get("name") not in ENVIRONMENT_LOGGERS]


#: how every compression worker's task opens (prompts/turn-compression.md, session-compaction.md)
WORKER_TASK = "You are now the memory editor"
#: a request is a compression worker's when it offers one of these editor tools
WORKER_EDITORS = {"replace_turn_nodes", "replace_session_memory"}


def worker_task_problems(requests: list[Any]) -> list[str]:
    """Every compression worker's provider-side request must end with its task: no
    user text between the task and the worker's first reply, so no runtime context after it.
    Only in-history system updates may follow it there (0.2.1's Messages wire puts a fork's
    persona and tool changes right after the user turn); after the worker's own replies come
    its tool results and whatever the host says about its calls."""
    problems = []
    for request in requests:
        if not WORKER_EDITORS & set(request.tool_names):
            continue
        messages = request.messages
        at = max((i for i, m in enumerate(messages) if m.get("role") == "user" and text_of(m).startswith(WORKER_TASK)),
                 default=None)
        if at is None:
            problems.append(f"request {request.index}: no task")
            continue
        for message in messages[at + 1:]:
            if message.get("role") == "assistant":
                break
            if message.get("role") == "user":
                problems.append(f"request {request.index}: {text_of(message)[:100]!r} follows the task")
    return problems


#: a turn worker's catalog line: id, role, state (`fixed`: an assistant node the host keeps as it is), preview
_CATALOG_LINE = re.compile(r"^- ((?:t\d+\.)?[nr]\d+) · (user|assistant|tool) · [^·]+ · (\w+) · capacity \d+(?: · (.*))?$",
                           re.M)


def turn_rewrite(catalog: str, turn: int, label: str = "") -> list[dict[str, Any]]:
    """The replace calls that compress one turn's catalog lines as its host's workers may:
    where the assistant nodes are fixed (0.2's default, `turns.assistantNodes`) the opening user
    nodes become `COMPRESSED-USER{label} of turn N.` and each unchanged tool result not already
    as short `RN{label}`, in place; else the whole turn folds into that user
    node and `COMPRESSED-ASSISTANT{label} of turn N.`."""
    nodes = _CATALOG_LINE.findall(catalog)
    if not nodes:
        return []
    user = {"role": "user", "content": f"COMPRESSED-USER{label} of turn {turn}."}
    assistant = {"role": "assistant", "content": f"COMPRESSED-ASSISTANT{label} of turn {turn}."}
    if not any(state == "fixed" for _, _, state, _ in nodes):
        # a later part of a split turn (`turns.maxParts`) opens with an assistant node: no user node in it
        outputs = [user, assistant] if nodes[0][1] == "user" else [assistant]
        return [{"name": "replace_turn_nodes", "arguments": {"from": nodes[0][0], "to": nodes[-1][0],
                                                             "nodes": outputs}}]
    head = next((i for i, (_, role, _, _) in enumerate(nodes) if role != "user"), len(nodes))
    result = f"R{turn}{label}"  # short: a rewrite never grows a turn, and tool results here are small

    def short(preview: str, than: str) -> bool:
        """A node the rewrite would not shorten (a refused finish: rewrites never grow a turn)."""
        return not preview.endswith("…") and len(preview) <= len(than)

    keep_head = head == 1 and short(nodes[0][3], str(user["content"]))
    calls = [{"name": "replace_turn_nodes", "arguments": {"from": nodes[0][0], "to": nodes[head - 1][0],
                                                          "nodes": [user]}}] if head and not keep_head else []
    return calls + [{"name": "replace_turn_nodes", "arguments": {"from": node_id, "to": node_id, "nodes": [
        {"role": "tool", "content": result}]}}
        for node_id, role, state, preview in nodes[head:] if role == "tool" and state == "unchanged"
        and not short(preview, result)]
