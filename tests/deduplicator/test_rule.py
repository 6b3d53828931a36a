"""Invariant 4: whatever at-least-once stage 1 puts into a lane (repeats after restarts, orphans
after a lost envelope, late writes of a dropped producer), the rule writes every readable source
record exactly once, in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from deduplicator.rule import (
    PartitionState,
    decode_state,
    encode_state,
    judge,
    state_key,
)
from deduplicator.transaction import Tally
from deduplicator.verdict import judged
from envelope import EnvelopeRows

TOPIC_ID = bytes(range(16))
NEW_TOPIC_ID = bytes(range(16, 32))


def _envelope(offsets: list[int], prev: int | None, topic_id: bytes = TOPIC_ID) -> EnvelopeRows:
    rows = tuple((o, 0, 1, None, b"%d" % o, ()) for o in offsets)
    return EnvelopeRows("cluster", "orders", topic_id, 0, prev, rows)


def _run(envelopes: list[EnvelopeRows], state: PartitionState | None = None) -> list[int]:
    written = []
    for envelope in envelopes:
        verdict = judge(state, envelope)
        written.extend(row[0] for row in verdict.accepted)
        state = verdict.state
    return written


@st.composite
def stage_one_lanes(draw: st.DrawFn) -> tuple[list[int], list[EnvelopeRows]]:
    """Readable offsets of one source partition and what an at-least-once, gap-free-per-session
    stage 1 may have put into its lane, ending with a session that delivers everything."""
    offsets = sorted(draw(st.sets(st.integers(0, 400), min_size=1, max_size=60)))
    lane: list[EnvelopeRows] = []
    late: list[EnvelopeRows] = []  # in flight when their session ended; they may land later
    committed = 0  # index into offsets: stage 1's commit point
    sessions = draw(st.integers(0, 4))
    for session in range(sessions + 1):
        final = session == sessions
        # Invariant 3: a session restarts at the commit point (or before it, if commits lag).
        start = draw(st.integers(0, committed))
        envelopes, prev, i = [], None, start
        while i < len(offsets):
            size = draw(st.integers(1, 8))
            envelopes.append(_envelope(offsets[i : i + size], prev))
            prev = offsets[min(i + size, len(offsets)) - 1]
            i += size
            if not final and draw(st.integers(0, 4)) == 0:
                break
        in_flight: list[EnvelopeRows] = []
        if not final and envelopes and draw(st.booleans()):
            # A delivery error: one envelope lost, the ones behind it may still land (orphans).
            lost = draw(st.integers(0, len(envelopes) - 1))
            in_flight = envelopes[lost + 1 :][: draw(st.integers(0, 2))]
            envelopes = envelopes[:lost]
        if envelopes:
            # Only this session's own acknowledged prefix moves the commit point.
            committed = max(committed, offsets.index(envelopes[-1].rows[-1][0]) + 1)
        # Late writes of the previous session's producer interleave with this session's first.
        at = draw(st.integers(0, min(2, len(envelopes))))
        lane.extend(envelopes[:at] + late + envelopes[at:])
        late = in_flight
    return offsets, lane


@settings(max_examples=300, deadline=None)
@given(stage_one_lanes())
def test_every_readable_record_is_written_once_in_order(lane):
    offsets, envelopes = lane
    assert _run(envelopes) == offsets


def test_an_orphan_is_not_written_and_heals_when_resent():
    first = _envelope([0, 1], None)
    orphan = _envelope([5, 6], 3)  # the envelope with 2..3 was lost
    verdict = judge(judge(None, first).state, orphan)
    assert verdict.orphan
    assert verdict.accepted == ()
    assert _run([first, orphan, _envelope([2, 3], None), _envelope([5, 6], 3)]) == [
        0,
        1,
        2,
        3,
        5,
        6,
    ]


def test_duplicates_are_counted_and_dropped():
    state = judge(None, _envelope([0, 1, 2], None)).state
    verdict = judge(state, _envelope([1, 2, 3], None))
    assert [row[0] for row in verdict.accepted] == [3]
    assert verdict.duplicates == 2
    assert verdict.state.high == 3


def test_a_recreated_topic_starts_again_and_late_writes_of_the_old_one_are_stale():
    state = judge(None, _envelope([10, 11], None)).state
    recreated = judge(state, _envelope([0, 1], None, NEW_TOPIC_ID))
    assert [row[0] for row in recreated.accepted] == [0, 1]
    assert recreated.state.retired == (TOPIC_ID,)
    late = judge(recreated.state, _envelope([12], 11))
    assert late.stale
    assert late.accepted == ()
    assert late.state == recreated.state


def test_state_round_trips_and_keys_keep_partitions_apart():
    state = PartitionState(TOPIC_ID, 41, (NEW_TOPIC_ID,))
    assert decode_state(encode_state(state)) == state
    assert state_key("c", "t", 1) != state_key("c", "t", 11)
    assert state_key("c", "t1", 1) != state_key("c", "t", 11)


def test_each_dropped_record_is_tallied_once_under_its_reason():
    """What the counters get once the transaction commits (deduplicator/verdict.py): a stale
    record is stale, not a duplicate as well."""
    tally = Tally()
    state = judged(tally, None, _envelope([10, 11], None)).state
    state = judged(tally, state, _envelope([11, 12], None)).state
    recreated = judged(tally, state, _envelope([0, 1], None, NEW_TOPIC_ID)).state
    judged(tally, recreated, _envelope([13, 14], 12))  # a late write of the old topic
    judged(tally, recreated, _envelope([5], 4, NEW_TOPIC_ID))  # after a gap: an orphan
    assert (tally.duplicates, tally.stale, tally.orphans) == (1, 2, 1)
