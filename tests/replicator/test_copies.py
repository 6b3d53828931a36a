"""Loop prevention without a broker: the rows of a run that are copies already (the provenance
header) are left out, and the byte count is that of what is copied."""

from __future__ import annotations

from envelope import HEADER_PROVENANCE, RecordRow
from replicator.batching import Run, estimated_size
from replicator.copies import without_copies


def _row(offset: int, headers: tuple[tuple[str, bytes | None], ...] = ()) -> RecordRow:
    return (offset, 0, 0, b"k", b"value", headers)


def _run(*rows: RecordRow) -> Run:
    run = Run()
    for row in rows:
        run.add(row, estimated_size(row))
    return run


def test_a_run_without_headers_is_copied_whole_and_not_searched():
    run = _run(_row(1), _row(2))
    rows, size = without_copies(run)
    assert rows is run.rows
    assert size == run.size


def test_copies_are_left_out_and_their_bytes_not_counted():
    copy = _row(2, ((HEADER_PROVENANCE, b"origin"),))
    kept = [_row(1, (("h", b"1"),)), _row(3)]
    run = _run(kept[0], copy, kept[1])
    rows, size = without_copies(run)
    assert rows == kept
    assert size == run.size - estimated_size(copy)


def test_a_run_of_copies_only_leaves_nothing_to_copy():
    run = _run(_row(1, ((HEADER_PROVENANCE, b"origin"),)))
    rows, _size = without_copies(run)
    assert rows == []


def test_a_provenance_header_without_a_value_is_not_a_copy():
    run = _run(_row(1, ((HEADER_PROVENANCE, None),)))
    rows, size = without_copies(run)
    assert rows == run.rows
    assert size == run.size
