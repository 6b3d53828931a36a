"""Turn consumed messages into envelope rows and cut runs within the envelope budget.

Stage 1's hot path: one wire row per record (the layout `envelope.encode_rows` packs), no
intermediate objects, and sizes estimated as the rows are made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import Message

from envelope import RecordRow

K = TypeVar("K")

# Bytes an envelope adds around its records, and each record around its key, value and headers,
# at most (msgpack headers of arrays, ints, bin and str): generous, as the budget is a bound and
# the encoded size is checked again before producing.
ENVELOPE_OVERHEAD = 512
RECORD_OVERHEAD = 64
HEADER_OVERHEAD = 16


@dataclass(slots=True)
class Run:
    """Consecutive rows of one source partition on their way into one envelope."""

    rows: list[RecordRow] = field(default_factory=list)
    size: int = ENVELOPE_OVERHEAD
    # Whether any row has headers: only then can one be a copy (envelope.carries_provenance),
    # so a run of records without headers is never searched.
    has_headers: bool = False

    def add(self, row: RecordRow, size: int) -> None:
        self.rows.append(row)
        self.size += size
        if row[5]:
            self.has_headers = True


def row_of(message: Message) -> tuple[RecordRow, int]:
    """The envelope row of a consumed record and its estimated encoded size."""
    key = message.key()
    headers = message.headers()
    size = RECORD_OVERHEAD + len(message) + (len(key) if key else 0)  # len(): the value's
    if headers:
        headers = tuple(headers)
        for name, value in headers:
            size += HEADER_OVERHEAD + len(name) + (len(value) if value else 0)
    else:
        headers = ()
    timestamp_type, timestamp = message.timestamp()
    return (message.offset(), timestamp, timestamp_type, key, message.value(), headers), size


def estimated_size(row: RecordRow) -> int:
    """``row_of``'s estimate, from a row: for the few rows taken out of a run (copies passed
    over). ``row_of`` keeps its own arithmetic, as it reads the sizes off the message once per
    record on the hot path."""
    _offset, _timestamp, _timestamp_type, key, value, headers = row
    size = RECORD_OVERHEAD + (len(value) if value else 0) + (len(key) if key else 0)
    for name, header_value in headers:
        size += HEADER_OVERHEAD + len(name) + (len(header_value) if header_value else 0)
    return size


def cut_runs(
    rows: Iterable[tuple[K, RecordRow, int]], max_records: int, budget: int
) -> Iterator[tuple[K, Run]]:
    """Runs of consecutive rows per key (a source partition), in the order of ``rows``: a run
    is yielded as soon as the next row would take it past ``max_records`` or ``budget`` bytes,
    and the last run of every key at the end. A row larger than the budget still travels,
    alone: the envelope's encoded size is checked again before it is produced."""
    runs: dict[K, Run] = {}
    for key, row, size in rows:
        run = runs.get(key)
        if run is None:
            run = runs[key] = Run()
        elif len(run.rows) >= max_records or run.size + size > budget:
            yield key, run
            run = runs[key] = Run()
        run.add(row, size)
    yield from runs.items()
