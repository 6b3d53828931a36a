"""What a local cluster is, as written in its directory: its ports and listeners (ClusterInfo,
chosen once by `plan_info`), its JVMs, and what a client needs to reach it (`ClusterLayout`).

Process control, and why the layouts are as they are, is in localkafka/cluster.py.
"""

from __future__ import annotations

import re
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localkafka.errors import ClusterStateError
from localkafka.node import ZOOKEEPER_MAIN, KafkaNode
from localkafka.ports import CLUSTER_PORTS, free_ports
from localkafka.security import SCRAM_MECHANISM, USERS, Credentials

LOOPBACK = "127.0.0.1"
_OWN_LISTENERS = frozenset({"PLAINTEXT", "CONTROLLER", "SASL_SSL", "SSL"})
# The secured listeners of a cluster made with secure=True, each named after its protocol.
SECURE_PROTOCOLS = ("SASL_SSL", "SSL")
CONTROLLER_NODE_ID = 1
BROKER_NODE_ID = 2
# Six JVMs (two clusters of three nodes) share two cores with the roles under test.
_NODE_HEAP = "512m"
# Kafka versions before this one run on ZooKeeper here (localkafka/cluster.py's docstring).
ZOOKEEPER_BEFORE = (3, 5)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    name: str
    cluster_id: str
    port: int
    controller_port: int
    kafka_version: str
    # Listeners for clients that reach the broker through a proxy (exactly chaos's network
    # faults): name -> [port the broker listens on, port it advertises = where the proxy listens],
    # one such pair for each node, node 1 first.
    proxied_listeners: dict[str, list[int]] = field(default_factory=dict)
    # A secured cluster (create(secure=True)): protocol -> port, with ACLs enforced for them.
    secure_ports: dict[str, int] = field(default_factory=dict)
    # A cluster of several combined nodes (create(nodes=3)): [client port, controller port] of
    # node 1, 2, ...; empty for the one-broker layout, whose ports are the two above.
    node_ports: list[list[int]] = field(default_factory=list)


class ClusterLayout:
    """A local cluster's directory, ports and JVMs, and its addresses for clients;
    `localkafka.cluster.LocalCluster` adds the process control."""

    def __init__(self, directory: Path, info: ClusterInfo) -> None:
        self.directory = directory
        self.info = info
        self.controller: KafkaNode | None
        # Node id -> the JVM that serves clients as that broker.
        self.nodes: dict[int, KafkaNode]
        if info.node_ports:
            self.controller = None
            self.nodes = {
                node_id: KafkaNode(directory / f"node-{node_id}", f"node {node_id}", _NODE_HEAP)
                for node_id in range(1, len(info.node_ports) + 1)
            }
        elif self.zookeeper:
            self.controller = KafkaNode(
                directory / "zookeeper", "zookeeper", heap="128m", main_class=ZOOKEEPER_MAIN
            )
            self.nodes = {BROKER_NODE_ID: KafkaNode(directory / "broker", "broker", heap="768m")}
        else:
            self.controller = KafkaNode(directory / "controller", "controller", heap="256m")
            self.nodes = {BROKER_NODE_ID: KafkaNode(directory / "broker", "broker", heap="768m")}

    # -- what clients need ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def cluster_id(self) -> str:
        return self.info.cluster_id

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address: a client that knows one dead node still gets in."""
        return ",".join(f"127.0.0.1:{port}" for port in self._client_ports.values())

    def node_bootstrap(self, node_id: int) -> str:
        """The client address of node ``node_id`` alone."""
        return f"127.0.0.1:{self._client_ports[self._known(node_id)]}"

    @property
    def broker(self) -> KafkaNode:
        """The broker of a one-broker cluster; a cluster of several nodes names them
        (``nodes``)."""
        if self.info.node_ports:
            raise ClusterStateError(f"cluster {self.name!r} has {len(self.nodes)} nodes")
        return self.nodes[BROKER_NODE_ID]

    @property
    def ports(self) -> list[int]:
        """Every port this cluster binds or promises (to its proxies)."""
        proxied = [port for pair in self.info.proxied_listeners.values() for port in pair]
        secured = list(self.info.secure_ports.values())
        nodes = [port for pair in self.info.node_ports[1:] for port in pair]
        return [self.info.port, self.info.controller_port, *nodes, *secured, *proxied]

    @property
    def _client_ports(self) -> dict[int, int]:
        if not self.info.node_ports:
            return {BROKER_NODE_ID: self.info.port}
        return {i: pair[0] for i, pair in enumerate(self.info.node_ports, start=1)}

    @property
    def _processes(self) -> list[KafkaNode]:
        """Every JVM of this cluster, a separate controller first (brokers need it)."""
        return ([self.controller] if self.controller else []) + list(self.nodes.values())

    def _known(self, node_id: int) -> int:
        if node_id not in self.nodes:
            raise ClusterStateError(
                f"cluster {self.name!r} has no node {node_id} (nodes: {sorted(self.nodes)})"
            )
        return node_id

    @property
    def zookeeper(self) -> bool:
        """A broker beside a ZooKeeper server, as Kafka before 3.5 ran (localkafka/cluster.py's
        docstring)."""
        return uses_zookeeper(self.info.kafka_version)

    @property
    def secure(self) -> bool:
        return bool(self.info.secure_ports)

    @property
    def credentials(self) -> Credentials:
        return Credentials(self.directory / "security")

    def secure_bootstrap(self, protocol: str) -> str:
        """The address of the secured listener of ``protocol`` (SASL_SSL or SSL)."""
        try:
            return f"127.0.0.1:{self.info.secure_ports[protocol]}"
        except KeyError:
            raise ClusterStateError(
                f"cluster {self.name!r} has no {protocol} listener (made without secure=True?)"
            ) from None

    def client_properties(self, protocol: str, user: str) -> dict[str, str]:
        """librdkafka properties (bootstrap.servers included) that connect as ``user`` through
        the secured listener of ``protocol``: SCRAM on SASL_SSL, its certificate on SSL."""
        if user not in USERS:
            raise ClusterStateError(f"cluster {self.name!r} has no user {user!r}")
        credentials = self.credentials
        properties = {
            "bootstrap.servers": self.secure_bootstrap(protocol),
            "security.protocol": protocol,
            "ssl.ca.location": str(credentials.ca_path),
        }
        if protocol == "SASL_SSL":
            properties |= {
                "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": user,
                "sasl.password": credentials.password(user),
            }
        else:
            properties |= {
                "ssl.certificate.location": str(credentials.certificate_path(user)),
                "ssl.key.location": str(credentials.key_path(user)),
            }
        return properties

    def proxied_endpoints(self, listener: str) -> dict[int, tuple[int, int]]:
        """Node id -> (the port that node listens on for ``listener``, the port a proxy must
        listen on and forward to it)."""
        try:
            ports = self.info.proxied_listeners[listener]
        except KeyError:
            raise ClusterStateError(f"cluster {self.name!r} has no listener {listener!r}") from None
        pairs = [(ports[i], ports[i + 1]) for i in range(0, len(ports), 2)]
        return dict(zip(self.nodes, pairs, strict=True))

    def proxied_endpoint(self, listener: str) -> tuple[int, int]:
        """(the port the broker listens on for ``listener``, the port a proxy must listen on
        and forward to it): of a one-broker cluster, or node 1 of several."""
        return next(iter(self.proxied_endpoints(listener).values()))

    @property
    def log_path(self) -> Path:
        return next(iter(self.nodes.values())).log_path

    def log_tail(self, lines: int = 40) -> str:
        tails = [node.log_tail(lines) for node in self.nodes.values()]
        if self.controller is not None:
            tails.append(self.controller.log_tail(lines // 2))
        return "\n".join(tails)

    def is_running(self) -> bool:
        return all(process.is_running() for process in self._processes)


def plan_info(
    name: str,
    kafka_version: str,
    *,
    proxied: Sequence[str],
    reserved_ports: Collection[int],
    secure: bool,
    nodes: int,
) -> ClusterInfo:
    """The ports and listeners of a new cluster (`LocalCluster.create`), after refusing the
    layouts it cannot make."""
    for listener in proxied:
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", listener) or listener in _OWN_LISTENERS:
            raise ClusterStateError(f"bad proxied listener name {listener!r}")
    if nodes < 1 or (nodes > 1 and secure):
        raise ClusterStateError(
            f"cluster {name!r}: {nodes} nodes"
            + (" with secured listeners (one node only)" if nodes > 1 else "")
        )
    if nodes > 1 and uses_zookeeper(kafka_version):
        raise ClusterStateError(
            f"cluster {name!r}: {nodes} nodes on Kafka {kafka_version}: clusters of "
            f"several nodes are KRaft here, Kafka {_dotted(ZOOKEEPER_BEFORE)} or later"
        )
    secured = SECURE_PROTOCOLS if secure else ()
    extra_nodes = 2 * (nodes - 1) if nodes > 1 else 0
    ports = free_ports(
        2 + extra_nodes + len(secured) + 2 * nodes * len(proxied),
        CLUSTER_PORTS,
        host=LOOPBACK,
        exclude=reserved_ports,
    )
    port, controller_port, *rest = ports
    node_ports = [[port, controller_port]] if nodes > 1 else []
    node_ports += [rest[i : i + 2] for i in range(0, extra_nodes, 2)]
    rest = rest[extra_nodes:]
    secure_ports = dict(zip(secured, rest[: len(secured)], strict=True))
    pairs = rest[len(secured) :]
    info = ClusterInfo(
        name=name,
        # ZooKeeper chooses its cluster's id; read at the first start (wait_ready).
        cluster_id="" if uses_zookeeper(kafka_version) else _new_cluster_id(),
        port=port,
        controller_port=controller_port,
        kafka_version=kafka_version,
        proxied_listeners={
            listener: pairs[2 * nodes * i : 2 * nodes * (i + 1)]
            for i, listener in enumerate(proxied)
        },
        secure_ports=secure_ports,
        node_ports=node_ports,
    )
    return info


def _new_cluster_id() -> str:
    # Kafka's own Uuid.randomUuid() never starts with "-" (command-line parsers take such an
    # id for an option); do the same.
    while True:
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def uses_zookeeper(kafka_version: str) -> bool:
    """Whether localkafka runs this Kafka version on ZooKeeper (before 3.5; localkafka/cluster.py's
    docstring)."""
    try:
        major_minor = tuple(int(part) for part in kafka_version.split(".")[:2])
    except ValueError:
        raise ClusterStateError(
            f"Kafka version {kafka_version!r}: expected digits like 3.9.1"
        ) from None
    return major_minor < ZOOKEEPER_BEFORE


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
