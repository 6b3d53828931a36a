"""What a consume error at one partition does to it, without a broker (invariant 7): a batch the
client could not decode leaves a gap, so its partition stops; a broker's error answer to a fetch
is asked again by the client from the same position, so the partition goes on, counted and
warned about once a minute."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from replicator.consume_errors import on_message_error
from replicator.lanes import Lane
from replicator.metrics import ReplicatorMetrics


class _Consumer:
    """The one call stopping a partition makes."""

    def __init__(self) -> None:
        self.paused: list[TopicPartition] = []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.extend(partitions)


def _consumed(code: int, lane: Lane, metrics: ReplicatorMetrics, consumer: _Consumer) -> None:
    error = KafkaError(code)
    message = Message(topic=lane.topic, partition=lane.partition, offset=120, error=error)
    lanes = {(lane.topic, lane.partition): lane}
    handed_back = on_message_error(consumer, metrics, lanes, "group", message, error)  # type: ignore[arg-type]
    assert handed_back is None


def _lane() -> Lane:
    return Lane("orders", 3, 1, b"\x01" * 16, committable=100, committed=100)


@pytest.mark.parametrize("code", [KafkaError._BAD_MSG, KafkaError._BAD_COMPRESSION])
def test_a_batch_the_client_could_not_decode_stops_its_partition(code: int):
    consumer, metrics, lane = _Consumer(), ReplicatorMetrics(), _lane()
    _consumed(code, lane, metrics, consumer)
    assert (lane.stopped, consumer.paused) == ("unreadable_record", [TopicPartition("orders", 3)])
    stopped = metrics.registry.get_sample_value(
        "exactly_replicator_partitions_stopped",
        {"topic": "orders", "partition": "3", "reason": "unreadable_record"},
    )
    assert stopped == 1


def test_a_broker_refusing_fetches_is_counted_warned_once_a_minute_and_the_partition_goes_on(
    caplog: pytest.LogCaptureFixture,
):
    consumer, metrics, lane = _Consumer(), ReplicatorMetrics(), _lane()
    for _ in range(3):
        _consumed(KafkaError.REQUEST_TIMED_OUT, lane, metrics, consumer)
    assert (lane.stopped, consumer.paused) == (None, [])
    counted = metrics.registry.get_sample_value(
        "exactly_replicator_client_errors_total",
        {"cluster": "source", "code": "REQUEST_TIMED_OUT"},
    )
    assert counted == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == ["source fetch refused; fetched again"]


def test_a_record_too_large_to_fetch_stops_its_partition():
    consumer, metrics, lane = _Consumer(), ReplicatorMetrics(), _lane()
    _consumed(KafkaError.MSG_SIZE_TOO_LARGE, lane, metrics, consumer)
    assert lane.stopped == "unreadable_record"
