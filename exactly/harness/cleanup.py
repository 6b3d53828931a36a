"""The clean-up `exactly demo` and `exactly chaos` run whichever way they end (a verdict, an
error, Ctrl-C): display, traffic, destination watch, roles, clusters, lock, in that order.

It never raises: a step that fails is said, and the next one runs all the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from exactly.harness.clusters import DemoClusters, DemoLock
from exactly.harness.destination import DestinationWatch
from exactly.harness.progress import DemoView
from exactly.harness.traffic import SampleTraffic
from localkafka import RoleProcess


def clean_up(
    view: DemoView,
    *,
    traffics: Sequence[SampleTraffic],
    watch: DestinationWatch | None,
    roles: Mapping[str, RoleProcess],
    stop_role: Callable[[RoleProcess], object],
    clusters: DemoClusters,
    lock: DemoLock,
) -> bool:
    """Stop everything a run started; whether nothing is left running."""

    def quietly(what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as exc:  # clean-up goes on with the next step whatever this one did
            view.say(f"{what} failed: {exc}", style="red")

    quietly("stopping the display", lambda: view.stop_live())
    for traffic in traffics:  # one per cluster that produces (two in active-active)
        quietly("stopping the sample producer", traffic.stop)
    if watch is not None:
        quietly("closing the destination consumer", watch.close)
    for name, process in roles.items():
        if process.is_running():
            quietly(f"stopping the {name}", functools.partial(stop_role, process))
    quietly("stopping the clusters", clusters.stop)
    lock.release()
    left = [f"{name} (pid {p.pid})" for name, p in roles.items() if p.is_running()]
    left += [f"cluster {name}" for name in clusters.running()]
    if left:
        view.say(f"still running after the clean-up: {', '.join(left)}", style="bold red")
    return not left
