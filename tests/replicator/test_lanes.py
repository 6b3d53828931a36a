"""Stage 1's lanes without a broker: which staging partition carries a source partition
(invariant 1) and what may be committed for it (invariant 3: only an acknowledged prefix)."""

from __future__ import annotations

from replicator.lanes import Lane, lane_of


def _lane(committable: int = 100) -> Lane:
    return Lane("orders", 3, 1, b"\x01" * 16, committable=committable, committed=committable)


def test_a_source_partition_always_rides_the_same_lane():
    lanes = {lane_of(t, p, 12) for t in ("orders", "payments") for p in range(24)}
    assert lanes == set(range(12))  # every lane used, none outside the staging topic
    # Pinned: the mapping is recorded with the staging topic and must never change under it.
    assert (lane_of("orders", 0, 12), lane_of("orders", 1, 12), lane_of("x", 7, 5)) == (11, 5, 3)


def test_acknowledgements_in_order_move_the_commit_point_over_each_envelope():
    lane = _lane()
    first, second = lane.sent(109, 109, now=1.0), lane.sent(119, 119, now=2.0)
    lane.acknowledged(first)
    assert lane.committable == 110
    lane.acknowledged(second)
    assert lane.committable == 120
    assert lane.oldest_unacked_at() is None


def test_an_acknowledgement_past_a_gap_does_not_move_the_commit_point():
    lane = _lane()
    first, second, third = (lane.sent(o, o, now=float(o)) for o in (109, 119, 129))
    lane.acknowledged(second)
    lane.acknowledged(third)
    assert lane.committable == 100  # the first envelope is not acknowledged: nothing moves
    assert lane.oldest_unacked_at() == 109.0
    lane.acknowledged(first)
    assert lane.committable == 130  # the whole prefix now, at once


def test_the_commit_point_never_moves_back():
    lane = _lane(committable=500)
    lane.acknowledged(lane.sent(109, 109, now=1.0))  # a rewound lane's stale envelope
    assert lane.committable == 500


def test_a_new_session_starts_a_new_chain_and_forgets_what_was_in_flight():
    lane = _lane()
    flight = lane.sent(109, 109, now=1.0)
    assert lane.prev_offset == 109
    lane.new_session()
    assert (lane.prev_offset, lane.oldest_unacked_at(), lane.committable) == (None, None, 100)
    lane.acknowledged(flight)  # never delivered to a new-session lane in practice: harmless
    assert lane.committable == 100


def test_records_passed_over_are_committed_only_after_the_envelopes_before_them():
    lane = _lane()
    # An envelope of 100..104 whose run went on to 107 with copies that were not copied.
    first = lane.sent(104, 107, now=1.0)
    assert lane.prev_offset == 104  # the chain names the last record emitted (invariant 4)
    lane.passed_over(112, now=2.0)  # a whole run of copies
    assert lane.committable == 100  # nothing before the first acknowledgement (invariant 3)
    assert lane.oldest_unacked_at() == 1.0
    lane.acknowledged(first)
    assert lane.committable == 113
    assert lane.oldest_unacked_at() is None
    lane.passed_over(120, now=3.0)  # nothing in flight: at once
    assert lane.committable == 121
    assert lane.prev_offset == 104
