"""Topics for the benches that run the roles end to end: a source topic filled with varied
records, and how many partitions a topic has (for a flow's staging topic, which stage 1 makes)."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.payloads import Payloads
from runtime import produce_when_room


def fill_topic(
    bootstrap: str, topic: str, partitions: int, size: int, count: int, first: int = 0
) -> None:
    """Create ``topic`` and produce ``count`` records of ``size`` bytes round-robin over its
    partitions: values ``first`` to ``first + count - 1`` of bench/payloads.py (a different one
    for every record; ``first`` keeps two topics' values apart), keys ``k0``, ``k1``, ..."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, -1)])[topic].result(30)
    time.sleep(1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1"})
    payloads = Payloads(size)
    for i in range(count):
        produce_when_room(
            producer,
            topic,
            value=payloads.value(first + i),
            key=b"k%d" % i,
            partition=i % partitions,
        )
    producer.flush(120)


def partition_count(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return len(metadata.topics[topic].partitions)
