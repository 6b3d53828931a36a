"""Two clusters of three replicating nodes each (replication factor 3, min.insync.replicas 2),
shared by the tests in this folder; `make test-nodes` runs them, outside the default suite (six
JVMs beside the roles on two cores)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from exactly.chaos.network import Toxiproxy, ensure_toxiproxy
from localkafka import ClusterStateError, LocalCluster, ensure_kafka, start_all
from tests.backends import source_kafka_version
from tests.nodes.flow import ROLES_LISTENER

_NODES_DIR = Path(__file__).parent
_READY_TIMEOUT_S = 180.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _NODES_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.nodes)
            # Brokers too: `-m "not kafka"` (make unit) must leave these out.
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    base = tmp_path_factory.mktemp("three-nodes", numbered=False)
    # The source may run an older Kafka (KRaft: 3.3 or later), as the cluster a user migrates
    # from often does; the target runs ours. Each node also has a listener the roles may reach
    # it through toxiproxy on (test_cut.py).
    source = LocalCluster.create(
        base / "source",
        "source",
        ensure_kafka(source_kafka_version()),
        nodes=3,
        proxied=[ROLES_LISTENER],
    )
    target = LocalCluster.create(
        base / "target", "target", nodes=3, proxied=[ROLES_LISTENER], reserved_ports=source.ports
    )
    clusters = {"source": source, "target": target}
    try:
        start_all(clusters.values(), _READY_TIMEOUT_S, tie_to_parent=True)
        yield clusters
    finally:
        for cluster in clusters.values():
            cluster.abort()


@pytest.fixture(scope="session")
def network(
    three_nodes: dict[str, LocalCluster], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Toxiproxy]:
    """One toxiproxy link per node of each cluster, named ``source.node1`` and so on: a test
    cuts one node off from the roles while it stays in its cluster."""
    proxy = Toxiproxy(ensure_toxiproxy(), tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log")
    proxy.start()
    try:
        for name, cluster in three_nodes.items():
            for node, (listen, via_proxy) in cluster.proxied_endpoints(ROLES_LISTENER).items():
                proxy.add_link(f"{name}.node{node}", {node: (via_proxy, listen)})
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(autouse=True)
def whole_clusters(three_nodes: dict[str, LocalCluster]) -> Iterator[None]:
    """Every node running and every replica in sync before a test and after it, whatever the
    test did or failed to undo: the next one starts on whole clusters, in any order. The
    test's topics go with it: a SIGKILLed node recovers every log it holds before it rejoins,
    and with the topics of every earlier test that took past 90 s here."""
    _heal(three_nodes)
    yield
    _heal(three_nodes)
    for cluster in three_nodes.values():
        _delete_topics(cluster.bootstrap_servers)


def _heal(clusters: dict[str, LocalCluster]) -> None:
    for cluster in clusters.values():
        for node_id in cluster.nodes:
            with contextlib.suppress(ClusterStateError):
                cluster.resume_node(node_id)  # not running: launched below
            cluster.launch_node(node_id, tie_to_parent=True)
    for cluster in clusters.values():
        cluster.await_serving(sorted(cluster.nodes), _READY_TIMEOUT_S)


def _delete_topics(bootstrap_servers: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    topics = [
        name
        for name in admin.list_topics(timeout=30).topics
        if name not in ("__consumer_offsets", "__transaction_state")
    ]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=60).values():
            future.result(timeout=90)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.nodes.flow import STALLS

    if STALLS:
        terminalreporter.section("three-node faults: destination stalls")
        for line in STALLS:
            terminalreporter.write_line(line)
