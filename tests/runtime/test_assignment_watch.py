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
    assert "other members" in str(fields["hint"])


def test_partitions_in_time_or_no_subscription_say_nothing(caplog):
    clock = _Clock()
    watch = _watch(clock)
    watch.subscribed(0)
    clock.now += 1
    watch.given(0)  # an empty assignment (cooperative) is no end of the wait ...
    watch.given(3)  # ... partitions are
    clock.now += UNASSIGNED_WARN_S * 2
    watch.check()
    watch.subscribed(3)  # a new subscription while holding partitions: no wait
    clock.now += UNASSIGNED_WARN_S * 2
    watch.check()
    watch.subscribed(0)
    watch.unsubscribed()  # nothing to wait for
    clock.now += UNASSIGNED_WARN_S * 2
    watch.check()
    assert _lines(caplog) == []


def test_a_rebalance_that_takes_every_partition_is_no_wait(caplog):
    # The group served this consumer: losing its partitions to a rebalance (eager revokes
    # everything) or to a new member, or being unsubscribed, starts no wait.
    clock = _Clock()
    watch = _watch(clock)
    watch.subscribed(0)
    watch.given(2)
    watch.unsubscribed()  # no topic left: what it held is revoked afterwards
    clock.now += UNASSIGNED_WARN_S * 2
    watch.check()
    assert _lines(caplog) == []


def test_partitions_after_the_warning_are_reported_from_the_subscription(caplog):
    clock = _Clock()
    watch = _watch(clock)
    watch.subscribed(0)
    clock.now += UNASSIGNED_WARN_S
    watch.check()
    clock.now += 5
    watch.given(2)
    watch.check()
    assert [(level, msg) for level, msg, _ in _lines(caplog)] == [
        ("WARNING", "subscribed but given no partition"),
        ("INFO", "partitions assigned after a long wait"),
    ]
    assert _lines(caplog)[1][2]["waited_s"] == UNASSIGNED_WARN_S + 5
    # A later start with nothing (a fenced member's new consumer) is watched anew.
    watch.subscribed(0)
    clock.now += UNASSIGNED_WARN_S
    watch.check()
    assert len(_lines(caplog)) == 3
