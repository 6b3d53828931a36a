"""Stage 2's budget of producers left to hung calls: with it spent, a third hang waits for one
of their calls to end and goes on, and exits for a restart only if none ends (a coordinator the
network black-holes hangs every call until its request fails; tests/nodes/test_cut.py)."""

from __future__ import annotations

import threading

import pytest

import deduplicator.hung as hung_module
from deduplicator.hung import HungProducers
from deduplicator.limits import MAX_HUNG_PRODUCERS
from runtime.errors import ClientHungError


class _StuckProducer:
    """What HungProducers does with a producer once its call ended: purge and serve it."""

    def purge(self) -> None:
        pass

    def flush(self, timeout: float) -> int:
        return 0


def _hang(ends: threading.Event) -> ClientHungError:
    thread = threading.Thread(target=ends.wait, daemon=True)
    thread.start()
    return ClientHungError("send_offsets_to_transaction", 5.0, thread)


@pytest.fixture
def exits(monkeypatch) -> list[str]:
    said: list[str] = []

    def exit_hung(call: str, seconds: float) -> None:
        said.append(call)
        raise SystemExit(1)

    monkeypatch.setattr(hung_module, "exit_hung", exit_hung)
    return said


def test_a_hang_past_the_budget_waits_for_a_stuck_call_to_end_and_goes_on(exits):
    producers = HungProducers()
    first_ends, never = threading.Event(), threading.Event()
    producers.add(_StuckProducer(), _hang(first_ends))
    for _ in range(MAX_HUNG_PRODUCERS - 1):
        producers.add(_StuckProducer(), _hang(never))
    threading.Timer(0.3, first_ends.set).start()  # the black hole's request fails
    producers.add(_StuckProducer(), _hang(never))
    assert exits == []
    assert len(producers) == MAX_HUNG_PRODUCERS
    never.set()


def test_a_hang_past_the_budget_exits_when_no_stuck_call_ends(exits, monkeypatch):
    monkeypatch.setattr(hung_module, "HUNG_CALL_WAIT_S", 0.3)
    producers = HungProducers()
    never = threading.Event()
    for _ in range(MAX_HUNG_PRODUCERS):
        producers.add(_StuckProducer(), _hang(never))
    with pytest.raises(SystemExit):
        producers.add(_StuckProducer(), _hang(never))
    assert exits == ["send_offsets_to_transaction"]
    never.set()


@pytest.mark.parametrize(
    ("clean_status", "failing", "status"),
    [(0, False, 0), (3, False, 3), (3, True, 1)],
)
def test_leaving_with_a_producer_still_stuck_exits_with_the_drain_s_status(
    monkeypatch, clean_status, failing, status
):
    """A drain for renewed credentials ends with 3 even when a stuck producer makes stage 2
    leave without teardown: exit 0 would leave it stopped under a restart-on-failure policy."""
    exited: list[int] = []

    def _exit(code: int) -> None:
        exited.append(code)

    monkeypatch.setattr(hung_module.os, "_exit", _exit)
    producers = HungProducers()
    never = threading.Event()
    producers.add(_StuckProducer(), _hang(never))
    if failing:
        try:
            raise RuntimeError("on its way out")
        except RuntimeError:
            producers.leave(clean_status)
    else:
        producers.leave(clean_status)
    assert exited == [status]
    never.set()
