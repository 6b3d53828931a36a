"""Invariant 7 in stage 2: a staging partition whose next envelopes are gone, or whose records
the destination refuses for good, is stopped and said, never read past.

Stage 2's consumer runs with ``auto.offset.reset=error``, so librdkafka never moves a position
by itself. A position below staging's log start means envelopes deleted (retention,
delete-records) before stage 2 read them. Their records are committed at the source by stage
1 and would never reach the destination. Worse, invariant 4 argues only over readable
envelopes: the first envelope of a later stage-1 session would be accepted past the hole. A
position past the log's end means staging was recreated or truncated under the flow. In both
cases the partition is paused, gauged, counted and logged. Its committed offset stays where it
was, so the stop loses nothing more, and every restart finds and says it again. The other
partitions go on. docs/operations.md (ExactlyStagingPartitionStopped) says how to go on.

So that librdkafka never chooses a position, every partition is assigned at one (``start_of``).
A partition stage 2 never committed starts at offset 0, not at "the beginning": librdkafka
resolves the beginning to the log start, and would read past envelopes that retention took
before stage 2 first read them (a flow whose stage 2 started late, or whose group's offsets
expired in an outage longer than offsets.retention.minutes, or were deleted).

A destination partition whose broker refuses the records written to it for good (a record, or a
batch of records written together, larger than the topic's max.message.bytes, a timestamp
outside its message.timestamp bounds, a null key on a compacted topic: runtime.records_refused)
would have the same transaction aborted and tried again without end. Every staging partition
whose envelopes wrote to it in that transaction is stopped instead (``refused``), after the
abort rewound it to its commit point: nothing of it is lost, the other partitions go on, and
once the topic takes the records a restart of stage 2 writes them."""

from __future__ import annotations

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from deduplicator.errors import DeduplicatorError
from deduplicator.metrics import DeduplicatorMetrics
from runtime import get_logger

# The loop's logger: a log query selects stage 2's partition events on it.
log = get_logger("deduplicator.loop")

DATA_LOSS = "data_loss"
REFUSED = "refused"
# The watermark query is only for the report: a leader that moved must not hold the loop long.
_WATERMARK_TIMEOUT_S = 5.0


def start_of(committed: TopicPartition) -> TopicPartition:
    """Where the consumer starts a staging partition: its committed offset, or, never
    committed, offset 0 (a new flow: stage 1 wrote every envelope there for it, from 0)."""
    offset = max(committed.offset, 0)
    return TopicPartition(committed.topic, committed.partition, offset)


def offset_reset(
    consumer: Consumer,
    metrics: DeduplicatorMetrics,
    stopped: dict[int, str],
    message: Message,
) -> None:
    """librdkafka found the position of a staging partition (``message.offset()``) out of
    the log's range (``_AUTO_OFFSET_RESET``)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or partition in stopped:
        return
    if offset is None:
        # Every partition is assigned at a position (start_of); none is a defect, and a
        # partition left without one would stand still unsaid.
        raise DeduplicatorError(
            f"staging {topic} partition {partition} was assigned without a position: "
            f"{message.error()}"
        )
    _stop(consumer, metrics, stopped, TopicPartition(topic, partition), DATA_LOSS)
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=_WATERMARK_TIMEOUT_S, cached=False
        )
    except KafkaException as exc:
        low = high = None
        detail = (
            f"offset {offset} is no longer in staging {topic} partition {partition}; how "
            f"many envelopes were deleted is unknown (its bounds: {exc})"
        )
    else:
        if offset < low:
            if offset > 0:
                # Without a commit (offset 0) whether they were read is not known: not counted
                # as lost, which the counter would claim.
                metrics.staging_records_lost.labels(str(partition)).inc(low - offset)
            detail = _below_start(topic, partition, offset, low)
        else:
            detail = (
                f"offset {offset} is past staging {topic} partition {partition}'s end {high}: "
                "the topic was deleted and created again, or truncated, under the flow"
            )
    log.error(
        "staging partition stopped",
        reason=DATA_LOSS,
        partition=partition,
        offset=offset,
        log_start=low,
        log_end=high,
        detail=detail,
    )


def _below_start(topic: str, partition: int, offset: int, low: int) -> str:
    if offset == 0:
        # No commit: stage 2 cannot know whether it read them once (offsets expired or deleted)
        # or never did (started after retention took them); it says so rather than guess.
        return (
            f"stage 2 has no committed offset on staging {topic} partition {partition} (or one "
            f"at 0), and its log start is {low}: {low} records were deleted (retention.ms, or "
            "delete-records) either before stage 2 first read them, which loses their records, "
            "or after its group's offsets expired (offsets.retention.minutes) or were deleted, "
            "which loses nothing; stage 2 cannot tell which, so it reads nothing past them"
        )
    return (
        f"offset {offset} is below staging {topic} partition {partition}'s log start "
        f"{low}: {low - offset} records were deleted before stage 2 read them "
        "(retention.ms, or delete-records), and their source records are not on the "
        "destination"
    )


def refused(
    consumer: Consumer,
    metrics: DeduplicatorMetrics,
    stopped: dict[int, str],
    staging: str,
    partitions: set[int],
    destination: tuple[str, int],
    error: KafkaError,
) -> None:
    """The broker refused, for good, the records the staging ``partitions``' envelopes wrote to
    the ``destination`` partition (``error``); the transaction was aborted and rewound."""
    topic, destination_partition = destination
    for partition in sorted(partitions - stopped.keys()):
        _stop(consumer, metrics, stopped, TopicPartition(staging, partition), REFUSED)
        log.error(
            "staging partition stopped",
            reason=REFUSED,
            partition=partition,
            destination=topic,
            destination_partition=destination_partition,
            detail=(
                f"destination {topic} partition {destination_partition} refuses records of this "
                f"staging partition's envelopes: {error.str()}. Nothing was written or "
                "committed past its last commit; once the topic takes them (docs/operations.md, "
                "ExactlyStagingPartitionStopped), restart stage 2"
            ),
        )


def _stop(
    consumer: Consumer,
    metrics: DeduplicatorMetrics,
    stopped: dict[int, str],
    partition: TopicPartition,
    reason: str,
) -> None:
    """Pause ``partition`` and gauge it stopped for ``reason``: nothing more of it is read."""
    consumer.pause([partition])
    stopped[partition.partition] = reason
    metrics.partitions_stopped.labels(str(partition.partition), reason).set(1)


def forget(metrics: DeduplicatorMetrics, stopped: dict[int, str], partitions: list[int]) -> None:
    """The partitions went to another owner (or this one is leaving): it says so itself."""
    for partition in partitions:
        reason = stopped.pop(partition, None)
        if reason is not None:
            metrics.partitions_stopped.remove(str(partition), reason)
