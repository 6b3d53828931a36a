"""Stage 2's backlog: staging records it has not committed yet, per staging partition.

Exported as ``exactly_deduplicator_backlog_records{partition}`` (the ExactlyFlowStalled and
ExactlyLagGrowing alerts): stage 1's lag says only what waits on the source, and when stage 2
stands still the records wait in staging, where stage 1's lag no longer sees them. Staging is
written without transactions, so a partition stage 2 has caught up on has a backlog of 0, not
the one offset a transaction marker would leave.
"""

from __future__ import annotations

import contextlib
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import Gauge

# The gauge follows the consumer's cached high watermarks (no request), so this only bounds how
# stale a scrape may see it.
UPDATE_INTERVAL_S = 5.0


class Backlog:
    def __init__(self, staging: str, gauge: Gauge) -> None:
        self._staging = staging
        self._gauge = gauge
        self._committed: dict[int, int] = {}  # staging partition -> next offset to commit
        self._next_update = 0.0

    def committed(self, partition: int, offset: int) -> None:
        """``offset`` is the partition's committed position now (a commit, or a rewind to it)."""
        self._committed[partition] = offset

    def forget(self, partitions: list[int]) -> None:
        """Partitions this instance no longer owns: their backlog is their new owner's."""
        for partition in partitions:
            self._committed.pop(partition, None)
            with contextlib.suppress(KeyError):  # never exported: no update came yet
                self._gauge.remove(str(partition))

    def update_due(self, consumer: Consumer, assigned: list[int]) -> None:
        now = time.monotonic()
        if now < self._next_update:
            return
        self._next_update = now + UPDATE_INTERVAL_S
        for partition in assigned:
            start = self._committed.get(partition)
            if start is None:  # nothing committed since assigned: what it has read so far
                start = self._position(consumer, partition)
                if start is None:
                    continue
                self._committed[partition] = start
            try:
                _low, high = consumer.get_watermark_offsets(
                    TopicPartition(self._staging, partition), cached=True
                )
            except KafkaException:
                continue
            if high >= 0:
                self._gauge.labels(str(partition)).set(max(0, high - start))

    def _position(self, consumer: Consumer, partition: int) -> int | None:
        try:
            (found,) = consumer.position([TopicPartition(self._staging, partition)])
        except KafkaException:
            return None
        return found.offset if found.offset >= 0 else None
