"""Stage 2's rewind after a transaction that did not commit, against a real staging-like topic:
every partition the consumer returned records of since its assignment is read again from its
committed position, which stage 2 knows without asking the group coordinator, including a
partition whose records a rewind cut short before any of them was processed."""

from __future__ import annotations

import time
from types import SimpleNamespace

from confluent_kafka import Consumer, Message, TopicPartition

from deduplicator.backlog import Backlog
from deduplicator.layout import ChangelogLayout
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.partitions import Partitions
from tests.kafka_helpers import create_topic, produce_numbered


def _read(consumer: Consumer, wanted: int) -> list[Message]:
    """At least ``wanted`` records, in the batches the consumer returns them in."""
    read: list[Message] = []
    deadline = time.monotonic() + 30
    while len(read) < wanted:
        assert time.monotonic() < deadline, f"{len(read)} of {wanted} records read"
        read += [m for m in consumer.consume(500, 1.0) if m.error() is None]
    return read


def _first_offsets(messages: list[Message]) -> dict[int, int]:
    first: dict[int, int] = {}
    for message in messages:
        first.setdefault(message.partition(), message.offset())
    return first


def test_a_rewind_reads_again_every_partition_returned_processed_or_not(
    target_cluster, unique_topic, unique_group
):
    staging = unique_topic("staging")
    create_topic(target_cluster.bootstrap_servers, staging, 3)
    produce_numbered(target_cluster.bootstrap_servers, staging, 3, 0, 300)  # 100 a partition
    consumer = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": unique_group("stage2"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    # Only what note_positions and rewind use: the staging topic's name, the owned partitions
    # and the backlog; the rest of a Deduplicator needs a whole flow.
    metrics = DeduplicatorMetrics()
    settings = SimpleNamespace(names=SimpleNamespace(staging=staging), state_dir="", flow="")
    owned = Partitions(
        settings,
        ChangelogLayout("changelog", shared=False),
        metrics,
        Backlog(staging, metrics.backlog),
    )
    owned.stores = {0: None, 1: None}  # partition 2 is not ours: revoked within the batch
    try:
        consumer.assign([TopicPartition(staging, p, 0) for p in (0, 1, 2)])
        first = _read(consumer, 300)
        owned.note_positions(first)
        # A commit of partition 0 up to offset 40 went through; what followed did not commit.
        owned.committed({0: 40})
        owned.rewind(consumer)
        again = _first_offsets(_read(consumer, 60 + 100))
        assert again[0] == 40  # from the last commit
        assert again[1] == _first_offsets(first)[1] == 0  # returned, never committed: all again
        assert owned._positions == {0: 40, 1: 0}
        owned.note_positions([])  # later batches keep the first position
        assert owned._positions == {0: 40, 1: 0}
    finally:
        consumer.close()
