"""Aborts in a row with no commit between them: one ERROR line once they last, and one INFO line
when a commit ends them (pure logic: the clock is given)."""

from __future__ import annotations

import logging

from deduplicator.abort_streak import AbortStreak


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == level and r.name == "deduplicator.loop"]


def test_aborts_that_last_are_an_error_once_and_a_commit_ends_them(caplog):
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    clock = _Clock()
    streak = AbortStreak(say_after_s=300, clock=clock)
    for _ in range(30):  # one every 10 s: 290 s from the first to the last
        streak.aborted("Broker: Unknown topic or partition")
        clock.now += 10
    assert _lines(caplog, logging.ERROR) == []
    for _ in range(5):
        streak.aborted("Broker: Unknown topic or partition")
        clock.now += 10
    [error] = _lines(caplog, logging.ERROR)
    assert error.event_fields["aborts"] == 31  # type: ignore[attr-defined]
    assert error.event_fields["for_s"] == 300  # type: ignore[attr-defined]
    assert error.event_fields["error"] == "Broker: Unknown topic or partition"  # type: ignore[attr-defined]
    streak.committed()
    [ended] = _lines(caplog, logging.INFO)
    assert ended.event_fields["aborts"] == 35  # type: ignore[attr-defined]
    assert streak.aborts == 0


def test_a_commit_between_aborts_starts_the_count_again(caplog):
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    clock = _Clock()
    streak = AbortStreak(say_after_s=300, clock=clock)
    for _ in range(10):
        streak.aborted("Broker: Not enough in-sync replicas")
        clock.now += 100
        streak.committed()  # each abort mended by the next attempt
    assert caplog.records == []
    streak.aborted("Broker: Not enough in-sync replicas")
    assert streak.aborts == 1


def test_aborts_a_quiet_spell_apart_or_handled_are_not_one_streak(caplog):
    """An idle flow's abort hours after the last one, or after a refusal stopped its
    partitions, is not taken for hours of aborts."""
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    clock = _Clock()
    streak = AbortStreak(say_after_s=300, clock=clock)
    streak.aborted("Broker: Message size too large")
    clock.now += 3 * 3600
    streak.aborted("Broker: Not enough in-sync replicas")
    assert (streak.aborts, caplog.records) == (1, [])
    streak.handled()
    clock.now += 400
    streak.aborted("Broker: Not enough in-sync replicas")
    assert (streak.aborts, caplog.records) == (1, [])
