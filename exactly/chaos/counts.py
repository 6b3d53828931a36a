"""What the chaos run's live line shows: each role instance's counters, summed across its
restarts and scraped best effort, with the traffic's and the destination's counts."""

from __future__ import annotations

from exactly.chaos.options import DEDUPLICATORS
from exactly.chaos.world import World
from exactly.harness.metrics import (
    DEDUPLICATOR_DUPLICATES,
    OFFSETSYNC_CYCLES,
    OFFSETSYNC_FAILED_CYCLES,
    REPLICATOR_RECORDS,
    RestartSafeCounters,
    observe_roles,
)
from exactly.harness.progress import RoleStatus, Snapshot
from exactly.harness.traffic import SampleTraffic
from exactly.roles import OFFSETSYNC, REPLICATOR

_SCRAPE_TIMEOUT_S = 0.2


def role_counters() -> dict[str, RestartSafeCounters]:
    """Each instance's counters that the live line and the failovers read."""
    return {
        REPLICATOR: RestartSafeCounters([REPLICATOR_RECORDS]),
        **{name: RestartSafeCounters([DEDUPLICATOR_DUPLICATES]) for name in DEDUPLICATORS},
        OFFSETSYNC: RestartSafeCounters([OFFSETSYNC_CYCLES, OFFSETSYNC_FAILED_CYCLES]),
    }


def scrape_roles(counters: dict[str, RestartSafeCounters], world: World | None) -> None:
    """The roles' counters for the live line, best effort."""
    if world is None:
        return
    processes = {name: instance.process for name, instance in world.instances.items()}
    observe_roles(counters, processes, timeout_s=_SCRAPE_TIMEOUT_S, skip=world.held)


def _total(
    counters: dict[str, RestartSafeCounters], names: tuple[str, ...], metric: str
) -> int | None:
    totals = [t for name in names if (t := counters[name].total(metric)) is not None]
    return sum(totals) if totals else None


def snapshot(
    phase: str,
    traffic: SampleTraffic | None,
    world: World | None,
    counters: dict[str, RestartSafeCounters],
    destination: int,
) -> Snapshot:
    counts = traffic.counts if traffic is not None else None
    instances = world.instances if world is not None else {}
    return Snapshot(
        phase=phase,
        committed=counts.committed if counts else 0,
        aborted=counts.aborted if counts else 0,
        staged=_total(counters, (REPLICATOR,), REPLICATOR_RECORDS),
        destination=destination,
        duplicates=_total(counters, DEDUPLICATORS, DEDUPLICATOR_DUPLICATES),
        orphans=None,
        dead_letters=None,
        roles=tuple(
            RoleStatus(name, i.process.is_running(), i.process.pid, i.process.starts)
            for name, i in instances.items()
        ),
    )
