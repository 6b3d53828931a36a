"""Counts the records a read_committed consumer of the destination sees, as they arrive.

This is the number a user of the target cluster would see, so it is what the live display
shows as "in the destination" and what "caught up" is measured by. The destination topics
appear when stage 1 creates them; the watch picks each up as soon as it has led partitions.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from exactly.harness.quiet import QUIET_CLIENT_LOG

_BATCH = 1000
_METADATA_EVERY_S = 2.0


class DestinationWatch:
    """poll() reads what arrived; `count` is every readable destination record seen so far."""

    def __init__(self, bootstrap_servers: str, topics: Iterable[str]) -> None:
        base = {"bootstrap.servers": bootstrap_servers, "logger": QUIET_CLIENT_LOG}
        self._consumer = Consumer(
            {
                **base,
                "group.id": "exactly-demo-watch",  # assign() only: the group is never joined
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        # Metadata from a client of its own: on the consumer's connection it would queue behind
        # the long-polling fetches.
        self._admin = AdminClient(base)
        self._waiting = set(topics)
        self._next_metadata = 0.0
        self.count = 0

    def poll(self, budget_s: float) -> int:
        """Read for about `budget_s` seconds; the count so far."""
        if self._waiting and time.monotonic() >= self._next_metadata:
            self._assign_new_topics()
        deadline = time.monotonic() + budget_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            messages = self._consumer.consume(_BATCH, timeout=remaining)
            # A transient error (a partition that moved, say) is the verdict's business, not
            # the live count's: only records count here.
            self.count += sum(1 for message in messages if message.error() is None)
            if len(messages) < _BATCH:
                break
        return self.count

    def close(self) -> None:
        self._consumer.close()

    def _assign_new_topics(self) -> None:
        self._next_metadata = time.monotonic() + _METADATA_EVERY_S
        try:
            metadata = self._admin.list_topics(timeout=1.0)
        except KafkaException:
            return  # the target is busy; try again on a later poll
        ready = []
        for name in sorted(self._waiting):
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None or not topic.partitions:
                continue
            if all(partition.leader >= 0 for partition in topic.partitions.values()):
                ready.append((name, len(topic.partitions)))
        for name, partitions in ready:
            self._consumer.incremental_assign(
                [TopicPartition(name, p, OFFSET_BEGINNING) for p in range(partitions)]
            )
            self._waiting.discard(name)
