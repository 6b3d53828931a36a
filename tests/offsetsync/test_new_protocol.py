"""A group on the consumer group protocol of KIP-848 (`group.protocol=consumer`, the default
protocol of Kafka 4's own Java consumer) moved by offset sync: its offsets are fetched like a
classic group's, and it resumes on the target, on the same protocol, exactly where it stopped
(issue 31)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient

from runtime import load_settings
from tests.backends import source_has_consumer_group_protocol
from tests.kafka_helpers import create_topic, produce_numbered, read_all
from tests.offsetsync.copied import record_taken_in
from tests.offsetsync.groups import await_committed
from tests.replication.processes import role_processes
from tests.replication.scrape import free_port
from tests.validator.planting import copy_to_destination

PARTITIONS = 3
PER_PARTITION = 20
# Processed on the source before the group stops: partition -> records.
PROCESSED = {0: 3, 1: 7, 2: PER_PARTITION}
_TIMEOUT_S = 60.0

pytestmark = pytest.mark.skipif(
    not source_has_consumer_group_protocol(),
    reason="the consumer group protocol is generally available from Kafka 4.0",
)


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def _process_and_stop(bootstrap: str, group: str, topic: str) -> None:
    """The group, subscribed as a member of the new protocol, reads ``PROCESSED`` records of each
    partition and commits their offsets as an application does, then leaves."""
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    seen = {p: 0 for p in PROCESSED}
    deadline = time.monotonic() + _TIMEOUT_S
    try:
        while any(seen[p] < n for p, n in PROCESSED.items()):
            assert time.monotonic() < deadline, f"{group} read only {seen} of {PROCESSED}"
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                seen[message.partition()] += 1
        offsets = [TopicPartition(topic, p, n) for p, n in PROCESSED.items()]
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def _group_type(bootstrap: str, group: str) -> ConsumerGroupType:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until its answer comes
    listing = admin.list_consumer_groups().result(30)
    return next(g.type for g in listing.valid if g.group_id == group)


def _resume(bootstrap: str, group: str, topic: str) -> dict[int, list[bytes]]:
    """The same group on the target: every value it reads to the end, per partition."""
    consumer = _consumer(bootstrap, group, **{"auto.offset.reset": "error"})
    consumer.subscribe([topic])
    read: dict[int, list[bytes]] = {p: [] for p in PROCESSED}
    wanted = {p: PER_PARTITION - n for p, n in PROCESSED.items()}
    deadline = time.monotonic() + _TIMEOUT_S
    try:
        while {p: len(v) for p, v in read.items()} != wanted:
            assert time.monotonic() < deadline, f"{group} read {read}, wanted {wanted} records"
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                read[message.partition()].append(message.value())
        # Nothing more behind them: a second look finds the end.
        assert not [m for m in consumer.consume(100, 2.0) if m.error() is None]
    finally:
        consumer.close()
    return read


def test_a_group_on_the_new_protocol_resumes_on_the_target_where_it_stopped(
    source_cluster, target_cluster, tmp_path
):
    base = f"kip848.{uuid.uuid4().hex[:8]}"
    group = f"{base}.group"
    create_topic(source_cluster.bootstrap_servers, base, PARTITIONS)
    produce_numbered(
        source_cluster.bootstrap_servers, base, PARTITIONS, 0, PARTITIONS * PER_PARTITION
    )
    records = read_all(source_cluster.bootstrap_servers, base, PARTITIONS)
    copy = f"{base}.copy"
    copy_to_destination(
        target_cluster.bootstrap_servers,
        copy,
        records,
        source_cluster_id=source_cluster.cluster_id,
        faults=False,
        partitions=PARTITIONS,
    )
    _process_and_stop(source_cluster.bootstrap_servers, group, base)
    # What the test is about: the source knows the group as one of the new protocol.
    assert _group_type(source_cluster.bootstrap_servers, group) == ConsumerGroupType.CONSUMER

    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": base.replace(".", r"\."),
        "REPLICATION_DESTINATION_TOPIC": "{topic}.copy",
        "REPLICATION_FLOW": f"f{uuid.uuid4().hex[:8]}",
        "OFFSETSYNC_GROUPS_INCLUDE": group.replace(".", r"\."),
        "OFFSETSYNC_INTERVAL_MS": "300",
        "METRICS_PORT": str(free_port()),
    }
    record_taken_in(source_cluster, target_cluster, load_settings(env), [base])
    expected = dict(PROCESSED)
    with role_processes(tmp_path) as roles:
        sync = roles.start("offsetsync", env)
        await_committed(target_cluster.bootstrap_servers, group, copy, expected)
        assert sync.terminate() == 0

    read = _resume(target_cluster.bootstrap_servers, group, copy)
    for partition, processed in PROCESSED.items():
        unread = [r.value for r in records if r.partition == partition][processed:]
        assert read[partition] == unread, partition
