"""Stage 1 reading a topic that exists but has not reached the broker its client asks (issue 31:
on a fresh three-node target, start-up stopped with "reading __exactly.<flow>.staging.meta:
Failed to get watermark offsets: Local: Unknown partition"), and an admin answer that outlives
its timeout."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from replicator.flowrecords import FlowRecords
from runtime import ErrorClass, classify, kafka_error_of, load_settings
from runtime.errors import TopicSetupError
from runtime.topics import admin_result, call_once_known, ensure_topic


def test_an_admin_answer_that_outlives_its_timeout_is_a_retriable_kafka_error():
    never: concurrent.futures.Future[object] = concurrent.futures.Future()
    with pytest.raises(KafkaException) as raised:
        admin_result(never, 0.05)
    assert kafka_error_of(raised.value).code() == KafkaError._TIMED_OUT
    assert classify(kafka_error_of(raised.value)) is ErrorClass.RETRIABLE


def _unknown() -> object:
    raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition"))


def test_a_topic_that_stays_unknown_stops_with_an_error_naming_it_within_the_bound():
    started = time.monotonic()
    with pytest.raises(TopicSetupError, match=r"topic orders\.meta still unknown .* after 0 s"):
        call_once_known(_unknown, "orders.meta", patience_s=0.3)
    assert 0.3 <= time.monotonic() - started < 2


def test_any_other_error_is_not_waited_on():
    def refused() -> object:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    started = time.monotonic()
    with pytest.raises(KafkaException):
        call_once_known(refused, "orders.meta", patience_s=30)
    assert time.monotonic() - started < 1


def test_stage_1_reads_its_flow_records_once_the_new_meta_topic_reaches_its_reader(
    target_cluster, unique_topic
):
    """The meta topic is created, but the broker stage 1's reader asks learns it only 2 s later
    (on three nodes each broker learns a new topic on its own time; one node shows it only by
    creating late). Start-up waits for it instead of stopping."""
    bootstrap = target_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": bootstrap,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": bootstrap,
            "REPLICATION_FLOW": unique_topic("young"),
        }
    )
    created: list[threading.Timer] = []

    def create_late(topic: NewTopic) -> None:
        timer = threading.Timer(2.0, ensure_topic, (admin, topic))
        timer.start()
        created.append(timer)

    records = FlowRecords(settings)
    try:
        records.load(admin, create_late)
    finally:
        for timer in created:
            timer.join(60)
    assert created, "the meta topic was not created"
    assert records.lanes is None  # a new flow: nothing recorded yet
    records.record_lanes(3, "murmur2")

    restarted = FlowRecords(settings)
    restarted.load(admin, lambda topic: pytest.fail(f"{topic.topic} created twice"))
    assert restarted.lanes == {"partitions": 3, "function": "murmur2"}
