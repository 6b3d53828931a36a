"""ensure_topic against a real broker that is down when a role starts."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from runtime.topics import ensure_topic


def test_a_topic_is_created_once_the_broker_is_back_not_a_failed_start_up(
    target_cluster, unique_topic
):
    if target_cluster.broker is None:
        pytest.skip(f"{target_cluster.kind} clusters give no broker control")
    name = unique_topic("startup")
    admin = AdminClient(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "socket.timeout.ms": 2000}
    )
    admin.list_topics(timeout=30)  # connected before the crash, like a role mid-start-up
    target_cluster.broker.kill()
    outcome: list[BaseException | None] = []

    def create() -> None:
        try:
            ensure_topic(admin, NewTopic(name, num_partitions=2, replication_factor=1))
        except BaseException as exc:  # the test thread reports it
            outcome.append(exc)
        else:
            outcome.append(None)

    creating = threading.Thread(target=create, daemon=True)
    try:
        creating.start()
        time.sleep(3)  # ensure_topic meets the dead broker, not a restarted one
        assert not outcome, outcome
    finally:
        target_cluster.broker.restart()
    creating.join(90)
    assert outcome == [None]
    topic = admin.list_topics(name, timeout=30).topics[name]
    assert topic.error is None
    assert len(topic.partitions) == 2
