"""The fault points (turn_memory/faults.py): inert unless named, one-shot across engine processes."""

from __future__ import annotations

import pytest

from turn_memory import faults

ALL = [faults.CORRUPT_TURN_PLAN, faults.REFUSE_TURN_LANDING, faults.KILL_BEFORE_APPLY, faults.HANG_PRESTEP,
       faults.CORRUPT_REPLY]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(faults, "_fired", set())


def test_every_fault_point_is_covered_here():
    declared = {value for name, value in vars(faults).items() if name.isupper() and isinstance(value, str)}
    assert declared == set(ALL) == {"corrupt-turn-plan", "refuse-turn-landing", "kill-before-apply", "hang-prestep",
                                    "corrupt-reply"}


def test_no_fault_is_active_or_fires_unless_named(monkeypatch):
    monkeypatch.delenv("TURN_MEMORY_FAULTS", raising=False)
    assert not any(faults.active(f) or faults.fire(f) for f in ALL)
    monkeypatch.setenv("TURN_MEMORY_FAULTS", "kill-before-apply")
    assert [f for f in ALL if faults.active(f)] == [faults.KILL_BEFORE_APPLY]
    monkeypatch.setenv("TURN_MEMORY_FAULTS", "refuse-turn-landing,corrupt-turn-plan")
    assert [f for f in ALL if faults.active(f)] == [faults.CORRUPT_TURN_PLAN, faults.REFUSE_TURN_LANDING]


def test_a_one_shot_fault_fires_once_per_process_and_once_across_processes_with_a_spent_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TURN_MEMORY_FAULTS", "hang-prestep,corrupt-reply")
    assert faults.fire(faults.HANG_PRESTEP) and not faults.fire(faults.HANG_PRESTEP)
    monkeypatch.setenv("TURN_MEMORY_FAULTS_SPENT", str(tmp_path / "spent"))
    assert faults.fire(faults.CORRUPT_REPLY)
    monkeypatch.setattr(faults, "_fired", set())  # the next engine process
    assert not faults.fire(faults.CORRUPT_REPLY)
    assert (tmp_path / "spent" / "corrupt-reply").exists()
