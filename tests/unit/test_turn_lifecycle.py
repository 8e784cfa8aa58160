"""Issue 27: a turn's phases and the only moves between them (turns/lifecycle.py), and the job
reading its state off the phase."""

from __future__ import annotations

import itertools

import pytest

from turn_memory.turns.lifecycle import TRANSITIONS, IllegalTransition, Lifecycle, Phase, Transition, durable_phase


def _reach(phase: Phase) -> Lifecycle:
    """A lifecycle brought to `phase` by allowed moves (the shortest path from ARRIVED)."""
    paths = {Phase.ARRIVED: [Phase.ARRIVED]}
    frontier = [Phase.ARRIVED]
    while frontier:
        here = frontier.pop(0)
        for there in sorted(TRANSITIONS[here], key=lambda p: p.value):
            if there not in paths:
                paths[there] = [*paths[here], there]
                frontier.append(there)
    lifecycle = Lifecycle()
    for step in paths[phase][1:]:
        lifecycle.move(step, f"to {step.value}")
    return lifecycle


def test_every_phase_is_reachable_from_arrived_and_every_table_row_names_a_phase():
    assert set(TRANSITIONS) == set(Phase)
    for phase in Phase:
        assert _reach(phase).phase is phase


@pytest.mark.parametrize(("before", "after"), [(b, a) for b in Phase for a in sorted(TRANSITIONS[b], key=str)],
                         ids=lambda p: p.value)
def test_every_allowed_move_is_taken_with_its_reason(before, after):
    lifecycle = _reach(before)
    done = len(lifecycle.history)
    step = lifecycle.move(after, "because")
    assert step == Transition(before, after, "because")
    assert lifecycle.phase is after and lifecycle.reason == "because" and len(lifecycle.history) == done + 1


@pytest.mark.parametrize(("before", "after"),
                         [(b, a) for b, a in itertools.product(Phase, Phase) if a not in TRANSITIONS[b]],
                         ids=lambda p: p.value)
def test_every_other_move_is_refused_and_changes_nothing(before, after):
    lifecycle = _reach(before)
    history = list(lifecycle.history)
    with pytest.raises(IllegalTransition, match=f"^{before.value} -> {after.value} \\(why\\)$"):
        lifecycle.move(after, "why")
    assert lifecycle.phase is before and lifecycle.history == history


def test_the_terminal_phases_are_the_ones_a_turn_ends_in():
    assert {p for p in Phase if p.terminal} == {Phase.LANDED, Phase.REFUSED, Phase.NO_OP, Phase.FOLDED, Phase.STOPPED}
    assert {p for p in Phase if p.settled} == {Phase.READY} | {p for p in Phase if p.terminal}
    assert {p for p in Phase if p.held} == {Phase.HELD}
    assert {p for p in Phase if not p.decided} == {Phase.ARRIVED, Phase.PENDING}


def test_reached_remembers_a_ready_rewrite_after_it_landed_or_folded():
    lifecycle = _reach(Phase.READY)
    lifecycle.move(Phase.FOLDED, "into the checkpoint at seq 40")
    assert lifecycle.reached(Phase.READY) and lifecycle.reached(Phase.FOLDED)
    assert not _reach(Phase.STOPPED).reached(Phase.READY)


@pytest.mark.parametrize(("complete", "kinds", "phase"), [
    (False, ["pending"], None),  # the turn is open
    (True, [], None),  # untouched: no marker of ours
    (True, ["pending"], Phase.PENDING),
    (True, ["pending", "compression"], Phase.LANDED),
    (True, ["no-op"], Phase.NO_OP),
    (True, ["compression", "pending"], Phase.LANDED),  # a pending copy after the landing changes nothing
])
def test_what_the_log_alone_says_uses_the_same_phases(complete, kinds, phase):
    assert durable_phase(complete, kinds) is phase

