"""The two producer workarounds, with a stand-in producer: what they decide, not what Kafka does
(their use against real Kafka is in the stage 2, demo and data-mix tests)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from runtime import FencedError, abort_or_replace, produce_when_room


class StandInProducer:
    def __init__(self, *, full_for: int = 0, abort_error: KafkaError | None = None) -> None:
        self.full_for = full_for
        self.abort_error = abort_error
        self.produced: list[tuple[str, dict[str, object]]] = []
        self.calls: list[str] = []

    def produce(self, topic: str, **record: object) -> None:
        if self.full_for > 0:
            self.full_for -= 1
            raise BufferError("Local: Queue full")
        self.produced.append((topic, record))

    def poll(self, timeout: float) -> int:
        self.calls.append("poll")
        return 0

    def flush(self, timeout: float) -> int:
        self.calls.append("flush")
        return 0

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        if self.abort_error is not None:
            raise KafkaException(self.abort_error)

    def purge(self) -> None:
        self.calls.append("purge")

    def close(self) -> None:
        self.calls.append("close")  # flushes without a bound: never called


def test_a_full_queue_is_served_until_the_record_fits():
    producer = StandInProducer(full_for=3)
    assert produce_when_room(producer, "t", key=b"k", value=b"v", partition=2)
    assert producer.produced == [("t", {"key": b"k", "value": b"v", "partition": 2})]
    assert producer.calls == ["poll"] * 3


def test_giving_up_while_full_produces_nothing():
    producer = StandInProducer(full_for=10)
    answers = iter([True, True, False])  # asked after each wait
    assert not produce_when_room(producer, "t", value=b"v", keep_waiting=lambda: next(answers))
    assert producer.produced == []
    assert producer.calls == ["poll"] * 3


def test_an_abort_flushes_first_and_keeps_the_producer():
    producer = StandInProducer()
    assert (
        abort_or_replace(producer, lambda: pytest.fail("no new producer needed"), 1.0) is producer
    )
    assert producer.calls == ["flush", "abort"]


def test_a_failed_abort_replaces_the_producer():
    producer = StandInProducer(abort_error=KafkaError(KafkaError.INVALID_TXN_STATE, fatal=True))
    replacement = StandInProducer()
    assert abort_or_replace(producer, lambda: replacement, 1.0) is replacement
    # Purged, not closed: close() would wait for records in flight to a broker that answers
    # nothing, up to the transaction timeout.
    assert producer.calls == ["flush", "abort", "purge", "flush"]


def test_a_fenced_producer_is_not_replaced():
    producer = StandInProducer(abort_error=KafkaError(KafkaError._FENCED, fatal=True))
    with pytest.raises(FencedError):
        abort_or_replace(producer, lambda: pytest.fail("a fenced instance must stop"), 1.0)
