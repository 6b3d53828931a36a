"""Two clusters of three replicating nodes each (replication factor 3, min.insync.replicas 2),
shared by the tests in this folder; `make test-nodes` runs them, outside the default suite (six
JVMs beside the roles on two cores)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from localkafka import ClusterStateError, LocalCluster, start_all
from localkafka.replicas import await_in_sync
from tests.replication.processes import RoleProcesses, role_processes

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
    source = LocalCluster.create(base / "source", "source", nodes=3)
    target = LocalCluster.create(base / "target", "target", nodes=3, reserved_ports=source.ports)
    clusters = {"source": source, "target": target}
    try:
        start_all(clusters.values(), _READY_TIMEOUT_S, tie_to_parent=True)
        yield clusters
    finally:
        for cluster in clusters.values():
            cluster.abort()


@pytest.fixture(autouse=True)
def whole_clusters(three_nodes: dict[str, LocalCluster]) -> Iterator[None]:
    """Every node running and every replica in sync before a test and after it, whatever the
    test did or failed to undo: the next one starts on whole clusters, in any order."""
    _heal(three_nodes)
    yield
    _heal(three_nodes)


def _heal(clusters: dict[str, LocalCluster]) -> None:
    for cluster in clusters.values():
        for node_id in cluster.nodes:
            with contextlib.suppress(ClusterStateError):
                cluster.resume_node(node_id)  # not running: launched below
            cluster.launch_node(node_id, tie_to_parent=True)
    for cluster in clusters.values():
        await_in_sync(cluster.bootstrap_servers, sorted(cluster.nodes), _READY_TIMEOUT_S)


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[RoleProcesses]:
    with role_processes(tmp_path) as started:
        yield started


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.nodes.flow import STALLS

    if STALLS:
        terminalreporter.section("three-node faults: destination stalls")
        for line in STALLS:
            terminalreporter.write_line(line)
