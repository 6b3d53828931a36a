"""The start-up calls (ensure_topic, cluster_metadata, stage 1's flow records) against a real
broker that is down when a role starts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from replicator import flowrecords
from replicator.flowrecords import FlowRecords
from runtime import load_settings
from runtime.topics import cluster_metadata, ensure_topic, waiting_on


def test_start_up_calls_wait_for_the_broker_to_come_back_not_a_failed_start_up(
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
    outcome: dict[str, BaseException | None] = {}

    def attempt(name: str, call: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                call()
            except BaseException as exc:  # the test thread reports it
                outcome[name] = exc
            else:
                outcome[name] = None

        return run

    threads = [
        threading.Thread(
            target=attempt(
                "ensure_topic",
                lambda: ensure_topic(admin, NewTopic(name, num_partitions=2, replication_factor=1)),
            )
        ),
        threading.Thread(target=attempt("cluster_metadata", lambda: cluster_metadata(admin))),
    ]
    try:
        for thread in threads:
            thread.daemon = True
            thread.start()
        time.sleep(3)  # both meet the dead broker, not a restarted one
        assert outcome == {}
    finally:
        target_cluster.broker.restart()
    for thread in threads:
        thread.join(90)
    assert outcome == {"ensure_topic": None, "cluster_metadata": None}
    topic = admin.list_topics(name, timeout=30).topics[name]
    assert topic.error is None
    assert len(topic.partitions) == 2


def test_stage_1_reads_its_flow_records_through_a_broker_that_stops_answering(
    target_cluster, unique_topic, monkeypatch
):
    broker = target_cluster.broker
    if broker is None:
        pytest.skip(f"{target_cluster.kind} clusters give no broker control")
    bootstrap = target_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": bootstrap,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": bootstrap,
            "REPLICATION_FLOW": unique_topic("flowrecords"),
        }
    )
    first = FlowRecords(settings)
    first.load(admin, lambda topic: ensure_topic(admin, topic))
    first.record_lanes(3, "murmur2")

    # The broker freezes between stage 1's metadata read and its read of the records, and
    # outlasts several 1 s requests. It thaws well inside its session with the controller (6 s,
    # localkafka): fenced, it would leave the next test a cluster without leaders (seen in CI).
    monkeypatch.setattr(flowrecords, "_TIMEOUT_S", 1.0)
    read_metadata = flowrecords.cluster_metadata
    thaw = threading.Timer(3.5, broker.resume)

    def metadata_then_freeze(*args: object, **kwargs: object) -> object:
        metadata = read_metadata(*args, **kwargs)
        broker.pause()
        thaw.start()
        return metadata

    monkeypatch.setattr(flowrecords, "cluster_metadata", metadata_then_freeze)
    restarted = FlowRecords(settings)  # stage 1 starting again
    started = time.monotonic()
    try:
        restarted.load(admin, lambda topic: None)
    finally:
        thaw.cancel()
        if thaw.ident is not None:  # started: the freeze happened
            thaw.join()
        broker.resume()
    assert time.monotonic() - started >= 3.5  # it did meet the frozen broker
    assert restarted.lanes == {"partitions": 3, "function": "murmur2"}


def test_a_retry_within_the_quiet_time_logs_no_warning_and_one_after_it_does(caplog):
    """cluster_metadata's short first attempts: a cluster slow to answer one is no news within
    the 10 s one attempt always had (runtime/topics.py)."""
    caplog.set_level(logging.INFO, logger="runtime.topics")
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:1"})  # never asked: no call is made
    timed_out = KafkaError(KafkaError._TIMED_OUT)
    waiting_on(admin, quiet_s=60)(timed_out)
    assert "cluster not ready" not in caplog.text
    waiting_on(admin)(timed_out)
    assert "cluster not ready; retrying" in caplog.text
