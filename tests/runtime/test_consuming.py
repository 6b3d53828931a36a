"""consume_ready against a real broker: it returns what is at hand without waiting for a batch
to fill (librdkafka's consume(n, timeout) waits for n messages or the whole timeout)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from runtime import consume_ready
from tests.kafka_helpers import create_topic

WAIT_S = 6.0


def _reader(bootstrap: str, topic: str) -> Consumer:
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "consume-ready", "enable.auto.commit": False}
    )
    reader.assign([TopicPartition(topic, 0, 0)])
    return reader


def test_returns_the_records_at_hand_at_once_and_waits_only_when_there_are_none(
    source_cluster, unique_topic
):
    topic = unique_topic("ready")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(3):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    reader = _reader(source_cluster.bootstrap_servers, topic)
    try:
        started = time.monotonic()
        got = consume_ready(reader, 2000, WAIT_S)
        while len(got) < 3:  # the first fetch may bring fewer than all three
            got += consume_ready(reader, 2000, WAIT_S)
        took = time.monotonic() - started
        assert [m.value() for m in got] == [b"0", b"1", b"2"]
        assert took < WAIT_S / 2, took

        # Nothing at hand: it waits, and returns the record that arrives meanwhile with it.
        producer.produce(topic, value=b"late", partition=0)
        producer.flush(10)
        got = consume_ready(reader, 2000, WAIT_S)
        assert [m.value() for m in got] == [b"late"]
        started = time.monotonic()
        assert consume_ready(reader, 2000, 0.5) == []
        assert time.monotonic() - started >= 0.45
    finally:
        reader.close()


def test_librdkafkas_batch_consume_waits_out_its_timeout_for_a_batch_that_does_not_fill(
    source_cluster, unique_topic
):
    """Why consume_ready exists: if this ever fails, librdkafka changed and it may go."""
    topic = unique_topic("batch-waits")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    producer.produce(topic, value=b"one", partition=0)
    assert producer.flush(10) == 0
    reader = _reader(source_cluster.bootstrap_servers, topic)
    try:
        assert consume_ready(reader, 1, WAIT_S)  # connected and fetched: the record is here
        reader.seek(TopicPartition(topic, 0, 0))
        started = time.monotonic()
        got = reader.consume(2000, 2.0)
        assert [m.value() for m in got] == [b"one"]
        assert time.monotonic() - started >= 1.9
    finally:
        reader.close()
