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
import shutil
import signal
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from localkafka.broker_config import SESSION_TIMEOUT_MS, controller_properties, node_properties
from localkafka.errors import ClusterStartError, ClusterStateError
from localkafka.install import KafkaDistribution, ensure_kafka
from localkafka.layout import LOOPBACK, ClusterInfo, ClusterLayout, plan_info
from localkafka.node import KafkaNode
from localkafka.ports import port_is_free
from localkafka.readiness import wait_until_ready
from localkafka.replicas import await_in_sync
from localkafka.security import USERS, make_credentials
from runtime.kafka_errors import kafka_error_of

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
# A restarted broker waits until its dead predecessor is surely fenced (see the module docstring).
_FENCE_WAIT_S = SESSION_TIMEOUT_MS / 1000 + 1.0
_SCRAM_ITERATIONS = 8192  # Kafka's minimum for SCRAM-SHA-512 is 4096


class LocalCluster(ClusterLayout):
    """A local KRaft cluster rooted in one directory: create once, then start, kill, restart."""

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
        info = plan_info(
            name,
            distribution.version,
            proxied=proxied,
            reserved_ports=reserved_ports,
            secure=secure,
            nodes=nodes,
        )
        cluster = cls(directory, info)
        try:
            if secure:
                make_credentials(cluster.credentials.directory)
            if cluster.controller is not None:
                cluster.controller.write_config(controller_properties(cluster))
            for node_id, node in cluster.nodes.items():
                node.write_config(node_properties(cluster, node_id))
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
        """Stop every JVM of the cluster and delete the directory with its data and logs."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

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
        if not port_is_free(port, LOOPBACK):
            raise ClusterStartError(
                f"cluster {self.name!r}: port {port} is in use by another process"
            )


def _stop_together(nodes: list[KafkaNode], timeout_s: float) -> None:
    pids = [node.request_stop() for node in nodes]
    for node, pid in zip(nodes, pids, strict=True):
        node.finish_stop(pid, timeout_s)
