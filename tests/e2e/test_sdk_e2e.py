"""The official Python SDK (deepseek-harness-sdk 0.2.1rc2) as a real client: a user who drives
DSH from Python installs turn-memory into the `sdk` profile once, and their SDK sessions are
compressed — in the process that ran them and after `resume_session` in a new runtime."""

from __future__ import annotations

import pytest

from helpers import reload, text_of
from test_turn_compression_e2e import AGENT_TURN_1, FINISH, IN_PLACE, IS_WORKER, TASK_1, worker_requests
from turn_memory.devtools.dsh_home import DshHome
from turn_memory.host.markers import marker_of

pytestmark = pytest.mark.e2e


@pytest.fixture
def sdk_home(host_runtime, fake, tmp_path) -> DshHome:
    if host_runtime.python is None:
        pytest.skip(f"not applicable on DSH {host_runtime.version} ({host_runtime.host}): the official Python SDK "
                    "drives the 0.2 runtime only")
    home = DshHome(tmp_path / "home", host_runtime, fake.base_url, profile="sdk").create()
    home.install_turn_memory("--set", "turns.minTurnTokens=0")  # the scripted turns are tiny
    return home


def test_sdk_sessions_are_compressed_and_resume(sdk_home, fake):
    fake.push("turn", *AGENT_TURN_1, "Turn two done. SECOND-DONE", "Turn three after resuming. THIRD-DONE")
    fake.add_rule(IS_WORKER, replies=[IN_PLACE, FINISH])
    fake.add_rule(IS_WORKER, reply=FINISH, times="always")  # turn 2's workers keep it as it is
    # the script does other work after its turns and before its first one (as scripts do): DSH
    # closing the runtime drains its subagents, which aborts a worker still running (it is retried
    # at the next start), and a turn that starts before the new runtime's engine is up runs
    # without it (fail open), so neither can show that the compression survives the restart
    out = sdk_home.run_sdk([{"tasks": [TASK_1, "Second task: add a regression test."], "linger_s": 5},
                            {"resume": True, "before_s": 3, "tasks": ["Third task, in a new SDK runtime."]}])
    first, second = out["runs"]
    assert first["session"] == second["session"]
    assert [t["finish"] for t in first["turns"] + second["turns"]] == ["completed"] * 3, out
    assert "THIRD-DONE" in second["turns"][0]["text"]

    assert worker_requests(fake), "no compression worker ever reached the model"
    _, events = sdk_home.session_log(first["session"])
    assert [e["seq"] for e in events if marker_of(e) == ("compression", 1)], "turn 1 never landed"
    reload(sdk_home, events)
    # the resumed runtime's request carries turn 1 compressed, not raw
    resumed = next(r for r in fake.requests if r.kind == "turn" and "Third task" in r.last_user_text)
    convo = "\n".join(text_of(m) for m in resumed.messages)
    assert "COMPRESSED-USER" in convo and TASK_1.strip() not in convo
