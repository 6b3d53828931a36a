"""The two test clusters are real Kafka: transactions, read_committed, and surviving SIGKILL."""

from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer

from tests.kafka_helpers import create_topic, read_all, read_at_least

HEADERS = [("h", b"1"), ("h", b"2"), ("empty", b""), ("null", None), ("bin", bytes(range(256)))]


def test_source_and_target_are_different_clusters(source_cluster, target_cluster):
    assert source_cluster.bootstrap_servers != target_cluster.bootstrap_servers
    assert source_cluster.cluster_id
    assert target_cluster.cluster_id
    assert source_cluster.cluster_id != target_cluster.cluster_id


def test_read_committed_sees_committed_transaction_only(target_cluster, unique_topic):
    topic = unique_topic()
    create_topic(target_cluster.bootstrap_servers, topic, partitions=2)
    producer = Producer(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "transactional.id": topic}
    )
    producer.init_transactions(30)
    committed = [
        # (partition, key, value, timestamp ms): old and recent CreateTimes, null and empty keys,
        # a tombstone and an empty value.
        (0, b"k0", b"v0", 1_600_000_000_000),
        (0, None, b"null-key", 1_600_000_000_001),
        (1, b"", b"empty-key", 1_700_000_000_000),
        (1, b"tombstone", None, 1_700_000_000_001),
        (1, b"empty-value", b"", 1_700_000_000_002),
    ]
    producer.begin_transaction()
    for partition, key, value, timestamp in committed:
        producer.produce(
            topic, value=value, key=key, partition=partition, timestamp=timestamp, headers=HEADERS
        )
    producer.commit_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, value=b"aborted-0", partition=0, headers=HEADERS)
    producer.produce(topic, value=b"aborted-1", partition=1, headers=HEADERS)
    # docs/design.md §9: flush before abort, or librdkafka may fail the abort with
    # INVALID_TXN_STATE.
    producer.flush(30)
    producer.abort_transaction(30)

    seen = sorted(read_all(target_cluster.bootstrap_servers, topic, partitions=2), key=_position)
    assert [(r.partition, r.key, r.value, r.timestamp[1]) for r in seen] == [
        (p, k, v, t) for p, k, v, t in committed
    ]
    assert all(r.headers == HEADERS for r in seen)
    assert all(r.timestamp[0] == TIMESTAMP_CREATE_TIME for r in seen)
    # The aborted records did reach the log: read_uncommitted shows them, read_committed not.
    uncommitted = read_all(
        target_cluster.bootstrap_servers, topic, partitions=2, isolation_level="read_uncommitted"
    )
    assert sorted(r.value for r in uncommitted if r.value and r.value.startswith(b"aborted")) == [
        b"aborted-0",
        b"aborted-1",
    ]


# In `make chaos`, to keep the default suite within 20 minutes: there,
# test_whole_cluster_sigkilled_mid_commit (tests/localkafka) proves committed records come back
# after a SIGKILL of the broker and the controller at once, on a cluster of its own.
@pytest.mark.chaos
def test_committed_records_survive_broker_sigkill_and_restart(target_cluster, unique_topic):
    if target_cluster.broker is None:
        pytest.skip(f"{target_cluster.kind} clusters give no broker control")
    topic = unique_topic()
    create_topic(target_cluster.bootstrap_servers, topic, partitions=3)
    producer = Producer(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "transactional.id": topic}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    expected = []
    for i in range(3000):
        value = f"record-{i}".encode()
        producer.produce(topic, value=value, partition=i % 3)
        expected.append(value)
    producer.commit_transaction(30)
    del producer  # no client left to reconnect noisily while the broker is down

    target_cluster.broker.kill()
    assert not target_cluster.broker.is_running()
    target_cluster.broker.restart()
    assert target_cluster.broker.is_running()

    seen = read_at_least(target_cluster.bootstrap_servers, topic, partitions=3, count=3000)
    assert sorted(r.value for r in seen) == sorted(expected)
    for partition in range(3):
        offsets = [r.offset for r in seen if r.partition == partition]
        assert offsets == sorted(offsets)


def _position(record):
    return record.partition, record.offset
