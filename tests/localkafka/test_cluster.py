"""localkafka on its own: a whole cluster crashing, and refusing what would corrupt a cluster."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Producer

from localkafka import ClusterStartError, ClusterStateError, LocalCluster
from tests.kafka_helpers import create_topic, read_at_least


@pytest.fixture
def own_cluster(tmp_path):
    cluster = LocalCluster.create(tmp_path / "crashy", "crashy")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_whole_cluster_sigkilled_mid_commit_comes_back_with_every_committed_record(own_cluster):
    own_cluster.start(tie_to_parent=True)
    topic = "crash-everything"
    create_topic(own_cluster.bootstrap_servers, topic, partitions=2)
    producer = Producer(
        {"bootstrap.servers": own_cluster.bootstrap_servers, "transactional.id": topic}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(2000):
        producer.produce(topic, value=f"{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    del producer

    # Controller and broker both die at once (a machine crash): the restarted controller still
    # holds the dead broker's registration, which is the race the fence wait exists for.
    own_cluster.abort()
    assert not own_cluster.broker.is_running()
    assert not own_cluster.controller.is_running()
    own_cluster.start(tie_to_parent=True)

    seen = read_at_least(own_cluster.bootstrap_servers, topic, partitions=2, count=2000)
    assert sorted(int(r.value) for r in seen) == list(range(2000))


def test_create_refuses_a_directory_that_holds_a_cluster(own_cluster):
    with pytest.raises(ClusterStateError, match="already holds a cluster"):
        LocalCluster.create(own_cluster.directory, "again")


def test_start_names_a_port_taken_by_another_process(own_cluster):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", own_cluster.info.port))
        squatter.listen()
        with pytest.raises(ClusterStartError, match=f"port {own_cluster.info.port} is in use"):
            own_cluster.start(tie_to_parent=True)
    # Nothing half-started is left behind.
    assert not own_cluster.controller.is_running()
    assert not own_cluster.broker.is_running()
