"""The roles' counters as the demo and the chaos run read them: scraped from each role's
`/metrics` over HTTP and summed across its restarts (exactly/harness/metrics.py)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from exactly.harness.metrics import RestartSafeCounters, observe_roles, scrape_labelled
from localkafka import free_ports

CYCLES = "exactly_offsetsync_cycle_seconds_count"
NAME = "exactly_offsetsync_cycle_seconds"


@dataclass
class _Process:
    """What observe_roles reads of a RoleProcess."""

    metrics_port: int | None
    starts: int
    running: bool = True

    def is_running(self) -> bool:
        return self.running


def _serve(cycles: int) -> tuple[int, Histogram]:
    """A role process's metrics endpoint, as offsetsync's: a histogram of cycles so far."""
    registry = CollectorRegistry()
    histogram = Histogram(NAME, "", registry=registry)
    _cycle(histogram, cycles)
    (port,) = free_ports(1)
    start_http_server(port, addr="127.0.0.1", registry=registry)
    return port, histogram


def _cycle(histogram: Histogram, times: int) -> None:
    for _ in range(times):
        histogram.observe(0.1)


def test_counts_are_summed_across_restarts_and_a_skipped_or_stopped_role_keeps_its_total():
    port, first_life = _serve(5)
    process = _Process(port, starts=1)
    counters = {"offsetsync": RestartSafeCounters([CYCLES])}
    observe_roles(counters, {"offsetsync": process})
    assert counters["offsetsync"].total(CYCLES) == 5

    _cycle(first_life, 2)  # a frozen process is not asked; it answers next time
    observe_roles(counters, {"offsetsync": process}, skip=lambda name: True)
    assert counters["offsetsync"].total(CYCLES) == 5
    observe_roles(counters, {"offsetsync": process})
    assert counters["offsetsync"].total(CYCLES) == 7

    # Killed and started again: a new process counts from zero on a new endpoint.
    process.running = False
    observe_roles(counters, {"offsetsync": process})
    assert counters["offsetsync"].total(CYCLES) == 7
    process.metrics_port, _second_life = _serve(3)
    process.starts, process.running = 2, True
    observe_roles(counters, {"offsetsync": process})
    assert counters["offsetsync"].total(CYCLES) == 10


def test_a_role_that_never_answered_has_no_total_not_zero():
    counters = {"replicator": RestartSafeCounters([CYCLES])}
    observe_roles(counters, {"replicator": _Process(None, starts=1)})
    observe_roles(counters, {})  # not started yet
    assert counters["replicator"].total(CYCLES) is None


def test_a_gauge_per_state_is_read_by_its_label_and_nothing_answers_none():
    registry = CollectorRegistry()
    groups = Gauge("exactly_offsetsync_groups", "", ["state"], registry=registry)
    groups.labels("synced").set(1)
    groups.labels("waiting").set(1)
    (port,) = free_ports(1)
    start_http_server(port, addr="127.0.0.1", registry=registry)
    assert scrape_labelled(port, "exactly_offsetsync_groups", "state") == {
        "synced": 1.0,
        "waiting": 1.0,
    }
    (closed,) = free_ports(1)
    assert scrape_labelled(closed, "exactly_offsetsync_groups", "state") is None
