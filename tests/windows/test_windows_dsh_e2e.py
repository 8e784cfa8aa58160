"""The official Windows DSH 0.2.1-rc.2 exe, end to end, under Wine 10 (issue 31): opt-in,
`./run test --windows`.

turn-memory is installed the way a Windows user installs it (`turn-memory install --dsh
<dsh>`: the shim packed, `dsh plugin add` run by the Windows DSH with a Windows pnpm 11, the
profile's patch file written, DSH's own composition verified), into the bundle layout (`tm`)
and into Desktop's preset layout (`web`). Sessions run in the real exe against a scripted model
on 127.0.0.1; the shim inside it (the win32-x64 `zeromq` addon) reaches the engine over tcp.

What differs from a Windows machine, and why: the engine is Linux's (`turn-memory serve` from
this checkout) — Wine's Node cannot start a Linux program, so the installed `engine.command`
is `[node.exe, engine-relay.mjs]`, which asks `engine_launcher.py` to start it; DSH's home is
on drive Z: and its working directory on C: (`C:\\tmp\\…`); the shell tool is a stub
(no PowerShell), so the scripted turns use `read`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import reload, text_of, transactions, turn_rewrite
from turn_memory.devtools.dsh_home import DshHome
from turn_memory.devtools.fake_model import FakeModel, FakeRequest
from turn_memory.devtools.windows_dsh import WindowsDsh
from turn_memory.devtools.wine import windows_path
from turn_memory.host.markers import marker_of
from turn_memory.host.surface import SessionLog
from turn_memory.install.patchyaml import load
from turn_memory.turns.recovery import turn_nodes

WORKER_TOOLS = {"list_turn_nodes", "read_turn_nodes", "replace_turn_nodes", "finish_turn_compression"}
TURN = re.compile(r"memory editor for turn (\d+)")
SUMMARY_PROMPT = "Stop the conversation here."  # prompts/compact-summary.md opens so
TASK_1 = "Please fix the parser: empty input crashes it. " * 4
TURN_1 = [{"text": "Reading the notes.", "tool_calls": [{"name": "read", "arguments": {"file_path": "notes.txt"}}]},
          "Turn one done: parse() now returns [] on empty input. FIRST-DONE"]
TASK_2 = "Second task: add a regression test."
TASK_3 = "Third task, after reopening: anything left?"
#: the profile files install edits and uninstall restores
PROFILE_FILES = ("package.json", "cordis.yml", "cordis.patch.yml", "pnpm-workspace.yaml")


def worker(request: FakeRequest) -> dict[str, Any] | None:
    """The scripted turn worker: compresses the turn its task names (helpers.turn_rewrite: in
    place where the host keeps assistant nodes, else folded) and finishes, in one reply."""
    if "replace_turn_nodes" not in request.tool_names:
        return None
    prompt = next(text_of(m) for m in reversed(request.messages) if m["role"] == "user" and TURN.search(text_of(m)))
    calls = turn_rewrite(prompt, int(TURN.search(prompt).group(1)))  # type: ignore[union-attr]
    return {"tool_calls": [*calls, {"name": "finish_turn_compression", "arguments": {}}]}


def agent_requests(fake: FakeModel) -> list[FakeRequest]:
    return [r for r in fake.requests if r.kind == "turn" and not WORKER_TOOLS & set(r.tool_names)]


def first_request_with(fake: FakeModel, text: str) -> list[tuple[str, str]]:
    # the first request of the turn: on Windows a skill catalog follows the user's message
    request = next(r for r in agent_requests(fake) if text in r.all_text())
    return [(m["role"], text_of(m)) for m in request.messages if m["role"] != "system"]


def profile_files(home: DshHome) -> dict[str, bytes]:
    return {name: (home.profile_dir / name).read_bytes() for name in PROFILE_FILES
            if (home.profile_dir / name).exists()}


def windows_home(root: Path, windows_dsh: WindowsDsh, launcher: Any, fake: FakeModel, profile: str = "tm") -> DshHome:
    return DshHome(root, windows_dsh.runtime(), fake.base_url, profile=profile,
                   extra_env={"TM_RELAY_PORT": str(launcher.server_address[1])})


def install(home: DshHome, windows_dsh: WindowsDsh, *extra: str) -> subprocess.CompletedProcess[str]:
    """`turn-memory install` as a user runs it, with the relay as the engine command (the one
    thing a Windows machine would not need: see the module doc)."""
    command = [windows_path(windows_dsh.node.node), windows_path(windows_dsh.relay)]
    return home.install_turn_memory("--config-json", json.dumps({"engine": {"command": command}}), *extra,
                                    check=False)


def on_drive_c(windows_dsh: WindowsDsh, name: str) -> Path:
    """A fresh folder for a DSH home on the prefix's drive C: (the exe loads its bundled native
    modules only with its workspace there; a folder mounted on C: is not enough)."""
    folder = windows_dsh.wine.drive_c / "turn-memory-tests" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def assert_restored(after: dict[str, bytes], before: dict[str, bytes]) -> None:
    """uninstall gives back the profile's DSH files byte for byte; pnpm's own files keep what
    pnpm leaves (`pnpm remove` drops an empty `dependencies`; the zeromq build rule stays, as
    on Linux: found here, left as it is, see the report of issue 31)."""
    assert {k: after[k] for k in ("cordis.yml", "cordis.patch.yml")} == {
        k: before[k] for k in ("cordis.yml", "cordis.patch.yml")}
    assert json.loads(after["package.json"]) == {k: v for k, v in json.loads(before["package.json"]).items()
                                                 if v != {}}
    import yaml

    assert yaml.safe_load(after["pnpm-workspace.yaml"]) == {**yaml.safe_load(before["pnpm-workspace.yaml"]),
                                                            "allowBuilds": {"zeromq": False}}


def assert_doctor_lines(out: str, home: DshHome, profile: str) -> None:
    """doctor's lines about this Windows DSH and profile, and its verdict: installed and live,
    with three warnings, each about what a doctor on Linux cannot check or was not configured
    (a Windows machine's doctor checks the first two itself)."""
    lines = [line.strip() for line in out.splitlines()]
    assert (f"WARN  node: not checked: {home.runtime.dsh} is a Windows DSH; it and the pnpm its `dsh plugin add` runs "
            "use the Windows side's Node and PATH, not this linux machine's node (run turn-memory doctor on that "
            "Windows machine)" in lines), out
    assert (f"OK    dsh: dsh 0.2.1-rc.2 at {home.runtime.dsh} (found via --dsh); v02 dialect (tested end to end)"
            in lines), out
    assert any(line.startswith(f"OK    profile {profile}: live engine: dsh-turn-memory is the live compaction engine")
               for line in lines), out
    assert any(line.startswith(f"WARN  profile {profile}: engine command: ") and line.endswith(
        ": a Windows path, which DSH starts on Windows; this doctor runs on linux and cannot check it (run "
        "turn-memory doctor on that Windows machine)") for line in lines), out
    assert any(line.startswith(f"WARN  profile {profile}: engine log: no engine.logFile configured")
               for line in lines), out
    assert not [line for line in lines if line.startswith("FAIL")], out
    assert lines[-1] == "verdict: turn-memory is installed and live (3 warning(s))", out


def installed_home(windows_dsh: WindowsDsh, launcher: Any, fake: FakeModel,
                   name: str) -> tuple[DshHome, dict[str, bytes], str]:
    """A fresh `tm` home on drive C: with turn-memory installed into it (pnpm runs): the home,
    its profile files before the install, install's output."""
    home = windows_home(on_drive_c(windows_dsh, name) / "home", windows_dsh, launcher, fake).create()
    (home.workspace / "notes.txt").write_text("parser notes: empty input -> []\n", encoding="utf-8")
    before = profile_files(home)
    done = install(home, windows_dsh, "--set", "turns.minTurnTokens=0", "--set", "turns.batchTurns=1")
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    return home, before, done.stdout


@pytest.fixture(scope="module")
def template(windows_dsh, launcher) -> tuple[Path, dict[str, bytes], str]:
    """One `tm` home with turn-memory installed (pnpm runs once); tests that only run sessions
    copy it (`copy_home`)."""
    with FakeModel() as fake:
        home, before, out = installed_home(windows_dsh, launcher, fake, "template")
    return home.root, before, out


@pytest.fixture
def fake():
    with FakeModel() as model:
        model.responder = worker
        yield model


def copy_home(template, windows_dsh, launcher, fake, tmp_path) -> DshHome:
    """A copy of the template home, for sessions only: pnpm must not run in it. Its
    node_modules/.modules.yaml and links still name the template's virtual store, which pnpm
    refuses (ERR_PNPM_UNEXPECTED_VIRTUAL_STORE: `dsh plugin remove` exits 1), and its
    package.json names the template's tarball."""
    root = on_drive_c(windows_dsh, tmp_path.name) / "home"
    shutil.copytree(template[0], root, symlinks=True)
    return windows_home(root, windows_dsh, launcher, fake)


def test_install_into_the_bundle_profile_verifies_on_the_windows_dsh(template):
    _, _, out = template
    assert "verdict: installed -- dsh-turn-memory is the only live compaction engine of profile 'tm'" in out, out


def test_a_session_lands_in_place_compacts_resumes_then_doctor_and_uninstall(windows_dsh, launcher, fake, tmp_path):
    # its own install, not a copy of the template's: uninstall runs pnpm here (see copy_home)
    home, before, _ = installed_home(windows_dsh, launcher, fake, tmp_path.name)
    engine_log = tmp_path / "engine.log"
    fake.push("turn", *TURN_1, "Turn two done. SECOND-DONE", "Turn three done. THIRD-DONE")
    fake.add_rule({"kind": "*", "messages_contain": SUMMARY_PROMPT}, reply="SUMMARY-CHECKPOINT: parser fixed; test added.")
    overrides = {"turns": {"landingBarrier": True}, "engine": {"logFile": str(engine_log)},
                 "compaction": {"method": "summary", "retainTurns": 0}}
    # /compact right as turn 2 ends: its worker may or may not have started (waited for, or folded raw)
    run = home.run([TASK_1, TASK_2, "/compact"], timeout=300, engine_overrides=overrides)
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed", "completed"]
    (compact,) = run.commands()
    assert compact["result"]["kind"] == "success" and compact["result"]["text"].startswith("Compacted "), compact

    # turn 2's first request carries turn 1 rewritten in place: the user nodes compressed, the
    # assistant nodes verbatim, the tool result shortened and still answering its call
    convo = first_request_with(fake, TASK_2)
    assert convo[0] == ("user", "COMPRESSED-USER of turn 1.")
    assert convo[1] == ("assistant", "Reading the notes.") and convo[2] == ("tool", "R1")
    assert convo[3] == ("assistant", "Turn one done: parse() now returns [] on empty input. FIRST-DONE")
    assert TASK_1 not in "".join(text for _, text in convo)

    _, events = home.session_log(run.session_id)
    assert [m for e in events if (m := marker_of(e)) and m[0] == "compression"][:1] == [("compression", 1)]
    (tx,) = transactions(home, events)
    assert [e["type"] for e in tx] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    assert "SUMMARY-CHECKPOINT: parser fixed; test added." in text_of(tx[2]["data"])
    reload(home, events)
    log = engine_log.read_text(encoding="utf-8")
    assert "shim connected: DSH 0.2.1-rc.2 (v02 dialect)" in log, log[-3000:]

    # a second Windows DSH process reloads the session and continues it from the checkpoint
    again = home.run([TASK_3], resume=run.session_id, timeout=300, engine_overrides=overrides)
    assert again.returncode == 0, (again.records, again.stderr[-3000:])
    assert [t["reason"]["kind"] for t in again.tasks()] == ["completed"]
    convo = first_request_with(fake, TASK_3)
    assert any("SUMMARY-CHECKPOINT: parser fixed; test added." in text for _, text in convo), convo
    assert not any("Reading the notes." in text for _, text in convo)
    _, events = home.session_log(run.session_id)
    reload(home, events)

    # doctor against that profile, then uninstall leaves the profile as it was
    doctor = subprocess.run([sys.executable, "-m", "turn_memory", "doctor", "--dsh-home", str(home.root),
                             "--dsh", str(home.runtime.dsh), "--profile", "tm"], cwd=home.workspace,
                            env=home.env(), capture_output=True, text=True, timeout=300)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert_doctor_lines(doctor.stdout, home, "tm")
    assert "OK    bridge round trip: engine 0.1.0 started in" in doctor.stdout, doctor.stdout
    gone = subprocess.run([sys.executable, "-m", "turn_memory", "uninstall", "--dsh-home", str(home.root),
                           "--dsh", str(home.runtime.dsh), "--profile", "tm"], cwd=home.workspace,
                          env=home.env(), capture_output=True, text=True, timeout=300)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert_restored(profile_files(home), before)
    assert not (home.profile_dir / "node_modules" / "dsh-turn-memory").exists()
    assert not (home.root / "turn-memory").exists()


def test_a_turn_rewritten_whole_lands_in_its_flattened_form(template, windows_dsh, launcher, fake, tmp_path):
    """`turns.assistantNodes: rewrite`: the worker folds the whole turn; it lands where the
    next turn opens, as the turn's user + assistant pair."""
    home = copy_home(template, windows_dsh, launcher, fake, tmp_path)
    fake.push("turn", *TURN_1, "Turn two done. SECOND-DONE")
    run = home.run([TASK_1, TASK_2], timeout=300,
                   engine_overrides={"turns": {"landingBarrier": True, "assistantNodes": "rewrite"}})
    assert run.returncode == 0, (run.records, run.stderr[-3000:])
    assert [t["reason"]["kind"] for t in run.tasks()] == ["completed", "completed"]
    convo = first_request_with(fake, TASK_2)
    assert convo[:2] == [("user", "COMPRESSED-USER of turn 1."), ("assistant", "COMPRESSED-ASSISTANT of turn 1.")]
    _, events = home.session_log(run.session_id)
    assert [m for e in events if (m := marker_of(e)) and m[0] == "compression"] == [("compression", 1)]
    log = SessionLog(home.dialect, events)
    assert [log.message_of(s)["role"] for s in turn_nodes(log, 1)] == ["user", "assistant"]
    reload(home, events)


def test_desktop_preset_layout_install_doctor_uninstall(windows_dsh, launcher, fake, tmp_path):
    """Desktop's `web` profile: every agent preset's compaction group gets turn-memory as its
    one live engine (DSH's own composition says so), doctor agrees, uninstall restores it."""
    home = windows_home(on_drive_c(windows_dsh, tmp_path.name) / "home", windows_dsh, launcher, fake,
                        profile="web").create()
    before = profile_files(home)
    done = install(home, windows_dsh)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "preset-standard: exactly one live compaction engine, ours" in done.stdout, done.stdout
    tree = load(home.dsh("--profile", "web", "--dump-config").stdout)
    for preset in ("preset-standard", "preset-ptc", "preset-minimal", "preset-cordis"):
        row = next(r for r in tree if isinstance(r, dict) and r.get("id") == preset)
        group = next(r for r in row["config"]["plugins"] if isinstance(r, dict) and r.get("id") == "compaction")
        live = [r["id"] for r in group["config"] if isinstance(r, dict) and not r.get("disabled")]
        assert "turn-memory" in live and "compaction-basic" not in live, (preset, live)
    doctor = subprocess.run([sys.executable, "-m", "turn_memory", "doctor", "--dsh-home", str(home.root),
                             "--dsh", str(home.runtime.dsh), "--profile", "web", "--no-bridge"], cwd=home.workspace,
                            env=home.env(), capture_output=True, text=True, timeout=300)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert_doctor_lines(doctor.stdout, home, "web")
    gone = subprocess.run([sys.executable, "-m", "turn_memory", "uninstall", "--dsh-home", str(home.root),
                           "--dsh", str(home.runtime.dsh), "--profile", "web"], cwd=home.workspace,
                          env=home.env(), capture_output=True, text=True, timeout=300)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert_restored(profile_files(home), before)
