"""A discovery round whose admin calls time out or fail is a failed round: a warning, the last
answer kept and another round an interval later, never an exit and never an empty answer (issue
31: stage 1 exited 1 on an uncaught ``concurrent.futures.TimeoutError`` after a source broker
died). The admin clients are small fakes answering with real futures; the rest is real."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Uuid

from replicator import discovery as discovery_module
from replicator import topics
from replicator.discovery import TopicDiscovery
from replicator.errors import TopicSetupError
from replicator.flowrecords import FlowRecords
from runtime import load_settings

TOPIC = "orders"
TOPIC_ID = Uuid(0x0123456789ABCDEF, 0x0FEDCBA987654321)


def _answered(value: Any) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_result(value)
    return future


def _failed(error: KafkaError) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_exception(KafkaException(error))
    return future


def _described() -> concurrent.futures.Future[Any]:
    return _answered(SimpleNamespace(partitions=[0, 1, 2], topic_id=TOPIC_ID))


@dataclass
class SourceAdmin:
    """The source cluster's admin client: each describe answers with the next future given."""

    descriptions: list[concurrent.futures.Future[Any]] = field(default_factory=list)

    def poll(self, _timeout: float) -> int:
        return 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return SimpleNamespace(topics={TOPIC: SimpleNamespace(error=None)})

    def describe_topics(self, collection: Any, **_options: Any) -> dict[str, Any]:
        return {TOPIC: self.descriptions.pop(0)}

    def describe_configs(self, resources: list[Any], **_options: Any) -> dict[Any, Any]:
        return {resource: _answered({}) for resource in resources}


class TargetAdmin:
    """The target cluster: the destination topic exists with the source's partitions."""

    def poll(self, _timeout: float) -> int:
        return 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        partitions = {p: SimpleNamespace(leader=1) for p in range(3)}
        return SimpleNamespace(topics={TOPIC: SimpleNamespace(error=None, partitions=partitions)})


def _discovery(source: SourceAdmin) -> TopicDiscovery:
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "REPLICATION_TOPICS_INCLUDE": TOPIC,
            "REPLICATION_FLOW": "discovery-test",
        }
    )
    records = FlowRecords(settings)
    # Replicated before, under this id: a round writes nothing to the (absent) target.
    records._values[f"topic-id:{TOPIC}"] = {"topic_id": topics.topic_id_bytes(TOPIC_ID).hex()}
    return TopicDiscovery(settings, records, source, TargetAdmin(), {})


def test_a_describe_unanswered_past_its_timeout_fails_the_round_and_stage_1_goes_on(
    monkeypatch,
):
    monkeypatch.setattr(topics, "_TIMEOUT_S", 0.05)
    never: concurrent.futures.Future[Any] = concurrent.futures.Future()  # a broker that died
    discovery = _discovery(SourceAdmin([_described(), never, _described()]))
    assert set(discovery.refresh().topics) == {TOPIC}

    assert discovery.refresh() is None  # a failed round: no exception, nothing to apply
    assert set(discovery.latest.topics) == {TOPIC}  # the last answer kept

    again = discovery.refresh()  # the next round, the broker back
    assert again is not None
    assert set(again.topics) == {TOPIC}


@pytest.mark.parametrize(
    "code", [KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT]
)
def test_a_describe_that_fails_is_not_taken_for_a_deleted_topic(code):
    """Taken for "deleted between list and describe", the topic left the answer, and the loop
    unsubscribed every partition of it until a later round."""
    discovery = _discovery(SourceAdmin([_described(), _failed(KafkaError(code))]))
    assert set(discovery.refresh().topics) == {TOPIC}

    assert discovery.refresh() is None
    assert set(discovery.latest.topics) == {TOPIC}


def test_a_topic_deleted_between_list_and_describe_is_simply_not_there_this_round():
    discovery = _discovery(
        SourceAdmin([_described(), _failed(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))])
    )
    discovery.refresh()

    found = discovery.refresh()
    assert found is not None
    assert dict(found.topics) == {}


def test_a_topic_id_the_target_cannot_record_fails_the_round_and_the_next_records_it(
    monkeypatch,
):
    """Stage 1 ended on the meta topic's write timing out (a target below min.insync.replicas).
    A topic is published only with its id recorded (invariant 7): the failed round publishes
    nothing and the next one, the target back, records and publishes it."""
    discovery = _discovery(SourceAdmin([_described(), _described()]))
    records = discovery._records
    del records._values[f"topic-id:{TOPIC}"]  # a topic this flow meets for the first time
    writes: list[dict[str, Any]] = []

    def write(values: dict[str, Any]) -> None:
        if not writes:
            writes.append({})
            raise TopicSetupError(
                f"could not record topic-id:{TOPIC} in {records.topic}: no answer"
            )
        writes.append(values)
        records._values.update(values)

    monkeypatch.setattr(records, "_write", write)
    assert discovery.refresh() is None
    assert dict(discovery.latest.topics) == {}

    found = discovery.refresh()
    assert found is not None
    assert set(found.topics) == {TOPIC}
    assert records.topic_id(TOPIC) == topics.topic_id_bytes(TOPIC_ID).hex()


NEW_TOPIC_ID = Uuid(0x1111111111111111, 0x2222222222222222)


def _described_anew() -> concurrent.futures.Future[Any]:
    """The topic deleted and recreated under its name: same partitions, another id."""
    return _answered(SimpleNamespace(partitions=[0, 1, 2], topic_id=NEW_TOPIC_ID))


def test_partitions_assigned_after_a_recreation_get_the_new_id_and_are_held_at_once():
    """A rebalance between two rounds assigns the recreated topic's partitions: given the last
    round's answer, their lanes took the old id and copied the new topic as the old one's
    continuation until the next round (invariant 7)."""
    discovery = _discovery(SourceAdmin([_described(), _described_anew()]))
    assert discovery.refresh() is not None

    found = discovery.describe({TOPIC})

    assert found.topics[TOPIC].topic_id == topics.topic_id_bytes(NEW_TOPIC_ID)
    assert TOPIC in found.recreated  # replicator.stops.hold_recreated stops the new lanes
    old = topics.topic_id_bytes(TOPIC_ID).hex()
    assert discovery._records.topic_id(TOPIC) == old  # the policy stop records nothing


def test_under_the_policy_replicate_an_assignment_records_the_new_id_before_its_lanes_start(
    monkeypatch,
):
    discovery = _discovery(SourceAdmin([_described(), _described_anew()]))
    replicate = discovery._settings.model_copy(update={"on_topic_recreated": "replicate"})
    monkeypatch.setattr(discovery, "_settings", replicate)
    records = discovery._records
    monkeypatch.setattr(records, "_write", records._values.update)
    assert discovery.refresh() is not None

    found = discovery.describe({TOPIC})

    new = topics.topic_id_bytes(NEW_TOPIC_ID)
    assert found.topics[TOPIC].topic_id == new
    assert dict(found.recreated) == {}
    assert records.topic_id(TOPIC) == new.hex()


def test_a_recreated_topic_whose_destination_is_not_ready_is_judged_under_its_new_id(
    monkeypatch,
):
    """Recreated with more partitions, its destination not grown yet: the round keeps the
    partitions the destination is ready for, never the old topic's id."""
    grown = _answered(SimpleNamespace(partitions=[0, 1, 2, 3], topic_id=NEW_TOPIC_ID))
    discovery = _discovery(SourceAdmin([_described(), grown]))
    assert discovery.refresh() is not None
    monkeypatch.setattr(
        discovery_module,
        "ensure_destinations",
        lambda _admin, changed, _defaults: {t.name: TimeoutError("not yet") for t in changed},
    )

    found = discovery.refresh()

    assert found is not None
    assert found.topics[TOPIC].partitions == 3
    assert found.topics[TOPIC].topic_id == topics.topic_id_bytes(NEW_TOPIC_ID)
    assert TOPIC in found.recreated
