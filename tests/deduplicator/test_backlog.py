"""Stage 2's backlog gauge against a real staging-like topic: the high watermark the consumer
has seen minus the offset committed, per partition, and gone with the partition."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from deduplicator.backlog import Backlog
from deduplicator.metrics import DeduplicatorMetrics
from tests.kafka_helpers import create_topic, produce_numbered


def _gauge_value(registry: CollectorRegistry, partition: int) -> float | None:
    return registry.get_sample_value(
        "exactly_deduplicator_backlog_records", {"partition": str(partition)}
    )


def test_the_backlog_is_what_waits_past_the_committed_offset(
    target_cluster, unique_topic, unique_group
):
    topic = unique_topic("staging")
    create_topic(target_cluster.bootstrap_servers, topic, 2)
    produce_numbered(target_cluster.bootstrap_servers, topic, 2, 0, 200)  # 100 per partition
    metrics = DeduplicatorMetrics()
    backlog = Backlog(topic, metrics.backlog)
    consumer = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": unique_group("stage2"),
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        consumed: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while sum(consumed.values()) < 200 and time.monotonic() < deadline:
            for message in consumer.consume(100, 1.0):
                if message.error() is None:
                    consumed[message.partition()] = message.offset() + 1
        assert consumed == {0: 100, 1: 100}
        # Partition 0: 40 committed of 100; partition 1: nothing committed since assigned (its
        # read position stands for it).
        backlog.committed(0, 40)
        backlog.update_due(consumer, [0, 1])
        assert _gauge_value(metrics.registry, 0) == 60
        assert _gauge_value(metrics.registry, 1) == 0
        backlog.update_due(consumer, [0, 1])  # within the interval: not read again
        backlog.committed(0, 100)
        assert _gauge_value(metrics.registry, 0) == 60
        backlog._next_update = 0.0  # the interval passed
        backlog.update_due(consumer, [0, 1])
        assert _gauge_value(metrics.registry, 0) == 0
        backlog.forget([0])
        assert _gauge_value(metrics.registry, 0) is None
        assert _gauge_value(metrics.registry, 1) == 0
    finally:
        consumer.close()
