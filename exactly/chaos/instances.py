"""The chaos run's role instances, each reaching every node of both clusters through proxies of
its own (chaos/network.py): the proxies' links, each instance's environment, their start."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from exactly.chaos.network import Toxiproxy, link_name, listener_name
from exactly.chaos.options import CLUSTERS, GROUPS, INSTANCES
from exactly.chaos.plan import SESSION_TIMEOUT_S
from exactly.chaos.world import Instance
from exactly.harness.progress import DemoView
from exactly.harness.traffic import INCLUDE_PATTERN
from exactly.roles import DEDUPLICATOR
from localkafka import LocalCluster, RoleProcess, free_ports

FLOW = "chaos"
_STAGING_PARTITIONS = 6


def add_links(network: Toxiproxy, clusters: Mapping[str, LocalCluster]) -> None:
    """A proxy for every path from a role instance to a cluster's node: each node advertises
    its proxy's port on that instance's listener (chaos/network.py)."""
    for instance in INSTANCES:
        for cluster in CLUSTERS:
            endpoints = clusters[cluster].proxied_endpoints(listener_name(instance))
            network.add_link(
                link_name(instance, cluster),
                {node: (via_proxy, listen) for node, (listen, via_proxy) in endpoints.items()},
            )


def bootstrap(cluster: LocalCluster, instance: str) -> str:
    """Every node of the cluster, each through this instance's proxy to it."""
    endpoints = cluster.proxied_endpoints(listener_name(instance))
    return ",".join(f"127.0.0.1:{via_proxy}" for _listen, via_proxy in endpoints.values())


def start_instances(
    clusters: Mapping[str, LocalCluster], run_dir: Path, view: DemoView
) -> dict[str, Instance]:
    names = INSTANCES
    instances: dict[str, Instance] = {}
    for name, port in zip(names, free_ports(len(names)), strict=True):
        role = name.split("-")[0]
        env = role_env(clusters, run_dir, name, port)
        state_dir = Path(env["STATE_DIR"]) if role == DEDUPLICATOR else None
        process = RoleProcess(role, env, run_dir, name=name, cwd=run_dir, metrics_port=port)
        instances[name] = Instance(process.start(), state_dir)
        view.say(f"started {name} (pid {process.pid}), log {process.log_path}")
    return instances


def role_env(
    clusters: Mapping[str, LocalCluster], run_dir: Path, name: str, metrics_port: int
) -> dict[str, str]:
    session_ms = str(int(SESSION_TIMEOUT_S * 1000))
    return {
        # Through its own proxies: the network faults act on this instance's paths only.
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": bootstrap(clusters["source"], name),
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": bootstrap(clusters["target"], name),
        # Short sessions, so that a frozen instance is evicted within the run and wakes
        # as a zombie whose writes must be fenced (chaos/plan.py holds it past them).
        "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SESSION_TIMEOUT_MS": session_ms,
        "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SESSION_TIMEOUT_MS": session_ms,
        "REPLICATION_TOPICS_INCLUDE": INCLUDE_PATTERN,
        "REPLICATION_FLOW": FLOW,
        "REPLICATION_INSTANCE_ID": f"chaos-{name}",
        "REPLICATION_STAGING_PARTITIONS": str(_STAGING_PARTITIONS),
        "STATE_DIR": str(run_dir / f"state-{name}"),
        "METRICS_PORT": str(metrics_port),
        "OFFSETSYNC_GROUPS_INCLUDE": ",".join(GROUPS),
        "OFFSETSYNC_INTERVAL_MS": "1000",
    }
