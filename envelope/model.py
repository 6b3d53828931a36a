"""Value objects carried by an envelope: one run of consecutive records of one source partition."""

from dataclasses import dataclass

# Timestamp types, numbered as confluent-kafka numbers them (TIMESTAMP_NOT_AVAILABLE, ...).
TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record as read from the source partition.

    `headers` keeps Kafka's order; names may repeat and values may be None.
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Envelope:
    """A run of consecutive records of ONE source partition, as stage 1 wrote it.

    `topic_id` is Kafka's 16-byte topic Uuid (it changes when a topic is deleted and recreated).
    `prev_offset` is the offset of the record the same stage-1 session emitted just before this
    run, or None at the start of a session.
    """

    source_cluster_id: str
    topic: str
    topic_id: bytes
    partition: int
    prev_offset: int | None
    records: tuple[SourceRecord, ...]
