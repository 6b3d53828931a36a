"""Invariant 7 in stage 1: stop one source partition by policy, and say so.

A stopped partition is paused, gauged and logged with its coordinates; its lane keeps its commit
point, so stopping loses nothing and whoever owns it next reads it again. The cases: a record too
large for staging, a record the client cannot deliver, records lost to retention, a topic
deleted and recreated under its name.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from replicator.discovery import Discovered
from replicator.errors import ReplicatorError
from replicator.lanes import Lane
from replicator.metrics import ReplicatorMetrics
from replicator.topics import StagingTopic
from runtime import get_logger

# The copy loop's logger: these lines were the loop's, and a log query selects on its logger name.
log = get_logger("replicator.loop")


def stop(
    consumer: Consumer,
    metrics: ReplicatorMetrics,
    lane: Lane,
    reason: str,
    detail: str,
    *,
    offset: int,
) -> None:
    """Invariant 7: stop one source partition by policy, and say so."""
    lane.stopped = reason
    consumer.pause([TopicPartition(lane.topic, lane.partition)])
    metrics.partitions_stopped.labels(lane.topic, str(lane.partition), reason).set(1)
    log.error(
        "source partition stopped",
        reason=reason,
        topic=lane.topic,
        partition=lane.partition,
        offset=offset,
        detail=detail,
    )


def stop_too_large(
    consumer: Consumer,
    metrics: ReplicatorMetrics,
    lane: Lane,
    staging: StagingTopic,
    size: int,
    offset: int,
) -> None:
    """A record at ``offset`` whose envelope alone, of ``size`` bytes, does not fit staging."""
    stop(
        consumer,
        metrics,
        lane,
        "record_too_large",
        f"source record of {size} bytes (in its envelope) does not fit staging "
        f"{staging.name} (max.message.bytes {staging.max_message_bytes})",
        offset=offset,
    )


def stop_for_data_loss(consumer: Consumer, metrics: ReplicatorMetrics, lane: Lane | None) -> None:
    """The lane's committed offset fell behind source retention (``auto.offset.reset=error``):
    count what was deleted unread and stop it."""
    if lane is None or lane.stopped:
        return
    topic, partition = lane.topic, lane.partition
    behind = f"committed offset {lane.committable} fell behind source retention"
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    except KafkaException as exc:
        # The count is only a report: the partition stops all the same (a leader that moved
        # just then must not end the process, and the stop must not wait for the count).
        detail = f"{behind}; how many records were deleted is unknown (log start: {exc})"
    else:
        lost = max(0, low - lane.committable) if lane.committable >= 0 else 0
        metrics.records_lost.labels(topic, str(partition)).inc(lost)
        detail = f"{behind} (log start {low}): {lost} records were deleted before stage 1 read them"
    stop(consumer, metrics, lane, "data_loss", detail, offset=lane.committable)


def hold_recreated(
    consumer: Consumer, metrics: ReplicatorMetrics, lanes: Iterable[Lane], found: Discovered
) -> None:
    """Invariant 7: a lane never copies a recreated topic under the old topic's id and
    positions. Held back by policy, its partitions stay stopped. Under the policy
    replicate, discovery has recorded the new id, and the process ends so that the restart
    copies the new topic cleanly (its committed offsets went with the old one). Judged on
    the lanes themselves, not on a list of running topics taken when the round began:
    partitions assigned while it ran hold the id they were assigned with."""
    for lane in lanes:
        detail = found.recreated.get(lane.topic)
        if detail is not None:
            if not lane.stopped:
                stop(consumer, metrics, lane, "topic_recreated", detail, offset=lane.committable)
            continue
        topic = found.topics.get(lane.topic)
        if topic is not None and topic.topic_id != lane.topic_id:
            raise ReplicatorError(
                f"source topic {lane.topic} was deleted and recreated while replicated; "
                "exiting so that the restart replicates the new one (policy replicate)"
            )
