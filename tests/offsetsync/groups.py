"""Consumer groups as users run them, for offset-sync tests: a group that processes part of a
topic on the source and stops, the same group resuming on the target, an operator committing
offsets from outside, and Kafka's own `kafka-consumer-groups` tool reading what the target
says."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

# The two consumers are the demo's (`exactly demo` shows the same failover): one code for both.
from exactly.harness.failover import ALL, process_and_stop, resume_on_target
from localkafka.install import ensure_kafka
from localkafka.node import java_executable
from runtime import call_retrying

__all__ = [
    "ALL",
    "await_committed",
    "commit_offsets",
    "committed_offsets",
    "describe_with_kafka_tool",
    "process_and_stop",
    "resume_on_target",
]

_TIMEOUT_S = 60.0


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    """Commit ``offsets`` (partition: offset) for ``group`` from outside, as an operator's tool
    does, and make sure every partition took it. The admin client reports a refusal per
    partition without raising: on a cluster that has not seen a group yet the first answer is
    NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, and a helper that did not look would
    leave the group without the offsets its test believes it has."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p, o) for p, o in offsets.items()]
    )
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        result = admin.alter_consumer_group_offsets([request])[group].result(_TIMEOUT_S)
        refused = [tp.error for tp in result.topic_partitions if tp.error is not None]
        if not refused:
            return
        assert time.monotonic() < deadline, f"{group}: commit refused: {refused[0]}"
        time.sleep(0.2)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets on ``topic``, asked of the group's coordinator by a
    consumer of the group that never joins it. Not through the admin client's listing: a group
    can have offsets and be missing from it (its coordinator loading), and the admin client's
    offset fetch can crash on a group the coordinator does not know (librdkafka #5040)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=_TIMEOUT_S).topics[topic].partitions
        wanted = [TopicPartition(topic, p) for p in sorted(partitions)]
        # A cluster that has never seen a group answers NOT_COORDINATOR at first.
        found = call_retrying(
            lambda: consumer.committed(wanted, timeout=_TIMEOUT_S), deadline_s=_TIMEOUT_S
        )
    finally:
        consumer.close()
    assert all(tp.error is None for tp in found), found
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


def await_committed(
    bootstrap: str,
    group: str,
    topic: str,
    expected: Mapping[int, int] | None = None,
    *,
    partitions: int = 0,
    timeout_s: float = _TIMEOUT_S,
) -> dict[tuple[str, int], int]:
    """The group's offsets on ``topic`` once they equal ``expected`` (partition: offset) or
    cover ``partitions`` partitions; fails with what is there after the timeout."""
    wanted = None if expected is None else {(topic, p): o for p, o in expected.items()}
    deadline = time.monotonic() + timeout_s
    while True:
        offsets = committed_offsets(bootstrap, group, topic)
        if offsets == wanted or (wanted is None and len(offsets) >= partitions):
            return offsets
        assert time.monotonic() < deadline, f"{group}: offsets {offsets}, wanted {wanted}"
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
