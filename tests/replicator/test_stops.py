"""Stopping a source partition for data loss without a broker (invariant 7): the partition
stops whether or not the size of the loss can be read."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from replicator.lanes import Lane
from replicator.metrics import ReplicatorMetrics
from replicator.stops import stop_for_data_loss


class _Consumer:
    """The two calls stop_for_data_loss makes; the watermarks as given, or their failure."""

    def __init__(self, watermarks: tuple[int, int] | KafkaException):
        self.watermarks = watermarks
        self.paused: list[TopicPartition] = []

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float) -> tuple[int, int]:
        if isinstance(self.watermarks, KafkaException):
            raise self.watermarks
        return self.watermarks

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.extend(partitions)


def _lost(metrics: ReplicatorMetrics) -> float | None:
    return metrics.registry.get_sample_value(
        "exactly_replicator_records_lost_total", {"topic": "orders", "partition": "3"}
    )


def _stopped(metrics: ReplicatorMetrics) -> float | None:
    return metrics.registry.get_sample_value(
        "exactly_replicator_partitions_stopped",
        {"topic": "orders", "partition": "3", "reason": "data_loss"},
    )


def _detail(caplog: pytest.LogCaptureFixture) -> str:
    (record,) = [r for r in caplog.records if r.name == "replicator.loop"]
    assert (record.levelno, record.getMessage()) == (logging.ERROR, "source partition stopped")
    return str(record.event_fields["detail"])  # type: ignore[attr-defined]


def _lane() -> Lane:
    return Lane("orders", 3, 1, b"\x01" * 16, committable=100, committed=100)


def test_records_deleted_unread_are_counted_and_the_partition_stops(
    caplog: pytest.LogCaptureFixture,
):
    consumer, metrics, lane = _Consumer((140, 900)), ReplicatorMetrics(), _lane()
    stop_for_data_loss(consumer, metrics, lane)  # type: ignore[arg-type]
    assert (lane.stopped, consumer.paused) == ("data_loss", [TopicPartition("orders", 3)])
    assert (_lost(metrics), _stopped(metrics)) == (40, 1)
    assert "40 records were deleted before stage 1 read them" in _detail(caplog)


def test_a_log_start_that_cannot_be_read_still_stops_the_partition(
    caplog: pytest.LogCaptureFixture,
):
    """The source leader moved as the loss was found: the watermark call fails. The process
    goes on, the partition stops, and the log says the count is unknown."""
    failure = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get watermark offsets"))
    consumer, metrics, lane = _Consumer(failure), ReplicatorMetrics(), _lane()
    stop_for_data_loss(consumer, metrics, lane)  # type: ignore[arg-type]
    assert (lane.stopped, consumer.paused) == ("data_loss", [TopicPartition("orders", 3)])
    assert (_lost(metrics), _stopped(metrics)) == (None, 1)
    assert "how many records were deleted is unknown" in _detail(caplog)
