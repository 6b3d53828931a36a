"""Creating the product's own topics: idempotent across instances, and ready when it returns."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from runtime.errors import TopicSetupError
from runtime.kafka_errors import kafka_error_of

_TIMEOUT_S = 30.0


def ensure_topic(admin: AdminClient, topic: NewTopic) -> None:
    """Create `topic` unless it exists, then wait until every partition has a leader."""
    try:
        admin.create_topics([topic])[topic.topic].result(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        # Another instance of the flow may have created it a moment ago: that is success.
        if kafka_error_of(exc).code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise TopicSetupError(f"could not create topic {topic.topic}: {exc}") from exc
    await_leaders(admin, topic.topic)


def await_leaders(admin: AdminClient, topic: str) -> None:
    # The controller acknowledges a new topic before the brokers lead its partitions; reading
    # or describing it in that moment fails with "unknown partition".
    deadline = time.monotonic() + _TIMEOUT_S
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        if (
            found is not None
            and found.error is None
            and found.partitions
            and all(p.leader >= 0 for p in found.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TopicSetupError(f"topic {topic} has partitions without a leader after {_TIMEOUT_S} s")
