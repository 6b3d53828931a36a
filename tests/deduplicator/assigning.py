"""A stage-2 assignment made the way the loop's rebalance callback makes it, for the restore
tests."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from deduplicator.backlog import Backlog
from deduplicator.layout import ChangelogLayout
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.partitions import Partitions


def assign_restored(
    settings, layout: ChangelogLayout, staging: str, bootstrap: str, group: str, lanes: list[int]
) -> Partitions:
    """Staging partitions ``lanes`` assigned and restored from ``layout``'s changelog, by a
    consumer of ``group`` closed once they are; the caller closes the partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    metrics = DeduplicatorMetrics()
    owned = Partitions(settings, layout, metrics, Backlog(staging, metrics.backlog))
    try:
        owned.assign(consumer, [TopicPartition(staging, lane) for lane in lanes])
    except BaseException:
        owned.close()
        raise
    finally:
        consumer.close()
    return owned
