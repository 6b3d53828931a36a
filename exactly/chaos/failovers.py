"""The chaos run's consumer-group failovers, after the drain: the live group stops where it is,
a second group stops halfway on the source, offsetsync syncs both, and each must resume on the
target at exactly its next record."""

from __future__ import annotations

import time
from collections.abc import Callable

from exactly.chaos.errors import ChaosError
from exactly.chaos.livegroup import LiveGroup
from exactly.chaos.options import (
    FAILOVER_GROUP,
    FAILOVER_TOPIC,
    GROUPS,
    LIVE_GROUP,
    LIVE_TOPIC,
    ChaosOutcome,
)
from exactly.chaos.world import World
from exactly.harness.clusters import DemoClusters
from exactly.harness.errors import DemoError
from exactly.harness.failover import (
    GroupNotMovedError,
    StoppedGroup,
    await_moved,
    resume_and_compare,
    stop_halfway,
    stopped_at,
)
from exactly.harness.metrics import (
    OFFSETSYNC_CYCLES,
    OFFSETSYNC_FAILED_CYCLES,
    OFFSETSYNC_GROUPS,
    RestartSafeCounters,
    scrape_labelled,
)
from exactly.harness.progress import DemoView
from exactly.roles import OFFSETSYNC

# offsetsync cycles that must succeed after the groups stopped before their offsets on the
# target are read: the first may have fetched the source's offsets before the last commits.
_SYNC_CYCLES = 2
_SYNC_TIMEOUT_S = 120.0
_MOVE_TIMEOUT_S = 60.0


class Failovers:
    """Both groups' failovers, into the run's outcome. ``set_phase`` names what the run is
    doing; ``scrape_roles`` refreshes ``offsetsync``'s counters; ``tick_s`` is the run's tick."""

    def __init__(
        self,
        clusters: DemoClusters,
        view: DemoView,
        outcome: ChaosOutcome,
        *,
        set_phase: Callable[[str], None],
        scrape_roles: Callable[[], None],
        tick_s: float,
    ) -> None:
        self._clusters = clusters
        self.view = view
        self.outcome = outcome
        self._set_phase = set_phase
        self._scrape_roles = scrape_roles
        self._tick_s = tick_s

    def run(self, live: LiveGroup, world: World, counters: RestartSafeCounters) -> None:
        """A group offsetsync did not move in time is a verdict against the run (its reason in
        the outcome), not a failure of the run itself."""
        source = self._clusters.source.bootstrap_servers
        self._set_phase(f"stopping {LIVE_GROUP} and {FAILOVER_GROUP} on the source")
        stopped: list[StoppedGroup] = []
        try:
            stopped.append(stopped_at(source, LIVE_GROUP, LIVE_TOPIC, live.stop()))
        except (ChaosError, DemoError) as exc:
            self._failover_failed(LIVE_GROUP, str(exc))
        finally:
            self.outcome.live_group = live.counts
        stopped.append(stop_halfway(source, FAILOVER_GROUP, FAILOVER_TOPIC))
        self._set_phase("waiting for offsetsync to sync the stopped groups")
        self._await_sync_cycles(world, counters)
        for group in stopped:
            self._set_phase(f"moving {group.group} to the target")
            try:
                await_moved(self._clusters.target.bootstrap_servers, group, _MOVE_TIMEOUT_S)
            except GroupNotMovedError as exc:
                self._failover_failed(group.group, str(exc))
                continue
            result = resume_and_compare(self._clusters.target.bootstrap_servers, group)
            self.outcome.failovers[group.group] = result
            self.view.show_failover(result, group.group, group.topic)

    def _failover_failed(self, group: str, reason: str) -> None:
        self.outcome.failover_errors[group] = reason
        self.view.say(f"FAILOVER FAILED: {reason}", style="bold red")

    def _await_sync_cycles(self, world: World, counters: RestartSafeCounters) -> None:
        """Until offsetsync has finished _SYNC_CYCLES successful cycles from now and its last
        cycle found every group synced (bounded): its commits on the target then translate the
        groups' last source commits. A cycle succeeds while one group's offsets cannot be
        fetched (that group waits for the next), so cycles alone are not enough: a run found
        offsetsync unable to fetch chaos-live's offsets for a minute after a source broker
        restart. A timeout is said, and the comparison shows what offsetsync had done by then."""
        process = world.instances[OFFSETSYNC].process

        def successful() -> int:
            self._scrape_roles()
            cycles = counters.total(OFFSETSYNC_CYCLES) or 0
            return cycles - (counters.total(OFFSETSYNC_FAILED_CYCLES) or 0)

        def synced() -> float:
            port = process.metrics_port
            states = None if port is None else scrape_labelled(port, OFFSETSYNC_GROUPS, "state")
            return (states or {}).get("synced", 0.0)

        wanted = successful() + _SYNC_CYCLES
        deadline = time.monotonic() + _SYNC_TIMEOUT_S
        while successful() < wanted or synced() < len(GROUPS):
            if time.monotonic() > deadline:
                self.view.say(
                    f"offsetsync did not sync {', '.join(GROUPS)} within "
                    f"{_SYNC_TIMEOUT_S:.0f} s of their stop",
                    style="bold red",
                )
                return
            world.supervise()
            time.sleep(self._tick_s)
