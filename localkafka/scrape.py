"""Read a role's Prometheus endpoint the way an operator's scraper does (the tests, the benches)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from runtime.flow_label import FLOW_LABEL


def scrape(port: str | int, timeout_s: float = 10.0) -> str:
    """The text of ``/metrics`` on ``port`` of this machine; URLError while nothing listens."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        text: str = response.read().decode()
        return text


def sample(metrics: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with exactly these labels; None when there is none.
    The ``flow`` label every role adds (runtime/flow_label.py) is compared only when asked for:
    one process serves one flow."""
    for family in text_string_to_metric_families(metrics):
        for found in family.samples:
            own = found.labels
            if FLOW_LABEL not in labels:
                own = {key: value for key, value in own.items() if key != FLOW_LABEL}
            if found.name == name and own == labels:
                return float(found.value)
    return None


def total(metrics: str, name: str) -> float:
    """The sum of every sample called ``name``, whatever its labels (0 when there is none)."""
    return sum(
        found.value
        for family in text_string_to_metric_families(metrics)
        for found in family.samples
        if found.name == name
    )
