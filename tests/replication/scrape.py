"""Read a role's Prometheus endpoint the way an operator's scraper does."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: str | int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def sample(metrics: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` with exactly these labels; None when there is none."""
    for family in text_string_to_metric_families(metrics):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return None


def total(metrics: str, name: str) -> float:
    """The sum of every sample called `name`, whatever its labels (0 when there is none)."""
    return sum(
        found.value
        for family in text_string_to_metric_families(metrics)
        for found in family.samples
        if found.name == name
    )


def await_metric(
    port: str | int,
    names: str | tuple[str, ...],
    at_least: float,
    timeout_s: float = 60,
    **labels: str,
) -> float:
    """The sum of the samples ``names`` with exactly ``labels`` (an absent one counts 0) once it
    is at least ``at_least``, also while the role is still opening its port; fails with the last
    sum after the timeout."""
    wanted = (names,) if isinstance(names, str) else names
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            metrics = scrape(port)
            value = sum(sample(metrics, name, **labels) or 0 for name in wanted)
        except urllib.error.URLError:  # not listening yet
            value = 0
        if value >= at_least:
            return value
        assert time.monotonic() < deadline, f"{wanted} = {value}, wanted at least {at_least}"
        time.sleep(0.2)
