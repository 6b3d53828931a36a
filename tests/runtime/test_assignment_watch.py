"""A subscribed consumer given no partition for long says so once per wait, with the likely
cause for its protocol, and says when partitions come at last (runtime/assignment_watch.py)."""

from __future__ import annotations

import logging

import pytest

from runtime.assignment_watch import UNASSIGNED_WARN_S, AssignmentWatch


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watch(clock: _Clock, *, consumer_group_protocol: bool = False) -> AssignmentWatch:
    return AssignmentWatch(
        "source", "g1", consumer_group_protocol=consumer_group_protocol, clock=clock
    )


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, dict[str, object]]]:
    return [
        (r.levelname, r.getMessage(), dict(getattr(r, "event_fields", {})))
        for r in caplog.records
        if r.name == "runtime.assignment_watch"
    ]


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.assignment_watch")


def test_a_wait_past_the_threshold_warns_once_naming_the_group_and_the_protocol(caplog):
    clock = _Clock()
    watch = _watch(clock, consumer_group_protocol=True)
    watch.subscribed(0)
    clock.now += UNASSIGNED_WARN_S - 0.1
    watch.check()
    assert _lines(caplog) == []
    clock.now += 0.1
    watch.check()
    clock.now += 600
    watch.check()
    [(level, msg, fields)] = _lines(caplog)
    assert (level, msg) == ("WARNING", "subscribed but given no partition")
    assert (fields["group"], fields["consumer"]) == ("g1", "source")
    assert fields["waited_s"] == UNASSIGNED_WARN_S
    assert "group.protocol=consumer" in str(fields["hint"])


def test_the_classic_protocol_gets_its_own_hint(caplog):
    clock = _Clock()
    watch = _watch(clock)
    watch.subscribed(0)
    clock.now += UNASSIGNED_WARN_S
    watch.check()
    [(_, _, fields)] = _lines(caplog)
    assert "group.protocol" not in str(fields["hint"])


def test_partitions_in_time_or_no_subscription_say_nothing(caplog):
    clock = _Clock()
    watch = _watch(clock)
    watch.subscribed(0)
    clock.now += 1
    watch.held(3)
    clock.now += UNASSIGNED_WARN_S * 2
    watch.check()
    watch.subscribed(3)  # a new subscription while holding partitions: no wait
    clock.now += UNASSIGNED_WARN_S * 2
    watch.check()
    watch.held(0)
    watch.unsubscribed()  # nothing to wait for
    clock.now += UNASSIGNED_WARN_S * 2
    watch.check()
    assert _lines(caplog) == []


def test_partitions_after_the_warning_are_reported_and_a_later_wait_warns_again(caplog):
    clock = _Clock()
    watch = _watch(clock)
    watch.subscribed(0)
    clock.now += UNASSIGNED_WARN_S
    watch.check()
    clock.now += 5
    watch.held(2)
    watch.held(0)  # every partition revoked: a new wait
    clock.now += UNASSIGNED_WARN_S
    watch.check()
    assert [(level, msg) for level, msg, _ in _lines(caplog)] == [
        ("WARNING", "subscribed but given no partition"),
        ("INFO", "partitions assigned after a long wait"),
        ("WARNING", "subscribed but given no partition"),
    ]
    assert _lines(caplog)[1][2]["waited_s"] == UNASSIGNED_WARN_S + 5
