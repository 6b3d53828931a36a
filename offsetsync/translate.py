"""One committed source offset to its destination offset (DESIGN.md §5): by timestamp, made
exact by the provenance header.

For a group that committed offset ``c`` on a source partition, the answer is the destination
offset of the copy of the first readable source record at or after ``c``: a consumer of the
destination that starts there reads exactly the records the group had not processed. The
timestamp of that source record finds where to look (``offsets_for_times`` on the destination
gives the first copy with that timestamp or a later one, never one after the copy, because
copies keep their order and timestamps); the provenance header then walks forward to the exact
copy. Without the header the timestamp's answer stands: it may re-read records of the same
millisecond (or with out-of-order timestamps), and never skips one.

Only committed destination records are read (read_committed), so an answer never lies beyond
what stage 2 has committed: a group ahead of replication gets ``Waiting``, never a guess.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from envelope.provenance import find_provenance

_TIMEOUT_S = 10.0
_BATCH = 500
# How far before a caught-up group's offset to look for the last record it processed: a run of
# aborted records or markers longer than this is read in further steps.
_LOOK_BACK = 64


@dataclass(frozen=True, slots=True)
class Translated:
    destination_offset: int
    # True: located by the provenance header; False: by timestamp alone (may re-read records
    # of the same millisecond, never skips one).
    exact: bool


@dataclass(frozen=True, slots=True)
class Waiting:
    """Replication has not yet committed the record the group would read next."""

    source_offset: int


@dataclass(frozen=True, slots=True)
class BehindRetention:
    """The committed offset is below the source's log start: the records the group would read
    next are gone from the source, so there is nothing exact to translate."""

    log_start: int


Translation = Translated | Waiting | BehindRetention


class PartitionReader:
    """Reads a few records of one partition at a time, read_committed; one per cluster."""

    def __init__(self, client_config: dict[str, str]) -> None:
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": "exactly-offsetsync-reader",  # assign() only, never commits
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # A position outside the log is an answer (BehindRetention), not a silent reset.
                "auto.offset.reset": "error",
                # A range that ends in a transaction marker returns no record; say so at once.
                "fetch.wait.max.ms": 10,
            }
        )

    def close(self) -> None:
        self._consumer.close()

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """Log start and last stable offset."""
        return self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=_TIMEOUT_S, cached=False
        )

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose timestamp is at or after ``timestamp_ms``; -1 if none."""
        [found] = self._consumer.offsets_for_times(
            [TopicPartition(topic, partition, timestamp_ms)], timeout=_TIMEOUT_S
        )
        if found.error:
            raise KafkaException(found.error)
        return found.offset

    def records(self, topic: str, partition: int, start: int, end: int) -> Iterator[Message]:
        """The readable records from ``start`` up to ``end`` (exclusive)."""
        if start >= end:
            return
        self._consumer.assign([TopicPartition(topic, partition, start)])
        try:
            while True:
                for message in self._consumer.consume(_BATCH, timeout=0.2):
                    if message.error():
                        raise KafkaException(message.error())
                    if message.offset() >= end:
                        return
                    yield message
                position = self._consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    return
        finally:
            self._consumer.unassign()


def translate(
    source: PartitionReader,
    destination: PartitionReader,
    *,
    source_topic: str,
    destination_topic: str,
    partition: int,
    committed: int,
    source_cluster_id: str,
) -> Translation:
    """Where on the destination a group that committed ``committed`` on the source resumes."""
    log_start, end = source.bounds(source_topic, partition)
    if committed < log_start:
        return BehindRetention(log_start)
    next_record = _first(source.records(source_topic, partition, committed, end))
    if next_record is not None:
        found = _copy_at_or_after(
            destination, destination_topic, partition, next_record, source_cluster_id
        )
        return found if isinstance(found, Waiting) else found[0]
    # Caught up: nothing readable at or after the committed offset. Resume right after the copy
    # of the last record before it (a copy of a later record, produced since, is not skipped).
    last = _last_before(source, source_topic, partition, log_start, min(committed, end))
    if last is None:
        low, _high = destination.bounds(destination_topic, partition)
        return Translated(low, exact=False)
    found = _copy_at_or_after(destination, destination_topic, partition, last, source_cluster_id)
    if isinstance(found, Waiting):
        return found
    translated, origin_offset = found
    # The copy found is of `last` itself (resume after it) or of a later record (resume at it).
    if origin_offset == last.offset():
        return Translated(translated.destination_offset + 1, exact=True)
    return translated


def _copy_at_or_after(
    destination: PartitionReader,
    topic: str,
    partition: int,
    record: Message,
    source_cluster_id: str,
) -> tuple[Translated, int | None] | Waiting:
    """The destination offset of the first copy of a source record at or after ``record``, and
    the source offset that copy names (None when the header is off)."""
    target = record.offset()
    start = destination.offset_for_time(topic, partition, record.timestamp()[1])
    if start < 0:
        return Waiting(target)
    _low, end = destination.bounds(topic, partition)
    for copy in destination.records(topic, partition, start, end):
        origin = _origin(copy)
        if origin is None:
            # Header off: the timestamp's answer, which may re-read but never skips.
            return Translated(start, exact=False), None
        # A copy from another flow (aggregation) or partition is not this group's record.
        if origin[:2] == (source_cluster_id, partition) and origin[2] >= target:
            return Translated(copy.offset(), exact=True), origin[2]
    return Waiting(target)


def _last_before(
    source: PartitionReader, topic: str, partition: int, log_start: int, offset: int
) -> Message | None:
    """The last readable record below ``offset``, or None when there is none."""
    stop = offset
    while stop > log_start:
        start = max(log_start, stop - _LOOK_BACK)
        last = None
        for last in source.records(topic, partition, start, stop):  # noqa: B007
            pass
        if last is not None:
            return last
        stop = start
    return None


def _first(messages: Iterator[Message]) -> Message | None:
    for message in messages:
        return message
    return None


def _origin(message: Message) -> tuple[str, int, int] | None:
    origin = find_provenance(message.headers())
    if origin is None:
        return None
    return origin.source_cluster_id, origin.partition, origin.offset


__all__ = [
    "BehindRetention",
    "PartitionReader",
    "Translated",
    "Translation",
    "Waiting",
    "translate",
]
