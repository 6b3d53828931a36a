"""Cut a run of consumed records of one source partition into envelopes within the budget."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from envelope import SourceRecord

# Bytes an envelope adds around its records, and each record around its key, value and headers,
# at most (msgpack headers of arrays, ints, bin and str): kept generous, the budget is a bound.
ENVELOPE_OVERHEAD = 512
RECORD_OVERHEAD = 64
HEADER_OVERHEAD = 16


def record_size(record: SourceRecord) -> int:
    size = RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"")
    for name, value in record.headers:
        size += HEADER_OVERHEAD + len(name) + len(value or b"")
    return size


def cut_runs(
    records: Sequence[SourceRecord], max_records: int, max_bytes: int
) -> Iterator[tuple[list[SourceRecord], int]]:
    """Consecutive runs of at most `max_records` records and about `max_bytes` bytes each,
    with their estimated encoded size; a single record larger than the budget travels alone."""
    run: list[SourceRecord] = []
    size = ENVELOPE_OVERHEAD
    for record in records:
        this = record_size(record)
        if run and (len(run) >= max_records or size + this > max_bytes):
            yield run, size
            run, size = [], ENVELOPE_OVERHEAD
        run.append(record)
        size += this
    if run:
        yield run, size
