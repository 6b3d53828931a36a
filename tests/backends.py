"""Where the test session's two Kafka clusters come from, in this order:

1. external clusters named by KAFKA_EXACTLY_TEST_SOURCE_BOOTSTRAP_SERVERS and
   KAFKA_EXACTLY_TEST_TARGET_BOOTSTRAP_SERVERS (no broker control: crash tests skip);
2. localkafka: real brokers as local processes from the official jars (the default).

KAFKA_EXACTLY_TEST_BACKEND=external|testcontainers|localkafka forces one; testcontainers (the
official apache/kafka image) only when asked: a Docker engine that answers is no sign that an
image registry does (`make test-images` runs one beside the suite's clusters, and here no
registry is reachable).
KAFKA_EXACTLY_TEST_SOURCE_KAFKA_VERSION runs localkafka's source cluster on another Apache Kafka
version (say 3.9.1: an older cluster users migrate from), the target on ours. The variables are
deliberately outside the product's prefixes (KAFKA_CLUSTERS_, REPLICATION_, ...), which the roles
reject as unknown when a test starts them as processes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from confluent_kafka.admin import AdminClient

from localkafka import (
    KAFKA_VERSION,
    LocalCluster,
    ensure_kafka,
    free_port,
    start_all,
    wait_until_ready,
)

BACKEND_VARIABLE = "KAFKA_EXACTLY_TEST_BACKEND"
SOURCE_VERSION_VARIABLE = "KAFKA_EXACTLY_TEST_SOURCE_KAFKA_VERSION"
EXTERNAL_VARIABLES = {
    "source": "KAFKA_EXACTLY_TEST_SOURCE_BOOTSTRAP_SERVERS",
    "target": "KAFKA_EXACTLY_TEST_TARGET_BOOTSTRAP_SERVERS",
}
CLUSTER_NAMES = ("source", "target")
_READY_TIMEOUT_S = 120.0


class BrokerControl(Protocol):
    """What a crash test can do to a cluster's only broker."""

    def kill(self) -> None: ...
    def restart(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def is_running(self) -> bool: ...
    def log_tail(self, lines: int = 40) -> str: ...


@dataclass
class KafkaBackend:
    """One test cluster: how to reach it and, when we run it, how to crash it."""

    name: str
    kind: str
    bootstrap_servers: str
    cluster_id: str
    broker: BrokerControl | None = None
    # The same cluster's secured listeners (SASL_SSL, SSL) and credentials, where we run it.
    secured: LocalCluster | None = None
    _stop: list = field(default_factory=list, repr=False)

    def stop(self) -> None:
        for stop in self._stop:
            stop()


@dataclass
class _LocalBroker:
    cluster: LocalCluster

    def kill(self) -> None:
        self.cluster.kill()

    def restart(self) -> None:
        self.cluster.restart(_READY_TIMEOUT_S, tie_to_parent=True)

    def pause(self) -> None:
        self.cluster.pause()

    def resume(self) -> None:
        self.cluster.resume()

    def is_running(self) -> bool:
        return self.cluster.is_running()

    def log_tail(self, lines: int = 40) -> str:
        return self.cluster.log_tail(lines)


def choose_backend() -> str:
    forced = os.environ.get(BACKEND_VARIABLE)
    if forced:
        return forced
    if all(os.environ.get(variable) for variable in EXTERNAL_VARIABLES.values()):
        return "external"
    return "localkafka"


def start_backends(kind: str, base_dir: Path) -> dict[str, KafkaBackend]:
    if kind == "external":
        return {name: _external(name) for name in CLUSTER_NAMES}
    if kind == "testcontainers":
        return _testcontainers()
    if kind == "localkafka":
        return _localkafka(base_dir)
    raise ValueError(
        f"{BACKEND_VARIABLE}={kind!r}: expected external, testcontainers or localkafka"
    )


def source_kafka_version() -> str:
    """The Kafka version of the source clusters localkafka makes for the tests: ours, or
    SOURCE_VERSION_VARIABLE's."""
    return os.environ.get(SOURCE_VERSION_VARIABLE) or KAFKA_VERSION


def source_has_consumer_group_protocol() -> bool:
    """Whether the source clusters the tests make speak KIP-848's consumer group protocol
    (``group.protocol=consumer``), generally available (and on by default) from Kafka 4.0. Only
    localkafka's source runs another version; testcontainers runs ours, and external clusters
    are taken to be current."""
    if choose_backend() != "localkafka":
        return True
    return int(source_kafka_version().split(".")[0]) >= 4


def _external(name: str) -> KafkaBackend:
    bootstrap = os.environ[EXTERNAL_VARIABLES[name]]
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return KafkaBackend(name, "external", bootstrap, str(metadata.cluster_id))


def _localkafka(base_dir: Path) -> dict[str, KafkaBackend]:
    # Secured listeners beside PLAINTEXT, whose principal (ANONYMOUS) is a super-user: the
    # tests of secured flows use the former, every other test the latter, on the same JVMs.
    versions = {"source": source_kafka_version()}
    clusters = [
        LocalCluster.create(
            base_dir / name,
            name,
            ensure_kafka(versions.get(name, KAFKA_VERSION)),
            secure=True,
        )
        for name in CLUSTER_NAMES
    ]
    # Tied to this process: a test session killed with SIGKILL leaves no broker behind.
    start_all(clusters, _READY_TIMEOUT_S, tie_to_parent=True)
    return {cluster.name: _local_backend(cluster) for cluster in clusters}


def _local_backend(cluster: LocalCluster) -> KafkaBackend:
    return KafkaBackend(
        cluster.name,
        "localkafka",
        cluster.bootstrap_servers,
        cluster.cluster_id,
        broker=_LocalBroker(cluster),
        secured=cluster if cluster.secure else None,
        _stop=[cluster.stop],
    )


@contextlib.contextmanager
def cold_cluster(directory: Path, name: str) -> Iterator[KafkaBackend]:
    """A new local cluster of one test's own, stopped when the block ends: for a test that must
    be the first thing a cluster sees (no group coordinator loaded, no __consumer_offsets yet),
    which the session's shared clusters are only for the first test that runs."""
    cluster = LocalCluster.create(directory, name)
    cluster.start(_READY_TIMEOUT_S, tie_to_parent=True)
    try:
        yield _local_backend(cluster)
    finally:
        cluster.stop()


def _testcontainers() -> dict[str, KafkaBackend]:
    # Not exercised on the machines this project is developed on (no Docker engine there);
    # kept to the same readiness check and the same broker-control contract as localkafka.
    from testcontainers.core.container import DockerContainer

    backends = {}
    for name in CLUSTER_NAMES:
        host_port = free_port()
        container = (
            DockerContainer(f"apache/kafka:{KAFKA_VERSION}")
            .with_bind_ports(9092, host_port)
            .with_envs(
                KAFKA_NODE_ID="1",
                KAFKA_PROCESS_ROLES="broker,controller",
                KAFKA_LISTENERS="PLAINTEXT://0.0.0.0:9092,CONTROLLER://localhost:9093",
                KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://localhost:{host_port}",
                KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
                KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
                KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
                KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
                KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
                KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR="1",
                KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR="1",
                KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
                KAFKA_AUTO_CREATE_TOPICS_ENABLE="false",
            )
        )
        container.start()
        bootstrap = f"localhost:{host_port}"
        cluster_id = wait_until_ready(bootstrap, _READY_TIMEOUT_S)
        backends[name] = KafkaBackend(
            name,
            "testcontainers",
            bootstrap,
            cluster_id,
            broker=_ContainerBroker(container, bootstrap),
            _stop=[container.stop],
        )
    return backends


@dataclass
class _ContainerBroker:
    container: object
    bootstrap: str

    def kill(self) -> None:
        self.container.get_wrapped_container().kill()  # type: ignore[attr-defined]

    def restart(self) -> None:
        # The container keeps its writable layer and its fixed host port across stop/start,
        # so this is a restart on the same data at the same address.
        self.container.get_wrapped_container().start()  # type: ignore[attr-defined]
        wait_until_ready(self.bootstrap, _READY_TIMEOUT_S)

    def pause(self) -> None:
        self.container.get_wrapped_container().pause()  # type: ignore[attr-defined]

    def resume(self) -> None:
        self.container.get_wrapped_container().unpause()  # type: ignore[attr-defined]

    def is_running(self) -> bool:
        wrapped = self.container.get_wrapped_container()  # type: ignore[attr-defined]
        wrapped.reload()
        return wrapped.status == "running"

    def log_tail(self, lines: int = 40) -> str:
        stdout, stderr = self.container.get_logs()  # type: ignore[attr-defined]
        text = (stdout + stderr).decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def stop_all(backends: dict[str, KafkaBackend]) -> None:
    for backend in backends.values():
        with contextlib.suppress(Exception):
            backend.stop()


def timed_start(kind: str, base_dir: Path) -> tuple[dict[str, KafkaBackend], float]:
    started = time.monotonic()
    backends = start_backends(kind, base_dir)
    return backends, time.monotonic() - started
