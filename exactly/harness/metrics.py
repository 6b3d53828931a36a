"""The roles' counters, read from their Prometheus `/metrics` and summed across restarts.

A role's counters start from zero in every process, and a SIGKILLed one is never scraped
again: the last value it showed is added to the total when it comes back. What it did between
that last scrape and the kill is not counted, so the live numbers are a close lower bound; the
verdict, not these, is exact.

Every read is best effort: a role that is starting, restarting or killed answers nothing, and a
metric a role does not (yet) expose is None, shown as "-". The display never fails on them.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from localkafka import RoleProcess

REPLICATOR_RECORDS = "exactly_replicator_records_total"
DEDUPLICATOR_DUPLICATES = "exactly_deduplicator_duplicates_dropped_total"
DEDUPLICATOR_ORPHANS = "exactly_deduplicator_orphans_total"
DEDUPLICATOR_DEAD_LETTERS = "exactly_deduplicator_dead_letters_total"
OFFSETSYNC_CYCLES = "exactly_offsetsync_cycle_seconds_count"  # every cycle, failed ones too
OFFSETSYNC_FAILED_CYCLES = "exactly_offsetsync_cycle_failures_total"
OFFSETSYNC_GROUPS = "exactly_offsetsync_groups"  # a gauge per state, after the last cycle
_SCRAPE_TIMEOUT_S = 0.5


def scrape(port: int, timeout_s: float = _SCRAPE_TIMEOUT_S) -> dict[str, float] | None:
    """Every sample of the role on `port`, summed over labels by sample name; None if it does
    not answer (starting, killed) or answers something unparsable."""
    text = _metrics_text(port, timeout_s)
    return None if text is None else parse_samples(text)


def scrape_labelled(
    port: int, name: str, label: str, timeout_s: float = _SCRAPE_TIMEOUT_S
) -> dict[str, float] | None:
    """The samples called `name` of the role on `port`, by the value of their `label` (a
    gauge per state, say); None as scrape() says it."""
    text = _metrics_text(port, timeout_s)
    if text is None:
        return None
    try:
        return {
            sample.labels.get(label, ""): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name
        }
    except (ValueError, TypeError, IndexError):
        return None


def _metrics_text(port: int, timeout_s: float) -> str | None:
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body: bytes = response.read()
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return body.decode("utf-8", errors="replace")


def parse_samples(text: str) -> dict[str, float] | None:
    totals: dict[str, float] = defaultdict(float)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                totals[sample.name] += sample.value
    except (ValueError, TypeError, IndexError):
        return None
    return dict(totals)


class RestartSafeCounters:
    """Counters of one role, kept across its restarts (see the module docstring)."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = tuple(names)
        self._finished: dict[str, float] = defaultdict(float)  # all earlier processes
        self._current: dict[str, float] = {}  # the running process, last scrape
        self._start = 0

    def observe(self, start: int, samples: Mapping[str, float] | None) -> None:
        """What the role's `start`-th process showed now (None: nothing, this time)."""
        if start != self._start:
            for name, value in self._current.items():
                self._finished[name] += value
            self._current = {}
            self._start = start
        if samples is None:
            return
        for name in self._names:
            if name in samples:
                self._current[name] = samples[name]

    def total(self, name: str) -> int | None:
        """The count over every process so far, or None if no process ever showed `name`."""
        if name not in self._current and name not in self._finished:
            return None
        return int(self._finished.get(name, 0.0) + self._current.get(name, 0.0))


def observe_roles(
    counters: Mapping[str, RestartSafeCounters],
    processes: Mapping[str, RoleProcess],
    *,
    timeout_s: float = _SCRAPE_TIMEOUT_S,
    skip: Callable[[str], bool] = lambda name: False,
) -> None:
    """Scrape each running role that has counters into them; a role that `skip` names (one a
    fault holds frozen, which would answer nothing until the timeout) is left for next time."""
    for name, role_counters in counters.items():
        process = processes.get(name)
        if process is None or skip(name):
            continue
        port = process.metrics_port
        samples = scrape(port, timeout_s) if port is not None and process.is_running() else None
        role_counters.observe(process.starts, samples)
