"""The chaos run's timeline, and the clean-up that leaves no process behind.

    fresh clusters -> sample topics -> traffic on (transactional, some transactions aborted)
    -> replicator, two deduplicators sharing the staging partitions, offsetsync; a consumer
       group (chaos/livegroup.py) reading and committing on the source throughout
    -> the fault window: chaos/plan.py's faults begin and end at their times, overlapping;
       a role that exits by itself is restarted, as an orchestrator would
       (clusters of one broker and a controller, or of several combined nodes: ``nodes``)
    -> traffic off -> drain: the destination holds as many records as were committed (bounded)
    -> the failover: the live group stops where it is, a second group stops halfway on the
       source, and each must resume on the target at exactly its next record
    -> SIGTERM every role (each must drain, exit 0) -> the record-by-record verdict -> report

Clean only when all hold: every source record once on the destination, in order, unchanged
(key, value, headers, timestamp); nothing of an aborted transaction; both groups resumed
exactly; every role drained. The clusters are the run's own, made fresh in its directory: a
chaos run never touches a cluster it was not given.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from exactly.chaos.counts import role_counters, scrape_roles, snapshot
from exactly.chaos.errors import ChaosError
from exactly.chaos.failovers import Failovers
from exactly.chaos.instances import add_links, start_instances
from exactly.chaos.livegroup import LiveGroup
from exactly.chaos.network import Toxiproxy, ensure_toxiproxy, link_name, listener_name
from exactly.chaos.options import (
    CLUSTERS,
    DEDUPLICATORS,
    INSTANCES,
    LIVE_GROUP,
    LIVE_TOPIC,
    ChaosOptions,
    ChaosOutcome,
)
from exactly.chaos.plan import Fault, Targets, count_by_kind, default_fault_count, plan_faults
from exactly.chaos.report import longest_stall, role_rows, stall_causes, write_report
from exactly.chaos.verdicts import audit_on_spark, compare, stop_roles
from exactly.chaos.window import FaultWindow
from exactly.chaos.world import World
from exactly.harness.audit import AuditResult
from exactly.harness.cleanup import clean_up
from exactly.harness.clusters import DemoClusters, DemoLock
from exactly.harness.destination import DestinationWatch
from exactly.harness.progress import DemoView, Snapshot
from exactly.harness.traffic import TOPICS, SampleTraffic, create_topics
from exactly.harness.verdict import Verdict
from exactly.roles import OFFSETSYNC
from localkafka import LocalCluster, default_state_dir

# The live group processes a quarter of the traffic's rate; its topic gets a third of it: it
# lags, and commits inside the log.
_LIVE_SHARE = 0.25
_TICK_S = 0.5
_SAMPLE_EVERY_S = 1.0
_SCRAPE_EVERY_S = 2.0
_WATCH_BUDGET_S = 0.2
_FIRST_RECORDS_TIMEOUT_S = 180.0
# Drained: the destination gained nothing for this long (and holds every certain record).
_QUIET_S = 5.0
# Every role is thawed once the window closes, so each link's toxics come off within seconds.
_HEAL_TIMEOUT_S = 60.0


def chaos_directory() -> Path:
    """The chaos run's clusters, logs and state, apart from the demo's and `exactly kafka`'s."""
    return default_state_dir() / "chaos"


class ChaosRun:
    def __init__(
        self, options: ChaosOptions, view: DemoView, directory: Path, report_dir: Path
    ) -> None:
        self.options = options
        self.report_dir = report_dir
        self.view = view
        self.directory = directory
        self.run_dir = directory / "run"
        self.outcome = ChaosOutcome()
        self._lock = DemoLock(directory)
        # Fresh every run (DemoClusters.start deletes the last run's), so a cluster of another
        # node count left by an earlier run is never reused.
        self._clusters = DemoClusters(
            directory, proxied=[listener_name(name) for name in INSTANCES], nodes=options.nodes
        )
        self._network: Toxiproxy | None = None
        self._counters = role_counters()
        self._next_scrape = 0.0
        self._traffic: SampleTraffic | None = None
        self._live: LiveGroup | None = None
        self._watch: DestinationWatch | None = None
        self._world: World | None = None
        self._faults: list[Fault] = []
        self._timeline: list[dict[str, object]] = []  # each fault: planned and as applied
        self._samples: list[dict[str, float]] = []
        self._phase = "starting"
        self._window_start = time.monotonic()  # reset when the fault window opens
        self._drain_s: float | None = None

    # -- the timeline -----------------------------------------------------------------------------

    def run(self) -> ChaosOutcome:
        window_s = self.options.minutes * 60
        asked = self.options.faults
        self._faults = self._plan(window_s)
        self._lock.acquire()
        self._start()
        assert self._traffic is not None
        kinds = ", ".join(f"{n} {kind}" for kind, n in count_by_kind(self._faults).items())
        self.view.say(
            f"{len(self._faults)} faults over {window_s:.0f} s ({kinds}), seed "
            f"{self.options.seed}; {self.options.rate:.0f} records/s into the source"
        )
        if asked is None and len(self._faults) < default_fault_count(window_s):
            self.view.say(
                f"({default_fault_count(window_s)} by default for {window_s:.0f} s; "
                f"{len(self._faults)} fit)"
            )
        self.view.start_live(self._snapshot())
        self._await_first_records()
        self._fault_window(window_s)
        self._traffic.stop()
        self._check_traffic()
        self._drain()
        self.view.stop_live(self._snapshot())
        self._fail_over()
        self._stop_roles()
        self.outcome.verdict = self._verdict()
        self.outcome.audit = self._audit()
        return self.outcome

    def _plan(self, window_s: float) -> list[Fault]:
        targets = Targets(
            roles=INSTANCES,
            deduplicators=DEDUPLICATORS,
            clusters=CLUSTERS,
            links=tuple(link_name(i, c) for i in INSTANCES for c in CLUSTERS),
            nodes=self.options.nodes,
        )
        asked = self.options.faults
        return plan_faults(
            self.options.seed,
            window_s,
            default_fault_count(window_s) if asked is None else asked,
            targets,
            fit=asked is None,
        )

    def _start(self) -> None:
        """Everything the fault window acts on: the clusters, their proxies, the traffic, the
        live group, the roles, and the watch on the destination."""
        self.view.say("toxiproxy for the network faults (built with Go on the first run)")
        toxiproxy = ensure_toxiproxy()
        nodes = self.options.nodes
        layout = f"{nodes} nodes each" if nodes > 1 else "one broker each"
        self.view.say(f"starting two fresh Kafka clusters ({layout}) in {self.directory}")
        self._clusters.start()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        self._start_network(toxiproxy)
        create_topics(self._clusters.source.bootstrap_servers)
        self._traffic = SampleTraffic(
            self._clusters.source.bootstrap_servers,
            records_per_second=self.options.rate,
            ride_out=True,
        )
        self._traffic.start()
        self._live = LiveGroup(
            self._clusters.source.bootstrap_servers,
            LIVE_GROUP,
            LIVE_TOPIC,
            records_per_second=self.options.rate * _LIVE_SHARE,
        )
        self._live.start()
        self._world = self._start_roles()
        self._watch = DestinationWatch(
            self._clusters.target.bootstrap_servers, [t.name for t in TOPICS]
        )

    def _start_network(self, binary: Path) -> None:
        """A proxy for every path from a role instance to a cluster's node (chaos/instances.py)."""
        # Kept before it starts: cleanup() stops it whatever happens next.
        network = self._network = Toxiproxy(binary, self.run_dir / "toxiproxy.log")
        network.start()
        add_links(network, self._cluster_map())

    def _cluster(self, name: str) -> LocalCluster:
        return self._clusters.source if name == "source" else self._clusters.target

    def _cluster_map(self) -> dict[str, LocalCluster]:
        return {name: self._cluster(name) for name in CLUSTERS}

    def _start_roles(self) -> World:
        clusters = self._cluster_map()
        instances = start_instances(clusters, self.run_dir, self.view)
        assert self._network is not None
        return World(instances, clusters, self._window_start, self._network)

    def _fault_window(self, window_s: float) -> None:
        assert self._world is not None
        window_start = self._window_start = time.monotonic()
        self._world.started = window_start
        window = FaultWindow(self._world, self._faults, self._timeline)
        next_sample = window_start
        while window.pending or window.active or time.monotonic() - window_start < window_s:
            now = time.monotonic() - window_start
            window.begin_due(now)
            window.end_due(now, window_start)
            self._world.supervise()
            self._check_traffic()
            if time.monotonic() >= next_sample:
                self._sample(now)
                next_sample += _SAMPLE_EVERY_S
            self._phase = (
                f"fault window {now:.0f}/{window_s:.0f} s: {len(self._timeline)} of "
                f"{len(self._faults)} faults begun, active: "
                + (", ".join(f.name for f, _ in window.active) or "none")
            )
            self._tick()
        self._phase = "waiting for every network link to heal"
        self.outcome.unhealed = self._world.network.await_healed(_HEAL_TIMEOUT_S)
        for link, reason in self.outcome.unhealed.items():
            self.view.say(f"{link} did not heal within {_HEAL_TIMEOUT_S:.0f} s: {reason}")

    def _await_first_records(self) -> None:
        """The faults begin once records flow end to end: a start-up under faults proves
        little and could keep a short run from copying anything at all."""
        assert self._world is not None
        self._phase = "waiting for the first records on the destination"
        started = time.monotonic()
        while self._destination_count() == 0:
            if time.monotonic() - started > _FIRST_RECORDS_TIMEOUT_S:
                raise ChaosError(
                    f"no record reached the destination within {_FIRST_RECORDS_TIMEOUT_S:.0f} s "
                    f"of the roles' start, before any fault (logs in {self.run_dir})"
                )
            self._world.supervise()
            self._check_traffic()
            self._tick()
        self.view.say(
            f"records flow end to end after {time.monotonic() - started:.1f} s: the faults begin"
        )

    def _drain(self) -> None:
        """Until the destination holds every surely committed record and has gained nothing
        for a while (transactions of unknown outcome may add more), or the drain times out."""
        assert self._traffic is not None
        assert self._world is not None
        self._phase = "draining"
        committed = self._traffic.counts.committed
        started = last_change = time.monotonic()
        seen = -1
        while True:
            count = self._destination_count()
            if count != seen:
                seen, last_change = count, time.monotonic()
            if count >= committed and time.monotonic() - last_change >= _QUIET_S:
                break
            if time.monotonic() - started > self.options.drain_timeout_s:
                self.view.say(
                    f"the destination did not drain within {self.options.drain_timeout_s:.0f} s: "
                    f"{self._destination_count()} of {committed} records; the verdict says which",
                    style="bold red",
                )
                return
            self._world.supervise()
            self._sample(time.monotonic() - self._window_start)
            self._tick()
        self._drain_s = last_change - started
        self.view.say(
            f"drained: {seen} records on the destination "
            f"{self._drain_s:.1f} s after the fault window"
        )

    def _fail_over(self) -> None:
        """Both groups' failovers (chaos/failovers.py)."""
        assert self._live is not None
        assert self._world is not None
        failovers = Failovers(
            self._clusters,
            self.view,
            self.outcome,
            set_phase=self._set_phase,
            scrape_roles=self._scrape_roles,
            tick_s=_TICK_S,
        )
        failovers.run(self._live, self._world, self._counters[OFFSETSYNC])

    def _set_phase(self, phase: str) -> None:
        self._phase = phase

    def _stop_roles(self) -> None:
        assert self._world is not None
        stop_roles(self._world, self.outcome, self.view)

    def _verdict(self) -> Verdict:
        self._phase = "comparing"
        return compare(self._clusters, self._traffic, self.view)

    def _audit(self) -> AuditResult:
        self._phase = "auditing"
        return audit_on_spark(self._clusters, self.report_dir, self.run_dir, self.view)

    # -- every tick ---------------------------------------------------------------------------

    def _tick(self) -> None:
        ends = time.monotonic() + _TICK_S
        if ends >= self._next_scrape:
            self._scrape_roles()
            self._next_scrape = ends + _SCRAPE_EVERY_S
        if self._watch is not None:
            self._watch.poll(_WATCH_BUDGET_S)
        self.view.update(self._snapshot())
        time.sleep(max(0.0, ends - time.monotonic()))

    def _sample(self, at_s: float) -> None:
        assert self._traffic is not None
        self._samples.append(
            {
                "t": round(at_s, 1),
                "committed": self._traffic.counts.committed,
                "destination": self._destination_count(),
            }
        )

    def _scrape_roles(self) -> None:
        scrape_roles(self._counters, self._world)

    def _destination_count(self) -> int:
        return self._watch.count if self._watch is not None else 0

    def _check_traffic(self) -> None:
        if self._traffic is not None and self._traffic.error:
            raise ChaosError(self._traffic.error)
        if self._live is not None and self._live.error:
            raise ChaosError(self._live.error)

    def _snapshot(self) -> Snapshot:
        return snapshot(
            self._phase, self._traffic, self._world, self._counters, self._destination_count()
        )

    # -- the report and the clean-up ----------------------------------------------------------

    def report(self) -> Path:
        """Write the report; say what the longest stall began under."""
        instances = self._world.instances if self._world is not None else {}
        roles = role_rows(instances, self.outcome.drained)
        path = write_report(
            self.report_dir,
            options=self.options,
            faults=self._timeline,
            planned=len(self._faults),
            samples=self._samples,
            roles=roles,
            traffic=self._traffic.counts if self._traffic is not None else None,
            drain_s=self._drain_s,
            outcome=self.outcome,
        )
        stall = longest_stall(self._samples)
        if stall is not None:
            self.view.say(stall_causes(stall, self._timeline, roles)["cause"])
        return path

    def cleanup(self) -> bool:
        """Stop everything this run started; whether nothing is left running. Never raises."""
        network, self._network = self._network, None
        if network is not None:
            network.stop()
        watch, self._watch = self._watch, None
        if self._live is not None:
            self._live.abandon()  # its source is about to go; clean_up stops the rest
        instances = self._world.instances if self._world is not None else {}
        return clean_up(
            self.view,
            traffics=[self._traffic] if self._traffic is not None else [],
            watch=watch,
            roles={name: instance.process for name, instance in instances.items()},
            # SIGKILL: a frozen (SIGSTOPped) instance would not answer SIGTERM.
            stop_role=lambda process: process.kill(),
            clusters=self._clusters,
            lock=self._lock,
        )
