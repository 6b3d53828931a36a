"""Consumer groups as users run them, for offset-sync tests: a group that processes part of a
topic on the source and stops, the same group resuming on the target, and Kafka's own
`kafka-consumer-groups` tool reading what the target says."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

# The two consumers are the demo's (`exactly demo` shows the same failover): one code for both.
from exactly.demo.failover import ALL, process_and_stop, resume_on_target
from localkafka.install import ensure_kafka
from localkafka.node import java_executable

__all__ = [
    "ALL",
    "await_committed",
    "committed_offsets",
    "describe_with_kafka_tool",
    "process_and_stop",
    "resume_on_target",
]

_TIMEOUT_S = 60.0


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Only a group the cluster lists: fetching the offsets of one it has never seen can crash
    # librdkafka's admin client (librdkafka #5040; offsetsync.groups says more).
    listed = admin.list_consumer_groups().result(_TIMEOUT_S).valid
    if group not in {g.group_id for g in listed}:
        return {}
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in found.result(_TIMEOUT_S).topic_partitions
        if tp.offset >= 0
    }


def await_committed(
    bootstrap: str,
    group: str,
    expected: Mapping[tuple[str, int], int] | None = None,
    *,
    partitions: int = 0,
    timeout_s: float = _TIMEOUT_S,
) -> dict[tuple[str, int], int]:
    """The group's offsets on a cluster once they equal ``expected`` (or cover ``partitions``
    partitions); fails with what is there after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        offsets = committed_offsets(bootstrap, group)
        if (expected is not None and offsets == dict(expected)) or (
            expected is None and len(offsets) >= partitions
        ):
            return offsets
        assert time.monotonic() < deadline, f"{group}: offsets {offsets}, wanted {expected}"
        time.sleep(0.2)


def describe_with_kafka_tool(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """CURRENT-OFFSET per partition as `kafka-consumer-groups --describe` prints it (Kafka's
    own ConsumerGroupCommand, from the same jars as the brokers)."""
    distribution = ensure_kafka()
    output = subprocess.run(
        [
            java_executable(),
            "-cp",
            distribution.classpath,
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            group,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    lines = [line.split() for line in output.splitlines() if line.strip()]
    header = next(i for i, cells in enumerate(lines) if "CURRENT-OFFSET" in cells)
    columns = lines[header]
    offsets = {}
    for cells in lines[header + 1 :]:
        row = dict(zip(columns, cells, strict=False))
        offsets[(row["TOPIC"], int(row["PARTITION"]))] = int(row["CURRENT-OFFSET"])
    return offsets
