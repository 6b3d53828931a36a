"""localkafka on its own: a whole cluster crashing, refusing what would corrupt a cluster, and
which Kafka versions run on ZooKeeper."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from confluent_kafka import Producer

from localkafka import (
    ClusterStartError,
    ClusterStateError,
    KafkaDistribution,
    LocalCluster,
    ensure_class_archive,
)
from localkafka.layout import uses_zookeeper
from localkafka.node import JIT_VARIABLE, jit_options
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


@pytest.mark.parametrize(
    ("version", "zookeeper"),
    [("2.8.2", True), ("3.4.1", True), ("3.5.2", False), ("3.9.1", False), ("4.3.1", False)],
)
def test_kafka_before_3_5_runs_on_zookeeper(version, zookeeper):
    assert uses_zookeeper(version) is zookeeper


def test_a_version_that_is_not_one_is_named():
    with pytest.raises(ClusterStateError, match="'latest'"):
        uses_zookeeper("latest")


def test_several_nodes_on_a_zookeeper_version_are_refused_before_anything_is_written(tmp_path):
    old = KafkaDistribution("2.8.2", tmp_path / "no-jars-needed")
    with pytest.raises(ClusterStateError, match=r"3 nodes on Kafka 2\.8\.2: .* KRaft"):
        LocalCluster.create(tmp_path / "old", "old", old, nodes=3)
    assert not (tmp_path / "old").exists()


def test_every_node_maps_the_class_archive_that_speeds_its_start(own_cluster):
    archive = ensure_class_archive()
    assert archive is not None, "Java 17 writes class archives"
    own_cluster.start(tie_to_parent=True)
    for process in (own_cluster.controller, own_cluster.broker):
        # Mapped, not only named on the command line: a JVM that rejects an archive runs on.
        maps = Path(f"/proc/{process.pid}/maps").read_text()
        assert str(archive) in maps, f"the {process.role} did not map {archive}"


def _compiler_threads(pid: int) -> set[str]:
    names = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.add((task / "comm").read_text().strip())
        except FileNotFoundError:
            continue  # HotSpot stops an idle compiler thread whenever it likes
    return {name for name in names if "CompilerThre" in name}


@pytest.mark.parametrize(("jit", "compilers"), [(None, {"C1"}), ("full", {"C1", "C2"})])
def test_nodes_run_the_compilers_localkafka_jit_names(own_cluster, monkeypatch, jit, compilers):
    if jit is None:
        monkeypatch.delenv(JIT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(JIT_VARIABLE, jit)
    own_cluster.start(tie_to_parent=True)
    for process in (own_cluster.controller, own_cluster.broker):
        threads = _compiler_threads(process.pid)
        assert {name.split()[0] for name in threads} == compilers, (process.role, threads)


def test_a_compiler_choice_that_is_not_one_is_named(monkeypatch):
    monkeypatch.setenv(JIT_VARIABLE, "fast")
    with pytest.raises(ClusterStartError, match="LOCALKAFKA_JIT='fast': expected one of full"):
        jit_options()
