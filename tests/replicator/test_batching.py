"""Stage 1's rows and runs without a broker: records become envelope rows intact, and runs are
cut per source partition, in order, within the record and byte budgets."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from envelope import HEADER_PROVENANCE, carries_provenance
from replicator.batching import (
    ENVELOPE_OVERHEAD,
    RECORD_OVERHEAD,
    Run,
    cut_runs,
    estimated_size,
    row_of,
)


def test_a_record_becomes_its_row_with_every_field():
    message = Message(
        topic="orders",
        partition=2,
        offset=41,
        key=b"k",
        value=b"value",
        headers=[("h", b"1"), ("h", None)],
        timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000),
    )
    row, size = row_of(message)
    assert row == (
        41,
        1_700_000_000_000,
        TIMESTAMP_CREATE_TIME,
        b"k",
        b"value",
        (("h", b"1"), ("h", None)),
    )
    assert size >= RECORD_OVERHEAD + len(b"k") + len(b"value") + 2 * len("h") + 1


def test_a_tombstone_without_key_or_headers():
    row, size = row_of(Message(topic="t", partition=0, offset=0, timestamp=(0, -1)))
    assert row == (0, -1, 0, None, None, ())
    assert size == RECORD_OVERHEAD


def test_a_rows_size_estimated_from_the_row_is_row_ofs_estimate():
    # What the byte counter subtracts for a copy passed over must be what row_of added for it.
    for message in (
        Message(
            topic="t",
            partition=0,
            offset=3,
            key=b"key",
            value=b"x" * 300,
            headers=[("a", b"12"), (HEADER_PROVENANCE, b"c/0/1"), ("n", None)],
            timestamp=(TIMESTAMP_CREATE_TIME, 5),
        ),
        Message(topic="t", partition=0, offset=0, timestamp=(0, -1)),
    ):
        row, size = row_of(message)
        assert estimated_size(row) == size


def _row(offset: int, headers: tuple = ()) -> tuple:
    return (offset, 0, TIMESTAMP_CREATE_TIME, None, b"v", headers)


def _rows(*spec: tuple[str, int, int]) -> list[tuple[str, tuple, int]]:
    return [(key, _row(offset), size) for key, offset, size in spec]


def _offsets(cut: list[tuple[str, Run]]) -> list[tuple[str, list[int]]]:
    return [(key, [row[0] for row in run.rows]) for key, run in cut]


def test_runs_are_per_partition_and_keep_the_order_of_the_records():
    rows = _rows(("a", 0, 10), ("b", 0, 10), ("a", 1, 10), ("b", 1, 10), ("a", 2, 10))
    assert _offsets(list(cut_runs(rows, max_records=10, budget=10_000))) == [
        ("a", [0, 1, 2]),
        ("b", [0, 1]),
    ]


def test_a_run_is_cut_at_the_record_limit_before_the_next_record():
    rows = _rows(*(("a", offset, 10) for offset in range(5)))
    assert _offsets(list(cut_runs(rows, max_records=2, budget=10_000))) == [
        ("a", [0, 1]),
        ("a", [2, 3]),
        ("a", [4]),
    ]


def test_a_run_is_cut_at_the_byte_budget_and_an_oversized_record_travels_alone():
    budget = ENVELOPE_OVERHEAD + 250
    rows = _rows(("a", 0, 100), ("a", 1, 100), ("a", 2, 100), ("a", 3, 1000), ("a", 4, 10))
    cut = list(cut_runs(rows, max_records=100, budget=budget))
    assert _offsets(cut) == [("a", [0, 1]), ("a", [2]), ("a", [3]), ("a", [4])]
    assert [run.size for _key, run in cut] == [ENVELOPE_OVERHEAD + s for s in (200, 100, 1000, 10)]


def test_a_full_run_is_yielded_before_the_next_row_is_read():
    """The loop ships a cut run at once, so a lane that run stops takes no further rows."""
    read = []

    def rows():
        for offset in range(4):
            read.append(offset)
            yield "a", _row(offset), 10

    runs = cut_runs(rows(), max_records=2, budget=10_000)
    key, first = next(runs)
    assert (key, [r[0] for r in first.rows], read) == ("a", [0, 1], [0, 1, 2])


def test_a_copy_is_known_by_its_provenance_header_and_a_run_says_whether_it_may_hold_one():
    copy = _row(7, (("trace", b"1"), (HEADER_PROVENANCE, b"cluster/0/3")))
    [(_key, plain)] = cut_runs([("a", _row(6), 10)], max_records=10, budget=10_000)
    [(_key, mixed)] = cut_runs([("a", _row(6), 10), ("a", copy, 10)], 10, 10_000)
    assert (plain.has_headers, mixed.has_headers) == (False, True)
    assert carries_provenance(copy[5])
    assert not carries_provenance((("trace", b"1"), ("exactly.origin-not", b"x")))
    assert not carries_provenance(((HEADER_PROVENANCE, None),))  # no value names no origin
