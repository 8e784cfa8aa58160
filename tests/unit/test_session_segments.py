"""split_segments: the selected span cut into segments of whole units within a token budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from session_builders import work_session
from turn_memory.compaction.segments import split_segments
from turn_memory.compaction.policy import surface_prices
from turn_memory.host.dialects import RC8
from turn_memory.host.surface import SessionLog
from turn_memory.host.turn_index import node_origins
from turn_memory.host.units import Unit, surface_units


def layout(sizes: list[tuple[str, list[int]]]) -> tuple[list[int], list[Unit], dict[int, int]]:
    """Units from (kind, per-node tokens); seqs 100, 101, …; turn numbers 1, 2, … in order."""
    nodes: list[int] = []
    units: list[Unit] = []
    tokens: dict[int, int] = {}
    turn = 0
    for kind, prices in sizes:
        first = len(nodes)
        for price in prices:
            seq = 100 + len(nodes)
            nodes.append(seq)
            tokens[seq] = price
        if kind == "turn":
            turn += 1
            key = ("turn", turn)
        else:
            key = (kind, nodes[first])
        units.append(Unit(key, first, len(nodes) - 1))
    return nodes, units, tokens


def test_units_are_packed_in_order_until_the_budget_would_be_exceeded():
    nodes, units, tokens = layout([("turn", [30, 30]), ("turn", [20]), ("turn", [50, 10]), ("turn", [40])])
    segments = split_segments(nodes, units, tokens, budget=100)
    # 60 + 20 = 80 fits, + 60 would not; 60 + 40 = 100 fits exactly
    assert [s.seqs for s in segments] == [(100, 101, 102), (103, 104, 105)]
    assert [s.tokens for s in segments] == [80, 100]
    assert [s.turns for s in segments] == [(1, 2), (3, 4)]
    assert [s.id for s in segments] == ["S1", "S2"] and [s.index for s in segments] == [1, 2]


def test_a_unit_over_budget_is_a_segment_of_its_own_and_never_split():
    nodes, units, tokens = layout([("turn", [10]), ("turn", [400, 300, 200]), ("turn", [10])])
    segments = split_segments(nodes, units, tokens, budget=100)
    assert [s.seqs for s in segments] == [(100,), (101, 102, 103), (104,)]
    assert segments[1].tokens == 900 and segments[1].turns == (2,)


def test_checkpoints_and_loose_nodes_join_segments_without_turn_numbers():
    nodes, units, tokens = layout([("checkpoint", [50]), ("loose", [5]), ("turn", [20])])
    (segment,) = split_segments(nodes, units, tokens, budget=1000)
    assert segment.seqs == (100, 101, 102) and segment.turns == (1,)
    (alone,) = split_segments(*layout([("checkpoint", [50])]), budget=1000)
    assert alone.turns == ()


def test_nodes_without_a_price_count_as_zero_and_nothing_is_dropped():
    nodes, units, _ = layout([("turn", [1, 1]), ("turn", [1])])
    (segment,) = split_segments(nodes, units, {}, budget=100)
    assert segment.seqs == tuple(nodes) and segment.tokens == 0
    assert split_segments([], [], {}, budget=100) == []


def test_a_real_span_segments_on_turn_boundaries():
    b = work_session(RC8, 6, seed=3)
    log = SessionLog(RC8, b.events)
    units = surface_units(log.nodes, node_origins(log.events, RC8))
    prices = surface_prices(log)
    per_turn = sum(prices.values()) // 6
    segments = split_segments(log.nodes, units, prices, budget=int(per_turn * 2.5))
    assert len(segments) >= 3
    for seg in segments:
        # every segment starts with a user request and holds whole turns only
        assert log.message_of(seg.seqs[0])["role"] == "user"
        assert {b.turn_of[s] for s in seg.seqs} == set(seg.turns)
    assert [t for s in segments for t in s.turns] == [1, 2, 3, 4, 5, 6]


unit_kinds = st.sampled_from(["turn", "turn", "turn", "checkpoint", "loose"])
unit_specs = st.lists(st.tuples(unit_kinds, st.lists(st.integers(0, 400), min_size=1, max_size=6)), max_size=25)


@settings(max_examples=300, deadline=None)
@given(unit_specs, st.integers(1, 1500))
def test_segments_cover_every_node_in_order_cutting_only_between_units(specs, budget):
    nodes, units, tokens = layout(specs)
    segments = split_segments(nodes, units, tokens, budget)
    assert [s for seg in segments for s in seg.seqs] == nodes  # coverage, order, no duplicate
    assert [seg.index for seg in segments] == list(range(1, len(segments) + 1))
    unit_starts = {nodes[u.first] for u in units}
    unit_of = {nodes[i]: u for u in units for i in range(u.first, u.last + 1)}
    for k, seg in enumerate(segments):
        assert seg.seqs[0] in unit_starts  # never a cut inside a unit
        assert seg.tokens == sum(tokens[s] for s in seg.seqs)
        seg_units = list(dict.fromkeys(unit_of[s] for s in seg.seqs))
        if len(seg_units) > 1:
            assert seg.tokens <= budget  # only a lone unit may exceed the budget
        assert seg.turns == tuple(u.key[1] for u in seg_units if u.is_turn)
        if k + 1 < len(segments):  # greedy: the next unit would not have fitted
            nxt = unit_of[segments[k + 1].seqs[0]]
            assert seg.tokens + sum(tokens[nodes[i]] for i in range(nxt.first, nxt.last + 1)) > budget
