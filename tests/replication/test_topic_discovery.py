"""Stage 1's topic discovery runs beside the copy loop, not in it (issue 31): a round stuck on a
dead broker's admin call does not stop the copy, and what a round finds that must end stage 1
(a missing ACL, a topic recreated under running partitions) still ends it.

Stage 1 runs in this process here, its loop on a thread, so that a discovery round can be held
at the admin call it would wait in: a dead broker of a one-node cluster would stop the copy too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from replicator import discovery, loop
from replicator.errors import ReplicatorError
from replicator.flowrecords import FlowRecords
from replicator.loop import Replicator
from replicator.metrics import ReplicatorMetrics
from replicator.topics import ensure_staging
from runtime import NotAuthorizedError, admin_client, load_settings
from tests.kafka_helpers import create_topic, delete_topic
from tests.replication.staging import (
    await_staging_complete,
    read_source,
    read_staging,
    topic_ids,
    verify_staging,
)


class StageOne:
    """A Replicator whose loop runs on a thread; ``stop`` ends it as SIGTERM does."""

    def __init__(self, env: dict[str, str]) -> None:
        self.settings = load_settings(env)
        records = FlowRecords(self.settings)
        staging = ensure_staging(admin_client(self.settings.destination), self.settings, records)
        self._stopping = threading.Event()
        self.replicator = Replicator(
            self.settings, staging, records, ReplicatorMetrics(), self._stopping.is_set
        )
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="stage-1-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.replicator.run()
        except BaseException as exc:  # the test asserts on it
            self.error = exc

    def await_assigned(self, partitions: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.replicator.lanes) < partitions:
            assert self._thread.is_alive(), f"stage 1 ended: {self.error!r}"
            assert time.monotonic() < deadline, "partitions not assigned"
            time.sleep(0.1)

    def await_end(self, timeout_s: float) -> BaseException | None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "stage 1 did not end"
        return self.error

    def stop(self, timeout_s: float = 60) -> BaseException | None:
        self._stopping.set()
        return self.await_end(timeout_s)


class HeldDescribe:
    """describe_source_topics, held on demand as an admin call to a dead broker holds it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._describe: Callable[..., Any] = discovery.describe_source_topics
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()
        self.fail_with: BaseException | None = None
        monkeypatch.setattr(discovery, "describe_source_topics", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_with is not None:
            raise self.fail_with
        if self.hold.is_set():
            self.held.set()
            self.release.wait(120)
        return self._describe(*args, **kwargs)


@pytest.fixture
def held(monkeypatch) -> HeldDescribe:
    monkeypatch.setattr(loop, "DISCOVERY_INTERVAL_S", 0.5)
    return HeldDescribe(monkeypatch)


@pytest.fixture
def stages(held: HeldDescribe) -> Iterator[list[StageOne]]:
    started: list[StageOne] = []
    yield started
    held.release.set()  # a round still held would hold the stop
    for stage in started:
        stage.stop()


def _env(source_cluster, target_cluster, unique_topic, topic: str, **more: str) -> dict[str, str]:
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": topic.replace(".", r"\."),
        "REPLICATION_FLOW": unique_topic("flow").replace(".", "-")[-90:],
        **more,
    }


def _produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in values:
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0


def _discovery_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "topic-discovery" and t.is_alive()]


def test_a_discovery_round_held_by_a_dead_broker_does_not_stop_the_copy(
    source_cluster, target_cluster, unique_topic, held, stages
):
    topic = unique_topic("held")
    create_topic(source_cluster.bootstrap_servers, topic, 3)
    _produce(source_cluster.bootstrap_servers, topic, range(300))
    stage = StageOne(_env(source_cluster, target_cluster, unique_topic, topic))
    stages.append(stage)
    stage.await_assigned(3)

    held.hold.set()
    assert held.held.wait(30), "no discovery round after start-up"
    _produce(source_cluster.bootstrap_servers, topic, range(300, 600))
    # The round is still held (as by a 30 s admin timeout): the copy goes on regardless.
    source = read_source(source_cluster.bootstrap_servers, [topic])
    staged = await_staging_complete(
        target_cluster.bootstrap_servers, stage.settings.names.staging, source, 20
    )
    assert not held.release.is_set()
    report = verify_staging(
        source,
        staged,
        source_cluster_id=source_cluster.cluster_id,
        topic_ids=topic_ids(source_cluster.bootstrap_servers, [topic]),
    )
    assert report.ok, report
    assert report.source_records == 600

    held.release.set()
    assert stage.stop() is None  # drained, and the discovery thread joined
    assert _discovery_threads() == []


def test_a_refusal_met_by_a_later_round_ends_stage_1_with_it_and_leaves_no_thread(
    source_cluster, target_cluster, unique_topic, held, stages
):
    topic = unique_topic("refused")
    create_topic(source_cluster.bootstrap_servers, topic, 3)
    stage = StageOne(_env(source_cluster, target_cluster, unique_topic, topic))
    stages.append(stage)
    stage.await_assigned(3)

    refused = NotAuthorizedError(
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        cluster="source",
        operation="DESCRIBE_CONFIGS",
        resource="TOPIC",
        name=topic,
    )
    held.fail_with = refused
    assert stage.await_end(30) is refused
    assert _discovery_threads() == []


def test_a_topic_recreated_under_running_partitions_ends_stage_1_under_the_policy_replicate(
    source_cluster, target_cluster, unique_topic, held, stages
):
    topic = unique_topic("recreated")
    create_topic(source_cluster.bootstrap_servers, topic, 3)
    env = _env(
        source_cluster,
        target_cluster,
        unique_topic,
        topic,
        REPLICATION_ON_TOPIC_RECREATED="replicate",
    )
    stage = StageOne(env)
    stages.append(stage)
    stage.await_assigned(3)

    held.hold.set()  # the next round sees the topic only once it is back, under its new id
    assert held.held.wait(30)
    delete_topic(source_cluster.bootstrap_servers, topic)
    create_topic(source_cluster.bootstrap_servers, topic, 3)
    held.release.set()

    error = stage.await_end(60)
    assert isinstance(error, ReplicatorError), repr(error)
    assert f"source topic {topic} was deleted and recreated while replicated" in str(error)
    assert _discovery_threads() == []
    # The restart replicates the new topic: its id is the one recorded.
    records = FlowRecords(stage.settings)
    records.load(admin_client(stage.settings.destination), lambda new: None)
    new_id = topic_ids(source_cluster.bootstrap_servers, [topic])[topic]
    assert records.topic_id(topic) == new_id.hex()


def _events(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    return [
        dict(r.event_fields)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == message
    ]


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [found] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    return int(found.offset)


def _staged_under(bootstrap: str, staging: str, topic: str, topic_id: bytes) -> dict[int, bytes]:
    return {
        record.offset: record.value
        for item in read_staging(bootstrap, staging)
        if item.envelope.topic == topic and item.envelope.topic_id == topic_id
        for record in item.envelope.records
    }


def test_a_topic_recreated_between_two_rounds_stops_and_is_then_replicated_from_its_start(
    source_cluster, target_cluster, unique_topic, held, stages, caplog
):
    """Deleted and recreated between two discovery rounds, under a running partition: the
    client follows the name and the lane reads the new topic on from the old one's position,
    committing it (docs/design.md invariant 7). The next round stops the partition; and when
    the operator chooses REPLICATION_ON_TOPIC_RECREATED=replicate, the new topic is copied from
    its first record, not from the offset the old topic's lane committed onto it."""
    source, target = source_cluster.bootstrap_servers, target_cluster.bootstrap_servers
    topic = unique_topic("between")
    create_topic(source, topic, 1)
    producer = Producer({"bootstrap.servers": source})
    for i in range(20):
        producer.produce(topic, value=b"old-%d" % i)
    assert producer.flush(30) == 0
    env = _env(source_cluster, target_cluster, unique_topic, topic)
    stage = StageOne(env)
    stages.append(stage)
    stage.await_assigned(1)
    staging, group = stage.settings.names.staging, stage.settings.names.replicator_group
    await_staging_complete(target, staging, read_source(source, [topic]), 30)

    held.hold.set()  # no round between the deletion and the new topic's first records
    assert held.held.wait(30), "no discovery round after start-up"
    delete_topic(source, topic)
    create_topic(source, topic, 1)
    for i in range(50):
        producer.produce(topic, value=b"new-%d" % i)
    assert producer.flush(30) == 0
    new_id = topic_ids(source, [topic])[topic]
    # The path under test: the lane, still under the old id, commits its position onto the
    # new topic (Kafka deleted the old topic's offsets with it).
    deadline = time.monotonic() + 30
    while _committed(source, group, topic) < 50:
        assert time.monotonic() < deadline, "the old lane committed nothing onto the new topic"
        time.sleep(0.5)
    held.release.set()

    # The next round: the partition stops, with a line and the gauge.
    deadline = time.monotonic() + 30
    while not (stopped := _events(caplog, "source partition stopped")):
        assert time.monotonic() < deadline, "partition not stopped"
        time.sleep(0.2)
    assert [(e["topic"], e["partition"], e["reason"]) for e in stopped] == [
        (topic, 0, "topic_recreated")
    ]
    registry = stage.replicator.metrics.registry
    labels = {"topic": topic, "partition": "0", "reason": "topic_recreated"}
    assert registry.get_sample_value("exactly_replicator_partitions_stopped", labels) == 1
    assert stage.stop() is None

    # The operator chooses the new topic: all of it reaches staging under its own id.
    caplog.clear()
    again = StageOne({**env, "REPLICATION_ON_TOPIC_RECREATED": "replicate"})
    stages.append(again)
    expected = {i: b"new-%d" % i for i in range(50)}
    deadline = time.monotonic() + 60
    while (staged := _staged_under(target, staging, topic, new_id)) != expected:
        assert time.monotonic() < deadline, f"new topic staged at offsets {sorted(staged)}"
        assert again.error is None, repr(again.error)
        time.sleep(0.5)
    [ignored] = _events(
        caplog, "committed offset is of an earlier topic of this name; not read from"
    )
    assert (ignored["topic"], ignored["offset"], ignored["topic_id"]) == (topic, 50, new_id.hex())
    assert again.stop() is None
