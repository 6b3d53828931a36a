"""One KRaft cluster on this machine: a controller and a broker, each its own local JVM; or, made
with ``nodes=3``, three combined broker+controller nodes that replicate as production does.

Everything a cluster is lives in one directory, so any process, also one started from another
shell, can open it and find the same cluster:

    <dir>/cluster.json    name, cluster id, ports, Kafka version (written once, at create)
    <dir>/controller/     the KRaft controller (node 1): config, data, controller.log, pid
    <dir>/broker/         the broker (node 2): config, data, broker.log, pid
    <dir>/node-N/         or, in a cluster of several nodes, node N (1, 2, 3): node N.log, ...

Why two JVMs and not one combined node: after a SIGKILL of a combined node, the restarted
process serves partitions from its stale metadata while the controller (restarted with it)
still holds the dead incarnation's registration; when that expires a few seconds later the
broker is fenced, every partition loses its leader, and the transaction coordinator, which was
just completing the commits that were in flight at the kill, drops their markers ("partitions
are likely deleted already and hence can be skipped"). The result is a hanging transaction and
a last stable offset stuck forever: read_committed consumers see nothing. Seen here on Kafka
4.3.1 in one of four kill-and-restart runs. With a controller that survives the broker's crash,
the dead broker is fenced before its successor starts, as in a real cluster.

A cluster of several nodes is what the product meets in production: every topic at replication
factor 3 unless made otherwise, ``min.insync.replicas`` 2, the internal topics replicated alike
and unclean leader election off. A node dies, freezes and comes back on its own while the
others lead; the quorum of three controllers outlives any one of them, so the dead node is
fenced by the survivors, and its successor still waits that out as above.

An older Kafka (before 3.5, ``ZOOKEEPER_BEFORE``) runs as the clusters users migrate from do:
a broker beside a ZooKeeper server (``<dir>/zookeeper/``, in the controller's place and role).
KRaft before 3.5 could not keep SCRAM credentials and was not what production ran. ZooKeeper
chooses the cluster id: it is read at the first start and written to cluster.json then.

Ports are fixed at create time and reused on every restart: clients (and the crash tests) keep
the bootstrap address across a kill and a restart.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from localkafka.errors import ClusterStartError, ClusterStateError
from localkafka.install import KafkaDistribution, ensure_kafka
from localkafka.node import ZOOKEEPER_MAIN, KafkaNode
from localkafka.ports import CLUSTER_PORTS, free_ports, port_is_free
from localkafka.readiness import wait_until_ready
from localkafka.replicas import INTERNAL_TOPIC_PARTITIONS, await_in_sync
from localkafka.security import ADMIN_USER, SCRAM_MECHANISM, USERS, Credentials, make_credentials
from runtime.kafka_errors import kafka_error_of

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
_LOOPBACK = "127.0.0.1"
_OWN_LISTENERS = frozenset({"PLAINTEXT", "CONTROLLER", "SASL_SSL", "SSL"})
# The secured listeners of a cluster made with secure=True, each named after its protocol.
SECURE_PROTOCOLS = ("SASL_SSL", "SSL")
_CONTROLLER_NODE_ID = 1
_BROKER_NODE_ID = 2
_HEARTBEAT_MS = 1000
# The controller fences a broker that has not heartbeated for this long. Shorter than Kafka's
# 9 s default so a crash-and-restart takes seconds, long enough that a busy 2-core machine does
# not fence a live broker.
_SESSION_TIMEOUT_MS = 6000
# A restarted broker waits until its dead predecessor is surely fenced (see the module docstring).
_FENCE_WAIT_S = _SESSION_TIMEOUT_MS / 1000 + 1.0
_SCRAM_ITERATIONS = 8192  # Kafka's minimum for SCRAM-SHA-512 is 4096
# Six JVMs (two clusters of three nodes) share two cores with the roles under test.
_NODE_HEAP = "512m"
# Kafka versions before this one run on ZooKeeper here (module docstring).
ZOOKEEPER_BEFORE = (3, 5)
# A cluster of several nodes replicates every topic made without a replication factor, as
# production does: a write needs two replicas in sync.
REPLICATION_FACTOR = 3
MIN_IN_SYNC_REPLICAS = 2


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


class LocalCluster:
    """A local KRaft cluster rooted in one directory: create once, then start, kill, restart."""

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
            self.nodes = {_BROKER_NODE_ID: KafkaNode(directory / "broker", "broker", heap="768m")}
        else:
            self.controller = KafkaNode(directory / "controller", "controller", heap="256m")
            self.nodes = {_BROKER_NODE_ID: KafkaNode(directory / "broker", "broker", heap="768m")}

    # -- lifecycle of the directory -------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        name: str,
        distribution: KafkaDistribution | None = None,
        *,
        proxied: Sequence[str] = (),
        reserved_ports: Collection[int] = (),
        secure: bool = False,
        nodes: int = 1,
    ) -> LocalCluster:
        """Write the configuration and format the storage of a new cluster in `directory`.

        ``nodes`` > 1 makes that many combined broker+controller nodes, replicating (module
        docstring), each with its own proxied listeners; secured listeners are for the
        one-broker layout only.

        Each name in ``proxied`` adds a listener whose advertised port is one a proxy is to
        listen on (`proxied_endpoint`): a client bootstrapped through that proxy is told to
        come back through it, so every byte it exchanges with the broker passes the proxy.
        ``reserved_ports`` are promised to other clusters not started yet: never taken here.

        ``secure`` adds a SASL_SSL listener (SCRAM-SHA-512) and an SSL listener that requires a
        client certificate, with credentials made for this cluster (localkafka/security.py),
        and enforces ACLs on them. The PLAINTEXT listener stays, on loopback, for the tools: its
        principal (ANONYMOUS) is a super-user, as is ``admin``.
        """
        distribution = distribution or ensure_kafka()
        if (directory / "cluster.json").exists():
            raise ClusterStateError(f"{directory} already holds a cluster")
        for listener in proxied:
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", listener) or listener in _OWN_LISTENERS:
                raise ClusterStateError(f"bad proxied listener name {listener!r}")
        if nodes < 1 or (nodes > 1 and secure):
            raise ClusterStateError(
                f"cluster {name!r}: {nodes} nodes"
                + (" with secured listeners (one node only)" if nodes > 1 else "")
            )
        if nodes > 1 and uses_zookeeper(distribution.version):
            raise ClusterStateError(
                f"cluster {name!r}: {nodes} nodes on Kafka {distribution.version}: clusters of "
                f"several nodes are KRaft here, Kafka {_dotted(ZOOKEEPER_BEFORE)} or later"
            )
        secured = SECURE_PROTOCOLS if secure else ()
        extra_nodes = 2 * (nodes - 1) if nodes > 1 else 0
        ports = free_ports(
            2 + extra_nodes + len(secured) + 2 * nodes * len(proxied),
            CLUSTER_PORTS,
            host=_LOOPBACK,
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
            cluster_id="" if uses_zookeeper(distribution.version) else _new_cluster_id(),
            port=port,
            controller_port=controller_port,
            kafka_version=distribution.version,
            proxied_listeners={
                listener: pairs[2 * nodes * i : 2 * nodes * (i + 1)]
                for i, listener in enumerate(proxied)
            },
            secure_ports=secure_ports,
            node_ports=node_ports,
        )
        cluster = cls(directory, info)
        try:
            if secure:
                make_credentials(cluster.credentials.directory)
            if cluster.controller is not None:
                cluster.controller.write_config(cluster._controller_properties())
            for node_id, node in cluster.nodes.items():
                node.write_config(cluster._node_properties(node_id))
            for node in [] if cluster.zookeeper else cluster._processes:
                node.format(distribution, info.cluster_id)
        except ClusterStartError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            raise ClusterStartError(f"cluster {name!r}: {exc}") from exc
        except BaseException:
            # A half-made directory would be taken for a cluster by the next `up`.
            shutil.rmtree(directory, ignore_errors=True)
            raise
        (directory / "cluster.json").write_text(json.dumps(asdict(info), indent=2) + "\n")
        return cluster

    @classmethod
    def open(cls, directory: Path) -> LocalCluster:
        try:
            raw = json.loads((directory / "cluster.json").read_text())
        except FileNotFoundError:
            raise ClusterStateError(f"no cluster in {directory} (cluster.json missing)") from None
        return cls(directory, ClusterInfo(**raw))

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
        return self.nodes[_BROKER_NODE_ID]

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
            return {_BROKER_NODE_ID: self.info.port}
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
        """A broker beside a ZooKeeper server, as Kafka before 3.5 ran (module docstring)."""
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

    def is_running(self) -> bool:
        return all(process.is_running() for process in self._processes)

    # -- process control ------------------------------------------------------------------------

    def start(
        self, ready_timeout_s: float = READY_TIMEOUT_S, *, tie_to_parent: bool = False
    ) -> None:
        """Start what is not running on the existing data and wait until the cluster is ready."""
        self.launch(tie_to_parent=tie_to_parent)
        self.wait_ready(ready_timeout_s)

    def launch(self, *, tie_to_parent: bool = False) -> None:
        """Start the controller and the broker, whichever is not running, without waiting.

        `tie_to_parent`: the JVMs die with the calling process (tests); `exactly kafka up`
        passes False, as its clusters must outlive the command.
        """
        distribution = ensure_kafka(self.info.kafka_version)
        controller_started_at = 0.0
        if self.controller is not None and not self.controller.is_running():
            self._require_free_port(self.info.controller_port)
            self.controller.launch(distribution, tie_to_parent=tie_to_parent)
            controller_started_at = time.time()
        elif self.controller is None and not any(n.is_running() for n in self.nodes.values()):
            # The whole quorum starts again with these nodes: as with a separate controller,
            # the dead brokers' sessions are counted from now.
            controller_started_at = time.time()
        launched = []
        try:
            for node_id, node in self.nodes.items():
                if not node.is_running():
                    self._launch_node(distribution, node_id, controller_started_at, tie_to_parent)
                    launched.append(node)
        except BaseException:
            for process in [*launched, *([self.controller] if controller_started_at else [])]:
                if process is not None:
                    process.stop(STOP_TIMEOUT_S)
            raise

    def _launch_node(
        self,
        distribution: KafkaDistribution,
        node_id: int,
        controller_started_at: float,
        tie_to_parent: bool,
    ) -> None:
        node = self.nodes[node_id]
        self._await_predecessor_fenced(node, controller_started_at)
        for port in self._node_listen_ports(node_id):
            self._require_free_port(port)
        node.launch(distribution, tie_to_parent=tie_to_parent)

    def _node_listen_ports(self, node_id: int) -> list[int]:
        if self.info.node_ports:
            return list(self.info.node_ports[node_id - 1])
        return [self.info.port]

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until metadata answers and transactions commit; kill the JVMs if it never does."""
        try:
            cluster_id = wait_until_ready(self.bootstrap_servers, timeout_s, self.is_running)
        except ClusterStartError as exc:
            tails = self.log_tail()
            self.abort()
            raise ClusterStartError(f"cluster {self.name!r}: {exc}\n{tails}") from exc
        if not self.cluster_id:
            self._adopt_cluster_id(cluster_id)
        elif cluster_id != self.cluster_id:
            raise ClusterStateError(
                f"cluster {self.name!r}: {self.bootstrap_servers} answers as cluster {cluster_id}, "
                f"expected {self.cluster_id} (another broker on that port?)"
            )
        if self.secure:
            self._ensure_scram_users(timeout_s)
        if self.info.node_ports:
            await_in_sync(self.bootstrap_servers, sorted(self.nodes), timeout_s)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM each JVM (then SIGKILL after `timeout_s`): the brokers first, together, for
        their controlled shutdown needs the controllers."""
        _stop_together(list(self.nodes.values()), timeout_s)
        if self.controller is not None:
            self.controller.stop(timeout_s)

    def kill(self) -> None:
        """SIGKILL every broker, as a crash would; a separate controller lives on and fences
        it."""
        for node in self.nodes.values():
            node.kill()

    def pause(self) -> None:
        """SIGSTOP every broker: alive but silent, as under a long GC pause or a network cut."""
        for node in self.nodes.values():
            node.signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the brokers after `pause`."""
        for node in self.nodes.values():
            node.signal(signal.SIGCONT)

    def abort(self) -> None:
        """SIGKILL every JVM: the clean-up after a start that failed or was interrupted."""
        for process in self._processes:
            process.kill()

    def restart(
        self, ready_timeout_s: float = READY_TIMEOUT_S, *, tie_to_parent: bool = False
    ) -> None:
        """Start the brokers again on the same data (after a kill, or stopping them first)."""
        _stop_together(list(self.nodes.values()), STOP_TIMEOUT_S)
        self.start(ready_timeout_s, tie_to_parent=tie_to_parent)

    # -- one node of several ---------------------------------------------------------------------

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node, as a crash of its machine would; the others fence it and lead."""
        self.nodes[self._known(node_id)].kill()

    def stop_node(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM one node: a controlled shutdown that hands its leadership over first."""
        self.nodes[self._known(node_id)].stop(timeout_s)

    def pause_node(self, node_id: int) -> None:
        """SIGSTOP one node: alive but silent until `resume_node`."""
        self.nodes[self._known(node_id)].signal(signal.SIGSTOP)

    def resume_node(self, node_id: int) -> None:
        self.nodes[self._known(node_id)].signal(signal.SIGCONT)

    def launch_node(self, node_id: int, *, tie_to_parent: bool = False) -> None:
        """Start one node again on its data if it is not running, without waiting for it (past
        its dead predecessor's session, which the launch waits out)."""
        if not self.nodes[self._known(node_id)].is_running():
            self._launch_node(
                ensure_kafka(self.info.kafka_version), node_id, 0.0, tie_to_parent=tie_to_parent
            )

    def start_node(
        self,
        node_id: int,
        ready_timeout_s: float = READY_TIMEOUT_S,
        *,
        tie_to_parent: bool = False,
        in_sync: bool = True,
    ) -> None:
        """Start one node again on its data and wait until it serves (``await_serving``), as
        an operator waits before the next node."""
        self.launch_node(node_id, tie_to_parent=tie_to_parent)
        self.await_serving([node_id], ready_timeout_s, in_sync=in_sync)

    def restart_node(
        self,
        node_id: int,
        *,
        crash: bool = False,
        down_s: float = 0.0,
        ready_timeout_s: float = READY_TIMEOUT_S,
        tie_to_parent: bool = False,
    ) -> None:
        """One step of a rolling restart: stop one node with a controlled shutdown (SIGTERM,
        its leadership handed over first) or, with ``crash``, SIGKILL it and leave it down for
        ``down_s`` as a crashed machine; then start it again and wait until it serves
        (``start_node``)."""
        if crash:
            self.kill_node(node_id)
            time.sleep(down_s)
        else:
            self.stop_node(node_id)
        self.start_node(node_id, ready_timeout_s, tie_to_parent=tie_to_parent)

    def await_serving(
        self, node_ids: Sequence[int], timeout_s: float, *, in_sync: bool = True
    ) -> None:
        """Wait until each of ``node_ids`` answers on its own listener and, with ``in_sync``,
        every node is registered and every replica caught up (without it, other nodes may
        still be down).

        Each node is asked itself first: the others' metadata still lists a node SIGKILLed
        until its session expires, counted again from a controller election, and its replicas
        in sync until then. Asked only of them, a node killed while it was the active
        controller looked whole before its JVM had started, and a rolling restart killed the
        next node with two of three controllers down (the quorum lost, every client stalled)."""
        for node_id in node_ids:
            await_in_sync(self.node_bootstrap(node_id), [node_id], timeout_s, replicas=False)
        if in_sync:
            await_in_sync(self.bootstrap_servers, sorted(self.nodes), timeout_s)

    def destroy(self) -> None:
        """Stop both JVMs and delete the directory with its data and logs."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        tails = [node.log_tail(lines) for node in self.nodes.values()]
        if self.controller is not None:
            tails.append(self.controller.log_tail(lines // 2))
        return "\n".join(tails)

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _await_predecessor_fenced(node: KafkaNode, controller_started_at: float) -> None:
        # A broker that died uncleanly stays registered with the controller until its session
        # expires, counted from its death or from the controller's own (re)start, whichever is
        # later. A successor started before that serves partitions on stale leadership and can
        # strand transactions (module docstring): wait the session out.
        ended_at = node.ended_uncleanly_at()
        if ended_at is None:
            return
        fenced_at = max(ended_at, controller_started_at) + _FENCE_WAIT_S
        time.sleep(max(0.0, fenced_at - time.time()))
        node.forget_unclean_end()

    def _adopt_cluster_id(self, cluster_id: str) -> None:
        # The first start of a ZooKeeper cluster: from now on a broker answering with another id
        # on these ports is someone else's, as for KRaft.
        self.info = replace(self.info, cluster_id=cluster_id)
        (self.directory / "cluster.json").write_text(json.dumps(asdict(self.info), indent=2) + "\n")

    def _ensure_scram_users(self, timeout_s: float) -> None:
        # SCRAM credentials live in the cluster's metadata: set (again) on every start, through
        # the PLAINTEXT listener whose principal is a super-user. Idempotent.
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        credentials = self.credentials
        upserts = [
            UserScramCredentialUpsertion(
                user,
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, _SCRAM_ITERATIONS),
                credentials.password(user).encode(),
            )
            for user in USERS
        ]
        for user, future in admin.alter_user_scram_credentials(upserts).items():
            try:
                future.result(timeout=timeout_s)
            except KafkaException as exc:
                unsupported = kafka_error_of(exc).code() == KafkaError._UNSUPPORTED_FEATURE
                # SCRAM credentials are set through the admin API (KIP-554) from Kafka 2.7 on
                # ZooKeeper; KRaft keeps them from 3.5, which is why older versions run on
                # ZooKeeper here.
                hint = (
                    f" (Kafka {self.info.kafka_version} cannot set SCRAM credentials through "
                    "the admin API; 2.7 or later can)"
                    if unsupported
                    else ""
                )
                raise ClusterStartError(
                    f"cluster {self.name!r}: SCRAM credentials of {user!r}: {exc}{hint}"
                ) from exc

    def _require_free_port(self, port: int) -> None:
        if not port_is_free(port, _LOOPBACK):
            raise ClusterStartError(
                f"cluster {self.name!r}: port {port} is in use by another process"
            )

    def _controller_properties(self) -> dict[str, str]:
        assert self.controller is not None  # only the one-broker layout has one
        if self.zookeeper:
            return self._zookeeper_properties()
        return {
            "process.roles": "controller",
            "node.id": str(_CONTROLLER_NODE_ID),
            "controller.quorum.voters": self._voters,
            "listeners": f"CONTROLLER://127.0.0.1:{self.info.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.controller.data_dir),
            "broker.session.timeout.ms": str(_SESSION_TIMEOUT_MS),
            # The controller authorizes the requests brokers forward to it (CreateTopics, ...).
            **(self._authorizer_properties() if self.secure else {}),
        }

    def _zookeeper_properties(self) -> dict[str, str]:
        assert self.controller is not None
        return {
            "dataDir": str(self.controller.data_dir),
            "clientPort": str(self.info.controller_port),
            "clientPortAddress": _LOOPBACK,
            "maxClientCnxns": "0",
            # Its AdminServer would take port 8080 of the machine.
            "admin.enableServer": "false",
            # Sessions may last 2 to 20 ticks: the broker's 6 s is within.
            "tickTime": "1000",
        }

    def _authorizer_properties(self) -> dict[str, str]:
        return {
            "authorizer.class.name": (
                "kafka.security.authorizer.AclAuthorizer"  # ACLs kept in ZooKeeper
                if self.zookeeper
                else "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            ),
            # ANONYMOUS: the loopback PLAINTEXT and CONTROLLER listeners, of the tools and of the
            # broker itself.
            "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
        }

    def _security_properties(self) -> dict[str, str]:
        credentials = self.credentials
        return {
            **self._authorizer_properties(),
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

    def _node_properties(self, node_id: int) -> dict[str, str]:
        if not self.info.node_ports:
            return self._broker_properties()
        port, controller_port = self.info.node_ports[node_id - 1]
        listeners, advertised, protocols = self._client_listeners(node_id, port)
        replicated = str(REPLICATION_FACTOR)
        in_sync = str(MIN_IN_SYNC_REPLICAS)
        return {
            **self._membership_properties(node_id, "broker,controller"),
            "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{controller_port}"]),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self.nodes[node_id].data_dir),
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
            **self._shared_broker_properties(),
        }

    def _shared_broker_properties(self) -> dict[str, str]:
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
            # to: runtime/settings.py), and with it off here, tests hid that stage 1's own check
            # for a destination topic created it with one partition.
            "auto.create.topics.enable": "true",
            "num.network.threads": "2",
            "num.io.threads": "4",
        }

    def _membership_properties(self, node_id: int, roles: str) -> dict[str, str]:
        """Who a broker is, how it finds its controllers and how soon they fence it when it
        dies: a KRaft session, or a ZooKeeper one (the ephemeral registration expires alike)."""
        if self.zookeeper:
            return {
                "broker.id": str(node_id),
                "zookeeper.connect": f"{_LOOPBACK}:{self.info.controller_port}",
                "zookeeper.session.timeout.ms": str(_SESSION_TIMEOUT_MS),
            }
        return {
            "process.roles": roles,
            "node.id": str(node_id),
            "controller.quorum.voters": self._voters,
            "controller.listener.names": "CONTROLLER",
            "broker.heartbeat.interval.ms": str(_HEARTBEAT_MS),
            "broker.session.timeout.ms": str(_SESSION_TIMEOUT_MS),
        }

    def _client_listeners(self, node_id: int, port: int) -> tuple[list[str], list[str], list[str]]:
        """A node's client listeners, what it advertises for each, and their protocols: the
        PLAINTEXT one and one per proxied listener (advertised at its proxy)."""
        listeners = [f"PLAINTEXT://127.0.0.1:{port}"]
        advertised = list(listeners)
        for listener in self.info.proxied_listeners:
            listen, via_proxy = self.proxied_endpoints(listener)[node_id]
            listeners.append(f"{listener}://127.0.0.1:{listen}")
            advertised.append(f"{listener}://127.0.0.1:{via_proxy}")
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        protocols += [f"{listener}:PLAINTEXT" for listener in self.info.proxied_listeners]
        return listeners, advertised, protocols

    def _broker_properties(self) -> dict[str, str]:
        listeners, advertised, protocols = self._client_listeners(_BROKER_NODE_ID, self.info.port)
        for protocol, port in self.info.secure_ports.items():
            listeners.append(f"{protocol}://127.0.0.1:{port}")
            advertised.append(f"{protocol}://127.0.0.1:{port}")
            protocols.append(f"{protocol}:{protocol}")
        return {
            **self._membership_properties(_BROKER_NODE_ID, "broker"),
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self.broker.data_dir),
            # One broker: every internal topic at replication factor 1.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            **self._shared_broker_properties(),
            **(self._security_properties() if self.secure else {}),
        }

    @property
    def _voters(self) -> str:
        if self.info.node_ports:
            return ",".join(
                f"{node_id}@127.0.0.1:{pair[1]}"
                for node_id, pair in enumerate(self.info.node_ports, start=1)
            )
        return f"{_CONTROLLER_NODE_ID}@127.0.0.1:{self.info.controller_port}"


def _stop_together(nodes: list[KafkaNode], timeout_s: float) -> None:
    pids = [node.request_stop() for node in nodes]
    for node, pid in zip(nodes, pids, strict=True):
        node.finish_stop(pid, timeout_s)


def _new_cluster_id() -> str:
    # Kafka's own Uuid.randomUuid() never starts with "-" (command-line parsers take such an
    # id for an option); do the same.
    while True:
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def uses_zookeeper(kafka_version: str) -> bool:
    """Whether localkafka runs this Kafka version on ZooKeeper (before 3.5; module docstring)."""
    try:
        major_minor = tuple(int(part) for part in kafka_version.split(".")[:2])
    except ValueError:
        raise ClusterStateError(
            f"Kafka version {kafka_version!r}: expected digits like 3.9.1"
        ) from None
    return major_minor < ZOOKEEPER_BEFORE


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
