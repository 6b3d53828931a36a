"""What a flow remembers on the target cluster, in one compacted topic `<staging>.meta`:

    key "lanes"            {"partitions": N, "function": LANE_FUNCTION}   invariant 1
    key "topic-id:<name>"  {"topic_id": "<hex>"}                          invariant 7
    key "started"          {"at_ms": <epoch ms>}                          invariant 3

Kafka deletes a group's committed offsets together with a deleted topic, so the consumer group
alone cannot tell a recreated topic from a new one; the ids recorded here can, on any restart.

Not thread-safe: after start-up only TopicDiscovery uses it, one round at a time (its lock).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from replicator.errors import TopicSetupError
from runtime import (
    LIBRDKAFKA_LOG,
    Settings,
    call_retrying,
    get_logger,
    kafka_error_of,
    raise_if_refused,
)
from runtime.topics import STARTUP_PATIENCE_S, call_once_known, cluster_metadata, waiting_on

log = get_logger(__name__)

LANES_KEY = "lanes"
STARTED_KEY = "started"
_TOPIC_ID_PREFIX = "topic-id:"
_LEFT_OUT_PREFIX = "left-out:"
_TIMEOUT_S = 30.0


class FlowRecords:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.names.meta
        self._values: dict[str, dict[str, Any]] = {}

    def load(self, admin: AdminClient, create: Callable[[NewTopic], None]) -> None:
        """Create the topic when missing and read everything recorded so far."""
        if self.topic not in cluster_metadata(admin).topics:
            create(NewTopic(self.topic, 1, -1, config={"cleanup.policy": "compact"}))
        # Read at every start-up: a target broker restarting then is waited out, not fatal
        # (exactly chaos found stage 1 exiting on "Failed to get watermark offsets").
        try:
            self._values = call_retrying(
                self._read_all,
                deadline_s=STARTUP_PATIENCE_S,
                backoff_s=1.0,
                on_retry=waiting_on(admin),
            )
        except KafkaException as exc:
            raise TopicSetupError(f"reading {self.topic}: {kafka_error_of(exc).str()}") from exc

    @property
    def lanes(self) -> dict[str, Any] | None:
        return self._values.get(LANES_KEY)

    def record_lanes(self, partitions: int, function: str) -> None:
        self._write({LANES_KEY: {"partitions": partitions, "function": function}})
        log.info("lane mapping recorded", topic=self.topic, partitions=partitions)

    @property
    def started_at_ms(self) -> int | None:
        """When the flow first started (epoch ms); None before it is recorded."""
        started = self._values.get(STARTED_KEY)
        return int(started["at_ms"]) if started else None

    def record_started(self, at_ms: int) -> None:
        """Once per flow: REPLICATION_START_FROM=latest copies what the source took after it."""
        self._write({STARTED_KEY: {"at_ms": at_ms}})
        log.info("flow start recorded", topic=self.topic, at_ms=at_ms)

    def topic_id(self, topic: str) -> str | None:
        value = self._values.get(f"{_TOPIC_ID_PREFIX}{topic}")
        return value["topic_id"] if value else None

    def replicated_topics(self) -> set[str]:
        """The source topics this flow has replicated (each has its topic id recorded)."""
        return self._topics_under(_TOPIC_ID_PREFIX)

    def left_out_topics(self) -> set[str]:
        """The source topics this flow has left out as their destination name collides."""
        return self._topics_under(_LEFT_OUT_PREFIX)

    def record_left_out(self, topic: str, why: str) -> None:
        self._write({f"{_LEFT_OUT_PREFIX}{topic}": {"why": why}})

    def _topics_under(self, prefix: str) -> set[str]:
        return {
            key.removeprefix(prefix)
            for key, value in self._values.items()
            if key.startswith(prefix) and value
        }

    def record_topic_ids(self, ids: dict[str, str]) -> None:
        """Each topic's id (name -> hex), written together: one producer and one flush for a
        start-up that finds hundreds of topics."""
        self._write({f"{_TOPIC_ID_PREFIX}{t}": {"topic_id": i} for t, i in ids.items()})

    def _write(self, values: dict[str, dict[str, Any]]) -> None:
        if not values:
            return
        producer = Producer(
            {
                **self.settings.destination.client_config(),
                "enable.idempotence": True,
                "logger": LIBRDKAFKA_LOG,
            }
        )
        failed: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                failed.append(error)

        for key, value in values.items():
            producer.produce(
                self.topic,
                key=key.encode(),
                value=json.dumps(value).encode(),
                partition=0,
                on_delivery=delivered,
            )
        named = sorted(values)
        keys = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
        # A refused or failed delivery leaves nothing queued either: flush() alone would take
        # it for written, and the flow would go on without what it must remember.
        if producer.flush(_TIMEOUT_S) != 0:
            raise TopicSetupError(f"could not record {keys} in {self.topic}: no answer")
        if failed:
            raise_if_refused(failed[0], "target", {"TOPIC": ("WRITE", self.topic)})
            raise TopicSetupError(f"could not record {keys} in {self.topic}: {failed[0].str()}")
        self._values.update(values)

    def _read_all(self) -> dict[str, dict[str, Any]]:
        """Everything recorded; a KafkaException when the target fails under the read (the
        caller retries the transient ones from the start)."""
        consumer = Consumer(
            {
                **self.settings.destination.client_config(),
                "group.id": self.settings.names.meta_reader_group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "logger": LIBRDKAFKA_LOG,
            }
        )
        values: dict[str, dict[str, Any]] = {}
        try:
            # Created a moment ago (a fresh target), the topic may not have reached the broker
            # this new client asks: "Unknown partition" then means "not yet", not "missing".
            _low, high = call_once_known(
                lambda: consumer.get_watermark_offsets(TopicPartition(self.topic, 0), _TIMEOUT_S),
                self.topic,
            )
            if high == 0:
                return values
            consumer.assign([TopicPartition(self.topic, 0, 0)])
            while True:
                message = consumer.poll(_TIMEOUT_S)
                if message is None:
                    raise KafkaException(
                        KafkaError(
                            KafkaError._TIMED_OUT,
                            f"{self.topic} not read to its end in {_TIMEOUT_S:.0f} s",
                        )
                    )
                if message.error():
                    raise KafkaException(message.error())
                if message.key():
                    key = message.key().decode()
                    if message.value():
                        values[key] = json.loads(message.value())
                    else:
                        values.pop(key, None)
                if message.offset() >= high - 1:
                    return values
        finally:
            consumer.close()
