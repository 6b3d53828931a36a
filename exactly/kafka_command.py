"""`exactly kafka ...`: local KRaft clusters for people trying kafka-exactly by hand.

The clusters live under one state directory (LOCALKAFKA_STATE_DIR, default
~/.local/state/kafka-exactly/clusters), so `down` finds what `up` started, from any shell.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import click

from exactly.localenv import (
    DESTINATION_PREFIX,
    SOURCE_PREFIX,
    SOURCE_PROTOCOL,
    TARGET_PROTOCOL,
    cluster_environment,
)
from localkafka import (
    DEFAULT_NAMES,
    ClusterRegistry,
    LocalCluster,
    LocalKafkaError,
    ensure_class_archive,
    ensure_kafka,
    start_all,
)
from localkafka.layout import SECURE_PROTOCOLS
from localkafka.security import ADMIN_USER, USERS

_EXPORTS = {"source": SOURCE_PREFIX, "target": DESTINATION_PREFIX}  # the variables' prefixes


@click.group()
def kafka() -> None:
    """Local Apache Kafka clusters (KRaft, one broker each or three replicating nodes) from the
    official jars."""


@kafka.command()
def install() -> None:
    """Resolve the Kafka jars with Maven into the cache (done once; `up` does it too), and make
    the archive of their classes that speeds every node's start (done once)."""
    with _errors_to_exit():
        distribution = ensure_kafka()
        archive = ensure_class_archive(distribution)
    click.echo(f"Apache Kafka {distribution.version}: {distribution.libs_dir}")
    click.echo(f"class archive: {archive or 'none (this Java cannot write one)'}")


@kafka.command()
@click.argument("names", nargs=-1)
@click.option(
    "--secure",
    is_flag=True,
    help="Made with a SASL_SSL (SCRAM-SHA-512) and a mutual-TLS listener, a private CA, a user "
    "per role and ACLs enforced (docs/security.md).",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=None,
    help="Made with this many combined broker+controller nodes (3: replication factor 3, "
    "min.insync.replicas 2, as production); default 1, or what an existing cluster has.",
)
def up(names: tuple[str, ...], secure: bool, nodes: int | None) -> None:
    """Create (first time) and start clusters; default: source and target."""
    registry = ClusterRegistry()
    started = time.monotonic()
    with _errors_to_exit():
        clusters = [
            registry.get_or_create(name, secure=True if secure else None, nodes=nodes)
            for name in names or DEFAULT_NAMES
        ]
        start_all(clusters)
    for cluster in clusters:
        _print_status(cluster)
    click.echo(f"ready in {time.monotonic() - started:.1f} s; state in {registry.state_dir}")
    _print_exports(clusters)


@kafka.command()
@click.argument("names", nargs=-1)
@click.option("--purge", is_flag=True, help="Also delete the clusters' data and logs.")
def down(names: tuple[str, ...], purge: bool) -> None:
    """Stop clusters (SIGTERM, then SIGKILL); default: every cluster in the state directory."""
    registry = ClusterRegistry()
    with _errors_to_exit():
        for cluster in [registry.get(name) for name in names or registry.names()]:
            was_running = cluster.is_running()
            if purge:
                cluster.destroy()
            else:
                cluster.stop()
            state = "stopped" if was_running else "was not running"
            click.echo(f"{cluster.name}: {state}{', data deleted' if purge else ''}")


@kafka.command()
@click.argument("names", nargs=-1)
def status(names: tuple[str, ...]) -> None:
    """Show clusters: running or not, bootstrap servers, cluster id, data and log paths.

    Exit status 0 when every named (or known) cluster is running, 1 otherwise.
    """
    registry = ClusterRegistry()
    with _errors_to_exit():
        clusters = [registry.get(name) for name in names or registry.names()]
    if not clusters:
        click.echo(f"no clusters in {registry.state_dir}; start some with `exactly kafka up`")
        sys.exit(1)
    for cluster in clusters:
        _print_status(cluster)
    if all(cluster.is_running() for cluster in clusters):
        _print_exports(clusters)
    else:
        sys.exit(1)


_NODE_OPTION = click.option(
    "--node",
    type=int,
    default=None,
    help="Only this node of a cluster of several (1, 2, 3); default: every broker.",
)


@kafka.command()
@click.argument("name")
@_NODE_OPTION
def kill(name: str, node: int | None) -> None:
    """SIGKILL a cluster's broker(s), as a crash would (the data stays; a separate controller,
    or the other nodes, run on)."""
    with _errors_to_exit():
        cluster = ClusterRegistry().get(name)
        if node is None:
            cluster.kill()
        else:
            cluster.kill_node(node)
    click.echo(f"{name}: killed" + (f" node {node}" if node is not None else ""))


@kafka.command()
@click.argument("name")
@_NODE_OPTION
def restart(name: str, node: int | None) -> None:
    """Start a cluster's broker(s) again on the same data (after kill, or stopping first); one
    node returns once every replica is in sync again, as a rolling restart waits."""
    with _errors_to_exit():
        cluster = ClusterRegistry().get(name)
        if node is None:
            cluster.restart()
        else:
            cluster.restart_node(node)
    _print_status(cluster)


def _print_status(cluster: LocalCluster) -> None:
    processes = [*cluster.nodes.values(), *([cluster.controller] if cluster.controller else [])]
    pids = {process.role: process.pid for process in processes}
    running = [role for role, pid in pids.items() if pid]
    if len(running) == len(pids):
        state = "running (" + ", ".join(f"{role} pid {pid}" for role, pid in pids.items()) + ")"
    elif running:
        runs = "runs" if len(running) == 1 else "run"
        state = f"degraded (only the {', '.join(running)} {runs})"
    else:
        state = "stopped"
    click.echo(
        f"{cluster.name}: {state} bootstrap={cluster.bootstrap_servers} "
        f"cluster_id={cluster.cluster_id} dir={cluster.directory} log={cluster.log_path}"
    )
    if cluster.secure:
        secured = " ".join(f"{p}={cluster.secure_bootstrap(p)}" for p in SECURE_PROTOCOLS)
        click.echo(
            f"  secured: {secured}; ACLs enforced; users {', '.join(USERS)} "
            f"(CA, certificates, keys and passwords in {cluster.credentials.directory})"
        )


def _print_exports(clusters: list[LocalCluster]) -> None:
    """What a role needs in its environment: for secured clusters the source over SASL_SSL and
    the target over mutual TLS as the admin user (a super-user; each role has a user of its own
    for least privilege: exactly acls), the password by its file, never printed."""
    for cluster in clusters:
        prefix = _EXPORTS.get(cluster.name)
        if prefix is None:
            continue
        protocol = None
        if cluster.secure:
            protocol = SOURCE_PROTOCOL if cluster.name == "source" else TARGET_PROTOCOL
        for variable, value in cluster_environment(prefix, cluster, protocol, ADMIN_USER).items():
            click.echo(f"export {variable}={value}")


@contextmanager
def _errors_to_exit() -> Iterator[None]:
    """Turn a LocalKafkaError into one message on stderr and exit status 1, no traceback."""
    try:
        yield
    except LocalKafkaError as exc:
        click.echo(f"exactly kafka: {exc}", err=True)
        sys.exit(1)
