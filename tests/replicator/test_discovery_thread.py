"""The hand-over between the discovery thread and the copy loop (replicator/discovery_thread.py):
the loop never waits for a round, gets each finished one whole, and ends on a round's error."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError

from replicator.discovery_thread import DiscoveryThread
from runtime import NotAuthorizedError

INTERVAL_S = 0.01


def _await(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_take_answers_at_once_while_a_round_hangs_on_a_dead_broker():
    entered, release = threading.Event(), threading.Event()

    def hanging_round() -> str:
        entered.set()
        release.wait(30)  # an admin call waiting out its 30 s timeout
        return "found"

    thread = DiscoveryThread(hanging_round, INTERVAL_S)
    thread.start()
    try:
        assert entered.wait(5)
        started = time.monotonic()
        for _ in range(100):
            assert thread.take() is None
        assert time.monotonic() - started < 0.5
    finally:
        release.set()
        thread.join(5)
    assert thread.take() == "found"  # what the round found once it came back


def test_each_finished_round_is_handed_over_once_the_newest_replacing_one_not_taken():
    permits = threading.Semaphore(0)
    done: list[int] = []

    def counted_round() -> int:
        assert permits.acquire(timeout=5)
        done.append(len(done) + 1)
        return len(done)

    thread = DiscoveryThread(counted_round, INTERVAL_S)
    thread.start()
    try:
        for _ in range(3):
            permits.release()
        _await(lambda: len(done) == 3)
        assert thread.take() == 3  # the newest: each round is whole, older ones are stale
        assert thread.take() is None  # never the same one twice
    finally:
        permits.release()  # the round waiting for a permit ends
        thread.join(5)


def test_a_failed_round_hands_over_nothing_and_the_next_round_still_comes():
    answers = iter([None, None, "found"])
    calls: list[int] = []

    def flaky_round() -> str | None:
        calls.append(1)
        return next(answers, None)

    thread = DiscoveryThread(flaky_round, INTERVAL_S)
    thread.start()
    try:
        _await(lambda: len(calls) >= 3)
        _await(lambda: thread.take() == "found" or len(calls) > 10)
    finally:
        thread.join(5)
    assert len(calls) >= 3


def test_a_rounds_refusal_is_raised_by_take_as_it_was_raised():
    refused = NotAuthorizedError(
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        cluster="source",
        operation="DESCRIBE_CONFIGS",
        resource="TOPIC",
        name="orders",
    )

    def refused_round() -> str:
        raise refused

    thread = DiscoveryThread(refused_round, INTERVAL_S)
    thread.start()
    try:
        _await(lambda: not thread._thread.is_alive())  # no round after a refusal
        with pytest.raises(NotAuthorizedError) as raised:
            thread.take()
        assert raised.value is refused
        assert "DESCRIBE_CONFIGS" in str(raised.value)
    finally:
        thread.join(5)


def test_join_ends_the_thread_and_no_round_starts_after_stop():
    calls: list[int] = []
    thread = DiscoveryThread(lambda: calls.append(1), INTERVAL_S)
    thread.start()
    _await(lambda: len(calls) >= 1)
    thread.join(5)
    assert not any(t.name == "topic-discovery" and t.is_alive() for t in threading.enumerate())
    after = len(calls)
    time.sleep(10 * INTERVAL_S)
    assert len(calls) == after


def test_join_of_a_thread_never_started_returns_at_once():
    thread = DiscoveryThread(lambda: None, INTERVAL_S)  # start-up stopped before it started
    thread.join(5)
