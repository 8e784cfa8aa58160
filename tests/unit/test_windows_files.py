"""Sidecar and patch-file writes under Windows' file-sharing rules (issue 19).

Windows refuses to rename over, or delete, a file another process holds open without
FILE_SHARE_DELETE (a scanner or indexer reading a file just written, an editor). The refusal
is simulated by an injected rename/unlink that raises what Windows raises, on the real files.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from turn_memory.files import RETRY_DELAYS_S, FileOps
from turn_memory.install.installer import write_text
from turn_memory.turns.results import ResultStore

RECORD = {"version": 1, "session": "s-1", "turn": 3, "nodes": [{"text": "张伟的计划 ✓"}]}


def sharing_violation(path: Path) -> PermissionError:
    # what os.replace/os.unlink raise on Windows (ERROR_SHARING_VIOLATION)
    return PermissionError(13, "The process cannot access the file because it is being used by another process",
                           str(path))


class Held:
    """The file `name`, held open by another process for the first `refusals` attempts to
    replace or delete it, or for good (None)."""

    def __init__(self, name: str, refusals: int | None) -> None:
        self.name = name
        self.refusals = refusals
        self.attempts = 0
        self.slept: list[float] = []

    def _maybe_refuse(self, path: Path) -> None:
        if path.name != self.name:
            return
        self.attempts += 1
        if self.refusals is None or self.attempts <= self.refusals:
            raise sharing_violation(path)

    def ops(self, platform: str = "win32") -> FileOps:
        def replace(src: Path, dst: Path) -> None:
            self._maybe_refuse(dst)
            os.replace(src, dst)

        def unlink(path: Path) -> None:
            self._maybe_refuse(path)
            os.unlink(path)

        return FileOps(platform=platform, sleep=self.slept.append, replace_fn=replace, unlink_fn=unlink)


def test_a_sidecar_lands_once_the_other_process_lets_go_of_the_file(tmp_path):
    held = Held("3.json", refusals=2)
    store = ResultStore(tmp_path / "home", held.ops())
    assert store.save("s-1", 3, RECORD) is True
    assert store.load("s-1", 3) == RECORD
    assert held.slept == [0.01, 0.02]
    assert os.listdir(store.path("s-1", 3).parent) == ["3.json"]  # no temporary file left


def test_a_sidecar_held_for_good_is_not_kept_and_the_earlier_record_stays_whole(tmp_path, caplog):
    home = tmp_path / "home"
    ResultStore(home).save("s-1", 3, {**RECORD, "nodes": []})
    held = Held("3.json", refusals=None)
    with caplog.at_level(logging.WARNING, logger="turn_memory.turns"):
        assert ResultStore(home, held.ops()).save("s-1", 3, RECORD) is False
    assert held.slept == list(RETRY_DELAYS_S) and sum(held.slept) < 0.5
    assert ResultStore(home).load("s-1", 3) == {**RECORD, "nodes": []}
    assert os.listdir(home / "turn-memory" / "results" / "s-1") == ["3.json"]
    [line] = caplog.messages
    assert line.startswith("session s-1 turn 3: could not keep the finished compression in ")
    assert line.endswith("; a restart before it lands redoes the turn")


def test_a_landed_turns_sidecar_is_deleted_once_the_reader_lets_go(tmp_path):
    home = tmp_path / "home"
    ResultStore(home).save("s-1", 3, RECORD)
    held = Held("3.json", refusals=3)
    ResultStore(home, held.ops()).delete("s-1", 3)
    assert held.slept == [0.01, 0.02, 0.05]
    assert not (home / "turn-memory" / "results" / "s-1").exists()


def test_on_posix_a_permission_error_is_a_real_one_and_is_not_retried(tmp_path):
    held = Held("f.json", refusals=1)
    with pytest.raises(PermissionError):
        held.ops("linux").write(tmp_path / "f.json", b"{}")
    assert held.attempts == 1 and held.slept == []
    assert os.listdir(tmp_path) == []


def test_the_patch_file_is_written_through_a_held_file_with_its_crlf_and_bom(tmp_path):
    patch = tmp_path / "cordis.patch.yml"
    patch.write_bytes(b"\xef\xbb\xbf# mine\r\n[]\r\n")
    held = Held("cordis.patch.yml", refusals=4)
    write_text(patch, "\ufeff# mine\r\n- id: x\r\n", held.ops())
    assert patch.read_bytes() == b"\xef\xbb\xbf# mine\r\n- id: x\r\n"
    assert held.slept == [0.01, 0.02, 0.05, 0.1]
    assert os.listdir(tmp_path) == ["cordis.patch.yml"]
