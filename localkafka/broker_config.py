"""The server.properties of each JVM of a local cluster: a KRaft controller, a ZooKeeper server,
a broker, or a combined node of several, with the secured listeners where the cluster has them.

Why the layouts are as they are is in localkafka/cluster.py's docstring.
"""

from __future__ import annotations

from localkafka.layout import BROKER_NODE_ID, CONTROLLER_NODE_ID, LOOPBACK, ClusterLayout
from localkafka.replicas import INTERNAL_TOPIC_PARTITIONS
from localkafka.security import ADMIN_USER, SCRAM_MECHANISM

_HEARTBEAT_MS = 1000
# The controller fences a broker that has not heartbeated for this long. Shorter than Kafka's
# 9 s default so a crash-and-restart takes seconds, long enough that a busy 2-core machine does
# not fence a live broker.
SESSION_TIMEOUT_MS = 6000
# A cluster of several nodes replicates every topic made without a replication factor, as
# production does: a write needs two replicas in sync.
REPLICATION_FACTOR = 3
MIN_IN_SYNC_REPLICAS = 2


def controller_properties(layout: ClusterLayout) -> dict[str, str]:
    assert layout.controller is not None  # only the one-broker layout has one
    if layout.zookeeper:
        return _zookeeper_properties(layout)
    return {
        "process.roles": "controller",
        "node.id": str(CONTROLLER_NODE_ID),
        "controller.quorum.voters": _voters(layout),
        "listeners": f"CONTROLLER://127.0.0.1:{layout.info.controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "log.dirs": str(layout.controller.data_dir),
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        # The controller authorizes the requests brokers forward to it (CreateTopics, ...).
        **(_authorizer_properties(layout) if layout.secure else {}),
    }


def _zookeeper_properties(layout: ClusterLayout) -> dict[str, str]:
    assert layout.controller is not None
    return {
        "dataDir": str(layout.controller.data_dir),
        "clientPort": str(layout.info.controller_port),
        "clientPortAddress": LOOPBACK,
        "maxClientCnxns": "0",
        # Its AdminServer would take port 8080 of the machine.
        "admin.enableServer": "false",
        # Sessions may last 2 to 20 ticks: the broker's 6 s is within.
        "tickTime": "1000",
    }


def _authorizer_properties(layout: ClusterLayout) -> dict[str, str]:
    return {
        "authorizer.class.name": (
            "kafka.security.authorizer.AclAuthorizer"  # ACLs kept in ZooKeeper
            if layout.zookeeper
            else "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        ),
        # ANONYMOUS: the loopback PLAINTEXT and CONTROLLER listeners, of the tools and of the
        # broker itlayout.
        "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
    }


def _security_properties(layout: ClusterLayout) -> dict[str, str]:
    credentials = layout.credentials
    return {
        **_authorizer_properties(layout),
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(credentials.broker_keystore_path),
        "ssl.keystore.password": credentials.broker_keystore_password,
        "ssl.key.password": credentials.broker_keystore_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(credentials.ca_path),
        "listener.name.ssl.ssl.client.auth": "required",
        # A client certificate's principal is its CN: User:replicator, as on SASL_SSL.
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*).*$/$1/,DEFAULT",
    }


def node_properties(layout: ClusterLayout, node_id: int) -> dict[str, str]:
    if not layout.info.node_ports:
        return _broker_properties(layout)
    port, controller_port = layout.info.node_ports[node_id - 1]
    listeners, advertised, protocols = _client_listeners(layout, node_id, port)
    replicated = str(REPLICATION_FACTOR)
    in_sync = str(MIN_IN_SYNC_REPLICAS)
    return {
        **_membership_properties(layout, node_id, "broker,controller"),
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{controller_port}"]),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(layout.nodes[node_id].data_dir),
        # As production: every topic replicated, a write acknowledged by two replicas, and
        # never a leader that lost acknowledged records.
        "default.replication.factor": replicated,
        "min.insync.replicas": in_sync,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": replicated,
        "transaction.state.log.replication.factor": replicated,
        "transaction.state.log.min.isr": in_sync,
        "share.coordinator.state.topic.replication.factor": replicated,
        "share.coordinator.state.topic.min.isr": in_sync,
        **_shared_broker_properties(layout),
    }


def _shared_broker_properties(layout: ClusterLayout) -> dict[str, str]:
    """What every broker of ours has, of one node or of several."""
    return {
        "inter.broker.listener.name": "PLAINTEXT",
        # Fewer internal partitions than the default 50: they are created at start-up and
        # loaded after every restart, which is what readiness waits for.
        "offsets.topic.num.partitions": str(INTERNAL_TOPIC_PARTITIONS),
        "transaction.state.log.num.partitions": str(INTERNAL_TOPIC_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
        # The log cleaner looks for work every second (default 15 s), so compaction on a
        # topic with a short segment.ms is observable within seconds in tests and demos.
        "log.cleaner.backoff.ms": "1000",
        # Kafka's default, and the official image's: brokers create a topic that a metadata
        # request names. The product must be right where they do (its clients never ask them
        # to: runtime/cluster_settings.py), and with it off here, tests hid that stage 1's own check
        # for a destination topic created it with one partition.
        "auto.create.topics.enable": "true",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }


def _membership_properties(layout: ClusterLayout, node_id: int, roles: str) -> dict[str, str]:
    """Who a broker is, how it finds its controllers and how soon they fence it when it
    dies: a KRaft session, or a ZooKeeper one (the ephemeral registration expires alike)."""
    if layout.zookeeper:
        return {
            "broker.id": str(node_id),
            "zookeeper.connect": f"{LOOPBACK}:{layout.info.controller_port}",
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        }
    return {
        "process.roles": roles,
        "node.id": str(node_id),
        "controller.quorum.voters": _voters(layout),
        "controller.listener.names": "CONTROLLER",
        "broker.heartbeat.interval.ms": str(_HEARTBEAT_MS),
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    }


def _client_listeners(
    layout: ClusterLayout, node_id: int, port: int
) -> tuple[list[str], list[str], list[str]]:
    """A node's client listeners, what it advertises for each, and their protocols: the
    PLAINTEXT one and one per proxied listener (advertised at its proxy)."""
    listeners = [f"PLAINTEXT://127.0.0.1:{port}"]
    advertised = list(listeners)
    for listener in layout.info.proxied_listeners:
        listen, via_proxy = layout.proxied_endpoints(listener)[node_id]
        listeners.append(f"{listener}://127.0.0.1:{listen}")
        advertised.append(f"{listener}://127.0.0.1:{via_proxy}")
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    protocols += [f"{listener}:PLAINTEXT" for listener in layout.info.proxied_listeners]
    return listeners, advertised, protocols


def _broker_properties(layout: ClusterLayout) -> dict[str, str]:
    listeners, advertised, protocols = _client_listeners(layout, BROKER_NODE_ID, layout.info.port)
    for protocol, port in layout.info.secure_ports.items():
        listeners.append(f"{protocol}://127.0.0.1:{port}")
        advertised.append(f"{protocol}://127.0.0.1:{port}")
        protocols.append(f"{protocol}:{protocol}")
    return {
        **_membership_properties(layout, BROKER_NODE_ID, "broker"),
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(layout.broker.data_dir),
        # One broker: every internal topic at replication factor 1.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        **_shared_broker_properties(layout),
        **(_security_properties(layout) if layout.secure else {}),
    }


def _voters(layout: ClusterLayout) -> str:
    if layout.info.node_ports:
        return ",".join(
            f"{node_id}@127.0.0.1:{pair[1]}"
            for node_id, pair in enumerate(layout.info.node_ports, start=1)
        )
    return f"{CONTROLLER_NODE_ID}@127.0.0.1:{layout.info.controller_port}"
