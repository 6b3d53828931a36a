"""Where a replicated cluster's partitions and coordinators live, and when its replicas are whole
again: what a fault aimed at one node needs to know (which node leads staging, which one is the
transaction coordinator of a producer) and what a rolling restart waits for between two nodes.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Iterable

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from localkafka.errors import ClusterStateError
from localkafka.install import ensure_kafka
from localkafka.node import java_executable
from localkafka.readiness import QUIET_CLIENT_LOG

# The partition count localkafka gives its internal topics (broker_config.py): a coordinator is the
# leader of the partition its group id or transactional id hashes to.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
INTERNAL_TOPIC_PARTITIONS = 10
_POLL_S = 0.2
# What kafka-reassign-partitions.sh runs.
_REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def _admin(bootstrap_servers: str) -> AdminClient:
    # A node restarting refuses connections: expected here, so librdkafka's lines go nowhere.
    return AdminClient({"bootstrap.servers": bootstrap_servers, "logger": QUIET_CLIENT_LOG})


def leader_of(bootstrap_servers: str, topic: str, partition: int, timeout_s: float = 30.0) -> int:
    """The node id leading ``topic``'s ``partition`` now (waiting while it has none)."""
    admin = _admin(bootstrap_servers)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            metadata = admin.list_topics(topic, timeout=5.0).topics.get(topic)
        except KafkaException:
            metadata = None
        if metadata is not None and metadata.error is None and partition in metadata.partitions:
            leader = int(metadata.partitions[partition].leader)
            if leader >= 0:
                return leader
        if time.monotonic() > deadline:
            raise ClusterStateError(f"{topic}[{partition}] has no leader after {timeout_s:.0f} s")
        time.sleep(_POLL_S)


def move_leaders(
    bootstrap_servers: str, topics: Iterable[str], timeout_s: float = 180.0
) -> dict[tuple[str, int], int]:
    """Hand the leadership of every partition of ``topics`` to another replica, as an operator
    does with kafka-reassign-partitions and kafka-leader-election: each replica list rotated by
    one (the same replicas, so no data moves, but another preferred leader), then a preferred
    leader election. Returns each partition's new leader once the cluster shows it."""
    admin = _admin(bootstrap_servers)
    metadata = admin.list_topics(timeout=10.0)
    wanted: dict[tuple[str, int], list[int]] = {}
    for name in topics:
        for partition in metadata.topics[name].partitions.values():
            replicas = [int(node) for node in partition.replicas]
            wanted[(name, partition.id)] = replicas[1:] + replicas[:1]
    plan = [{"topic": t, "partition": p, "replicas": r} for (t, p), r in wanted.items()]
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump({"version": 1, "partitions": plan}, file)
        file.flush()
        command = [java_executable(), "-cp", ensure_kafka().classpath, _REASSIGN_TOOL]
        command += ["--bootstrap-server", bootstrap_servers]
        command += ["--reassignment-json-file", file.name, "--execute"]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    if done.returncode != 0:
        raise ClusterStateError(f"reassignment refused: {done.stdout[-500:]}{done.stderr[-500:]}")
    deadline = time.monotonic() + timeout_s
    partitions = [TopicPartition(topic, partition) for topic, partition in wanted]
    while True:
        # Until the reassignment is applied the election finds the old order and moves nothing.
        admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=timeout_s)
        metadata = admin.list_topics(timeout=10.0)
        leaders = {
            (topic, partition): int(metadata.topics[topic].partitions[partition].leader)
            for topic, partition in wanted
        }
        if all(leaders[key] == replicas[0] for key, replicas in wanted.items()):
            return leaders
        if time.monotonic() > deadline:
            raise ClusterStateError(f"leaders did not move within {timeout_s:.0f} s: {leaders}")
        time.sleep(_POLL_S)


def coordinator_partition(key: str, partitions: int = INTERNAL_TOPIC_PARTITIONS) -> int:
    """The internal-topic partition Kafka maps a group id or transactional id to:
    ``Utils.abs(key.hashCode()) % partitions``, with Java's String.hashCode."""
    h = 0
    for unit in _utf16_units(key):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0, not to itself.
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def transaction_coordinator(bootstrap_servers: str, transactional_id: str) -> int:
    """The node id of the transaction coordinator of ``transactional_id``."""
    return leader_of(bootstrap_servers, TRANSACTION_TOPIC, coordinator_partition(transactional_id))


def group_coordinator(bootstrap_servers: str, group: str) -> int:
    """The node id of the group coordinator of ``group`` (classic and consumer protocol alike):
    the leader of its __consumer_offsets partition, which exists once any group has used the
    cluster. Not asked with DescribeGroups: on a cluster still creating __consumer_offsets,
    librdkafka 2.x aborted the process there (rd_kafka_enq_once_del_source_return assertion)."""
    return leader_of(bootstrap_servers, OFFSETS_TOPIC, coordinator_partition(group))


def await_in_sync(
    bootstrap_servers: str, node_ids: list[int], timeout_s: float, *, replicas: bool = True
) -> None:
    """Wait until every node is registered and (with ``replicas``) every partition of every
    topic has a leader and all its replicas in sync: what an operator waits for before rolling
    the next node."""
    admin = _admin(bootstrap_servers)
    deadline = time.monotonic() + timeout_s
    lagging = "no metadata"
    while time.monotonic() < deadline:
        try:
            metadata = admin.list_topics(timeout=5.0)
        except KafkaException as exc:
            lagging = str(exc)
            time.sleep(_POLL_S)
            continue
        missing = sorted(set(node_ids) - set(metadata.brokers))
        behind = [
            f"{name}[{partition.id}]"
            for name, topic in metadata.topics.items()
            for partition in topic.partitions.values()
            if replicas and (partition.leader < 0 or set(partition.isrs) != set(partition.replicas))
        ]
        if not missing and not behind:
            return
        lagging = f"nodes not registered {missing}" if missing else f"not in sync: {behind[:5]}"
        time.sleep(_POLL_S)
    raise ClusterStateError(
        f"{bootstrap_servers}: replicas not whole after {timeout_s:.0f} s ({lagging})"
    )


def _utf16_units(text: str) -> list[int]:
    encoded = text.encode("utf-16-be")
    return [int.from_bytes(encoded[i : i + 2], "big") for i in range(0, len(encoded), 2)]
