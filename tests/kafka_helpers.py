"""Small, honest Kafka helpers for tests: create topics, read a topic to its end, and a call
that fails with given Kafka errors before it succeeds (for retry logic without a broker)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class ReadRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: tuple[int, int]


def create_topic(
    bootstrap_servers: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    futures = admin.create_topics(
        # The broker's default replication factor: 1 on one node, 3 on a cluster of several.
        [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config or {})]
    )
    futures[name].result(timeout=30)
    await_partitions(admin, name, partitions)


def delete_topic(bootstrap_servers: str, name: str) -> None:
    """Delete topic ``name`` and return once metadata no longer lists it: until then a topic
    created under its name may fail, or be taken for the old one."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.delete_topics([name])[name].result(30)
    deadline = time.monotonic() + 30
    while name in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{name} still listed 30 s after its deletion"
        time.sleep(0.2)


def await_partitions(admin: AdminClient, name: str, partitions: int) -> None:
    """Return once metadata shows topic ``name`` with ``partitions`` partitions, each led.

    Creation (or growth) is acknowledged by the controller before the brokers' metadata shows
    it; until then a client's first produce to a new partition fails ("Unknown partition")."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
        except KafkaException:  # a broker a previous test restarted may still be rejoining
            time.sleep(0.5)
            continue
        if (
            topic
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} has no leader for every partition after 30 s")


def read_all(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    isolation_level: str = "read_committed",
    timeout_s: float = 60.0,
) -> list[ReadRecord]:
    """Every record of `topic` from the beginning to the end offsets seen at the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "unused-no-commits",
            "enable.auto.commit": False,
            "isolation.level": isolation_level,
        }
    )
    try:
        ends = {}
        for partition in range(partitions):
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10, cached=False
            )
            ends[partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: list[ReadRecord] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {set(ends) - done} not read to the end")
            for message in consumer.consume(500, timeout=0.5):
                if message.error():
                    raise KafkaException(message.error())
                records.append(
                    ReadRecord(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        list(message.headers() or []),
                        message.timestamp(),
                    )
                )
            for partition, end in ends.items():
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    done.add(partition)
        return records
    finally:
        consumer.close()


def read_at_least(
    bootstrap_servers: str, topic: str, partitions: int, count: int, timeout_s: float = 60.0
) -> list[ReadRecord]:
    """Read the whole topic again and again until it holds at least `count` records.

    Right after a broker restart its high watermarks come from a checkpoint that a SIGKILL can
    leave stale, so for a moment the end offsets under-report what the log holds; a reader that
    trusts the first answer would see too little. Returns the last read, whatever its size.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_all(bootstrap_servers, topic, partitions, timeout_s=timeout_s)
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def produce_numbered(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    """Records ``start`` .. ``start + count - 1``, each with its own key and value, spread over
    ``partitions`` by number; fails unless every one is acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(start, start + count):
        producer.produce(topic, key=b"k%d" % i, value=b"v-%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def failing_call(
    errors: list[KafkaError], result: str = "done"
) -> tuple[Callable[[], str], list[int]]:
    """A call that raises each of `errors` in turn, then returns `result`; counts its calls."""
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise KafkaException(errors[len(calls) - 1])
        return result

    return call, calls
