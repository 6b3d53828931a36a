"""Reading a staging partition's changelog tail back into RocksDB (DESIGN.md §3: the changelog
is the truth, RocksDB a cache of a prefix of it)."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaException, TopicPartition

from deduplicator.errors import RestoreTimeoutError
from runtime import LIBRDKAFKA_LOG, Settings, call_retrying

_POLL_S = 0.05
_BATCH = 1000
_WATERMARK_TIMEOUT_S = 30.0


@contextmanager
def changelog_reader(settings: Settings) -> Iterator[Consumer]:
    """One consumer for every partition an assignment restores (a consumer per partition
    costs a connection set-up each)."""
    reader = Consumer(
        {
            **settings.destination.client_config(),
            "group.id": settings.names.changelog_reader_group,
            "enable.auto.commit": False,
            # Invariant 5: only committed state; an aborted transaction's changelog never was.
            "isolation.level": "read_committed",
            # A tail that is only a transaction marker returns no record: answer at once instead
            # of the broker's default 500 ms wait, per partition, inside on_assign.
            "fetch.wait.max.ms": 10,
            "logger": LIBRDKAFKA_LOG,
        }
    )
    try:
        yield reader
    finally:
        reader.close()


def changelog_tail(
    reader: Consumer, topic: str, partition: int, start: int, deadline: float
) -> Generator[tuple[bytes, bytes | None, int]]:
    """(key, value, offset) of the readable changelog records from `start` to the end offset of
    the moment; RestoreTimeoutError once `time.monotonic()` passes `deadline`."""
    tp = TopicPartition(topic, partition)
    # A leader still being elected (a new changelog, a broker just restarted) is retriable.
    _low, end = call_retrying(
        lambda: reader.get_watermark_offsets(tp, timeout=_WATERMARK_TIMEOUT_S, cached=False),
        deadline_s=_WATERMARK_TIMEOUT_S,
    )
    if start >= end:
        return
    reader.assign([TopicPartition(topic, partition, start)])
    try:
        while True:
            # Position, not the last offset read: read_committed skips markers and aborted
            # records (the position passes them on the next consume), so the last readable
            # record may lie below `end`.
            position = reader.position([tp])[0].offset
            if position >= end:
                return
            if time.monotonic() > deadline:
                reached = max(position, start)  # no position before the first fetch
                raise RestoreTimeoutError(
                    f"restore of changelog partition {partition} stopped at offset {reached} "
                    f"of {end} at its deadline; a restart resumes from there"
                )
            for message in reader.consume(_BATCH, _POLL_S):
                if message.error():
                    raise KafkaException(message.error())
                if message.offset() < end:
                    yield message.key(), message.value(), message.offset()
    finally:
        reader.unassign()
