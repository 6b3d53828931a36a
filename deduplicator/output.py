"""Stage 2's output: which destination topic an envelope's records go to, and its accepted
records as the original records, produced into the open transaction on their source partition
number (docs/design.md §3.4: provenance)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException, Producer

from deduplicator.errors import DeduplicatorError
from envelope import HEADER_PROVENANCE, EnvelopeRows, RecordRow, provenance_prefix
from runtime import Settings, kafka_error_of, produce_when_room
from runtime.topics import NEW_TOPIC_PATIENCE_S

# How long a producer's metadata is asked again for a destination partition it does not know.
_METADATA_TIMEOUT_S = 5.0


class Destinations:
    """The destination topic of each source topic; None for one this flow does not replicate."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._known: dict[str, str | None] = {}

    def of(self, topic: str) -> str | None:
        # Per envelope on the hot path: the include/exclude regexes run once per source topic.
        if topic not in self._known:
            self._known[topic] = self._settings.destination_topic(topic)
        return self._known[topic]


def write(
    producer: Producer,
    topic: str,
    envelope: EnvelopeRows,
    rows: tuple[RecordRow, ...],
    *,
    provenance: bool,
) -> int:
    """Each accepted record into the open transaction, on its source partition number, with
    its key, value, headers in order and timestamp, plus the provenance header (``provenance``);
    how many of them were stamped 0, which librdkafka writes stamped with the time of writing
    instead (rd_kafka_msg_new0 takes 0 for "now", and no call of its API sends a 0).

    The hot path of stage 2, one turn per record: the produce call and nothing it can do
    without. No callback (the commit is the acknowledgement); positional arguments where
    produce() takes them (keywords cost 0.2 of its 1.6 µs, measured against librdkafka's
    local queue); the provenance prefix made once per envelope.
    """
    produce = producer.produce
    partition = envelope.partition
    origin = provenance_prefix(envelope.source_cluster_id, partition) if provenance else None
    restamped = 0
    for offset, timestamp, _type, key, value, source_headers in rows:
        if not timestamp:
            restamped += 1
        headers = list(source_headers)
        if origin is not None:
            headers.append((HEADER_PROVENANCE, origin + b"%d" % offset))
        try:
            produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
        except BufferError:  # the local queue is full: wait for room, as every producer does
            pass
        except KafkaException as exc:
            if kafka_error_of(exc).code() != KafkaError._UNKNOWN_PARTITION:
                raise
            # A destination grown a moment ago: stage 1 grows it before it copies the new
            # source partition, but this producer learnt the topic earlier, and librdkafka asks
            # again only every topic.metadata.refresh.interval.ms (5 minutes). Stage 2 exited 1
            # on it, a restart to learn what one metadata request tells.
            _await_partition(producer, topic, partition)
        else:
            continue
        produce_when_room(
            producer,
            topic,
            value=value,
            key=key,
            partition=partition,
            timestamp=timestamp,
            headers=headers,
        )
    return restamped


def _await_partition(producer: Producer, topic: str, partition: int) -> None:
    """Ask ``producer``'s metadata for ``topic`` until it holds ``partition`` (a metadata answer
    updates the partition count librdkafka produces against); DeduplicatorError if it does not
    within NEW_TOPIC_PATIENCE_S, naming the topic, its count and the partition."""
    deadline = time.monotonic() + NEW_TOPIC_PATIENCE_S
    count: int | str = "unknown"
    while time.monotonic() < deadline:
        try:
            metadata = producer.list_topics(topic, timeout=_METADATA_TIMEOUT_S)
            count = len(metadata.topics[topic].partitions)
        except KafkaException:
            pass  # asked again until the deadline: a broker may be restarting
        if isinstance(count, int) and partition < count:
            return
        time.sleep(0.2)
    raise DeduplicatorError(
        f"destination topic {topic} has {count} partitions; a record of source partition "
        f"{partition} has none to go to (a destination must have its source's partitions: "
        "grow it with kafka-topics --alter --partitions)"
    )
