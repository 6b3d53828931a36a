"""Stage 2's transactional calls are timed, retries included, into
exactly_deduplicator_transaction_call_seconds, and so is a commit's flush: where a commit's time
goes."""

import logging
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from deduplicator.loop import Deduplicator
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.retrying import retrying_with
from tests.kafka_helpers import failing_call


def _sample(metrics: DeduplicatorMetrics, name: str, call: str) -> float | None:
    return metrics.registry.get_sample_value(
        f"exactly_deduplicator_transaction_call_seconds_{name}", {"call": call}
    )


def test_a_call_is_timed_with_its_retries():
    metrics = DeduplicatorMetrics()
    retrying = retrying_with(lambda: None, lambda: False, metrics.observe_call)
    call, calls = failing_call([KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)])
    retrying("send_offsets_to_transaction", call)
    assert len(calls) == 2
    assert _sample(metrics, "count", "send_offsets_to_transaction") == 1
    # The retry waited call_retrying's back-off: the time a user sees includes it.
    assert _sample(metrics, "sum", "send_offsets_to_transaction") >= 0.5  # type: ignore[operator]


def test_a_failed_call_is_not_timed():
    metrics = DeduplicatorMetrics()
    retrying = retrying_with(lambda: None, lambda: False, metrics.observe_call)
    call, _calls = failing_call([KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)])
    with pytest.raises(KafkaException):
        retrying("commit_transaction", call)
    assert _sample(metrics, "count", "commit_transaction") is None


def test_a_slow_call_is_logged_with_its_time(caplog, monkeypatch):
    # What an operator reads after a stall: which call held the copy, and how long.
    monkeypatch.setattr("deduplicator.retrying.SLOW_CALL_S", 0.05)
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    retrying = retrying_with(lambda: None, lambda: False, DeduplicatorMetrics().observe_call)
    retrying("commit_transaction", lambda: None)
    assert not caplog.records
    retrying("commit_transaction", lambda: time.sleep(0.1))
    (record,) = caplog.records
    assert record.getMessage() == "slow call"
    fields = record.event_fields  # type: ignore[attr-defined]
    assert fields["operation"] == "commit_transaction"
    assert fields["seconds"] >= 0.1


class _Flushing:
    """A producer's flush() as _flushed sees it: the records still queued after each slice, and
    a delivery failure that arrives during the last one (its callback runs inside flush)."""

    def __init__(self, queued: list[int], fails_at_end: list[KafkaError] | None = None) -> None:
        self._queued = queued
        self._fails_at_end = fails_at_end

    def flush(self, _timeout: float) -> int:
        left = self._queued.pop(0)
        if left == 0 and self._fails_at_end is not None:
            self._fails_at_end.append(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        return left


def _flushed(producer: _Flushing, failures: list[KafkaError]) -> tuple[bool, DeduplicatorMetrics]:
    metrics = DeduplicatorMetrics()
    owner = SimpleNamespace(producer=producer, metrics=metrics)
    return Deduplicator._flushed(owner, failures), metrics


def test_a_commits_flush_is_timed_with_the_calls():
    held, metrics = _flushed(_Flushing([3, 0]), [])
    assert held
    assert _sample(metrics, "count", "flush") == 1


def test_a_flush_whose_last_record_failed_is_neither_held_nor_timed():
    failures: list[KafkaError] = []
    held, metrics = _flushed(_Flushing([2, 0], fails_at_end=failures), failures)
    assert not held  # the caller aborts the transaction
    assert _sample(metrics, "count", "flush") is None
