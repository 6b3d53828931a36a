"""Read a role's Prometheus endpoint the way an operator's scraper does: the kit's readers
(localkafka.scrape), and a wait for a value that fails the test."""

from __future__ import annotations

import time
import urllib.error

from localkafka import free_port
from localkafka.scrape import sample, scrape, total

__all__ = ["await_metric", "await_total", "free_port", "sample", "scrape", "total"]


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


def await_total(
    ports: int | str | tuple[int | str, ...], name: str, at_least: float, timeout_s: float = 60
) -> float:
    """The sum of every sample ``name`` over the roles on ``ports``, whatever its labels, once it
    is at least ``at_least`` (stage 2 counts a transaction's records just after its commit
    returns, which a reader of the destination can outrun); fails with the last sum."""
    wanted = ports if isinstance(ports, tuple) else (ports,)
    deadline = time.monotonic() + timeout_s
    while True:
        value = sum(total(scrape(port), name) for port in wanted)
        if value >= at_least:
            return value
        assert time.monotonic() < deadline, f"{name} = {value}, wanted at least {at_least}"
        time.sleep(0.2)
