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
from dataclasses import dataclass, field
from pathlib import Path

from exactly.chaos.errors import ChaosError
from exactly.chaos.livegroup import LiveGroup
from exactly.chaos.network import Toxiproxy, ensure_toxiproxy, link_name, listener_name
from exactly.chaos.plan import (
    SESSION_TIMEOUT_S,
    Fault,
    Targets,
    count_by_kind,
    default_fault_count,
    plan_faults,
)
from exactly.chaos.report import longest_stall, stall_causes, write_report
from exactly.chaos.world import Instance, World
from exactly.harness.audit import AuditResult, run_audit
from exactly.harness.cleanup import clean_up
from exactly.harness.clusters import DemoClusters, DemoLock
from exactly.harness.destination import DestinationWatch
from exactly.harness.errors import DemoError
from exactly.harness.failover import (
    FailoverResult,
    GroupNotMovedError,
    StoppedGroup,
    await_moved,
    resume_and_compare,
    stop_halfway,
    stopped_at,
)
from exactly.harness.metrics import (
    DEDUPLICATOR_DUPLICATES,
    OFFSETSYNC_CYCLES,
    OFFSETSYNC_FAILED_CYCLES,
    OFFSETSYNC_GROUPS,
    REPLICATOR_RECORDS,
    RestartSafeCounters,
    observe_roles,
    scrape_labelled,
)
from exactly.harness.progress import DemoView, RoleStatus, Snapshot
from exactly.harness.traffic import INCLUDE_PATTERN, TOPICS, SampleTraffic, create_topics
from exactly.harness.verdict import Verdict, judge, read_committed
from exactly.roles import DEDUPLICATOR, OFFSETSYNC, REPLICATOR
from localkafka import LocalCluster, RoleProcess, default_state_dir, free_ports

FLOW = "chaos"
DEDUPLICATORS = tuple(f"{DEDUPLICATOR}-{n}" for n in (1, 2))  # sharing the staging partitions
INSTANCES = (REPLICATOR, *DEDUPLICATORS, OFFSETSYNC)
CLUSTERS = ("source", "target")
FAILOVER_GROUP = "chaos-app"  # stops halfway on the source after the drain
FAILOVER_TOPIC = TOPICS[0].name
LIVE_GROUP = "chaos-live"  # consumes and commits on the source for the whole run
LIVE_TOPIC = TOPICS[1].name
GROUPS = (LIVE_GROUP, FAILOVER_GROUP)
# The live group processes a quarter of the traffic's rate; its topic gets a third of it: it
# lags, and commits inside the log.
_LIVE_SHARE = 0.25
# offsetsync cycles that must succeed after the groups stopped before their offsets on the
# target are read: the first may have fetched the source's offsets before the last commits.
_SYNC_CYCLES = 2
_SYNC_TIMEOUT_S = 120.0
_TICK_S = 0.5
_SAMPLE_EVERY_S = 1.0
_SCRAPE_EVERY_S = 2.0
_SCRAPE_TIMEOUT_S = 0.2
_WATCH_BUDGET_S = 0.2
_READ_TIMEOUT_S = 120.0
_MOVE_TIMEOUT_S = 60.0
_ROLE_STOP_TIMEOUT_S = 60.0
_STAGING_PARTITIONS = 6
_FIRST_RECORDS_TIMEOUT_S = 180.0
# Drained: the destination gained nothing for this long (and holds every certain record).
_QUIET_S = 5.0
# Every role is thawed once the window closes, so each link's toxics come off within seconds.
_HEAL_TIMEOUT_S = 60.0


def chaos_directory() -> Path:
    """The chaos run's clusters, logs and state, apart from the demo's and `exactly kafka`'s."""
    return default_state_dir() / "chaos"


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    minutes: float = 10.0
    # None: one every 3 s of the window, as many as fit (chaos/plan.py, 200 in ten minutes).
    faults: int | None = None
    # Records/s produced to the source for the whole fault window: about 1.3 M in 10 minutes
    # when a source broker down about a fifth of the time is counted in.
    rate: float = 3000.0
    seed: int = 0
    drain_timeout_s: float = 300.0
    # Per cluster: 1 is a broker and a separate controller; several are combined
    # broker+controller nodes replicating every topic 3 times (localkafka/cluster.py).
    nodes: int = 1


@dataclass
class ChaosOutcome:
    verdict: Verdict | None = None
    failovers: dict[str, FailoverResult] = field(default_factory=dict)  # by group
    drained: dict[str, int | None] = field(default_factory=dict)  # role -> SIGTERM exit status
    failover_errors: dict[str, str] = field(default_factory=dict)  # by group: why not checked
    live_group: dict[str, int] = field(default_factory=dict)  # processed, commits, failed
    unhealed: dict[str, str] = field(default_factory=dict)  # network link -> why, after the window
    audit: AuditResult | None = None  # exactly validate --require-complete, the second verdict

    @property
    def clean(self) -> bool:
        return (
            self.verdict is not None
            and self.verdict.clean
            and self.audit is not None
            and self.audit.clean
            and set(self.failovers) == set(GROUPS)
            and all(result.exact for result in self.failovers.values())
            and bool(self.drained)
            and all(status == 0 for status in self.drained.values())
        )


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
        self._counters = {
            REPLICATOR: RestartSafeCounters([REPLICATOR_RECORDS]),
            **{name: RestartSafeCounters([DEDUPLICATOR_DUPLICATES]) for name in DEDUPLICATORS},
            OFFSETSYNC: RestartSafeCounters([OFFSETSYNC_CYCLES, OFFSETSYNC_FAILED_CYCLES]),
        }
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
        targets = Targets(
            roles=INSTANCES,
            deduplicators=DEDUPLICATORS,
            clusters=CLUSTERS,
            links=tuple(link_name(i, c) for i in INSTANCES for c in CLUSTERS),
            nodes=self.options.nodes,
        )
        asked = self.options.faults
        self._faults = plan_faults(
            self.options.seed,
            window_s,
            default_fault_count(window_s) if asked is None else asked,
            targets,
            fit=asked is None,
        )
        self._lock.acquire()
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

    def _start_network(self, binary: Path) -> None:
        """A proxy for every path from a role instance to a cluster's node: each node
        advertises its proxy's port on that instance's listener (chaos/network.py)."""
        # Kept before it starts: cleanup() stops it whatever happens next.
        network = self._network = Toxiproxy(binary, self.run_dir / "toxiproxy.log")
        network.start()
        for instance in INSTANCES:
            for cluster in CLUSTERS:
                endpoints = self._cluster(cluster).proxied_endpoints(listener_name(instance))
                network.add_link(
                    link_name(instance, cluster),
                    {node: (via_proxy, listen) for node, (listen, via_proxy) in endpoints.items()},
                )

    def _cluster(self, name: str) -> LocalCluster:
        return self._clusters.source if name == "source" else self._clusters.target

    def _bootstrap(self, instance: str, cluster: str) -> str:
        """Every node of the cluster, each through this instance's proxy to it."""
        endpoints = self._cluster(cluster).proxied_endpoints(listener_name(instance))
        return ",".join(f"127.0.0.1:{via_proxy}" for _listen, via_proxy in endpoints.values())

    def _start_roles(self) -> World:
        names = INSTANCES
        instances: dict[str, Instance] = {}
        for name, port in zip(names, free_ports(len(names)), strict=True):
            role = name.split("-")[0]
            env = self._role_env(name, port)
            state_dir = Path(env["STATE_DIR"]) if role == DEDUPLICATOR else None
            process = RoleProcess(
                role, env, self.run_dir, name=name, cwd=self.run_dir, metrics_port=port
            )
            instances[name] = Instance(process.start(), state_dir)
            self.view.say(f"started {name} (pid {process.pid}), log {process.log_path}")
        clusters = {name: self._cluster(name) for name in CLUSTERS}
        assert self._network is not None
        return World(instances, clusters, self._window_start, self._network)

    def _role_env(self, name: str, metrics_port: int) -> dict[str, str]:
        session_ms = str(int(SESSION_TIMEOUT_S * 1000))
        return {
            # Through its own proxies: the network faults act on this instance's paths only.
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": self._bootstrap(name, "source"),
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": self._bootstrap(name, "target"),
            # Short sessions, so that a frozen instance is evicted within the run and wakes
            # as a zombie whose writes must be fenced (chaos/plan.py holds it past them).
            "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SESSION_TIMEOUT_MS": session_ms,
            "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SESSION_TIMEOUT_MS": session_ms,
            "REPLICATION_TOPICS_INCLUDE": INCLUDE_PATTERN,
            "REPLICATION_FLOW": FLOW,
            "REPLICATION_INSTANCE_ID": f"chaos-{name}",
            "REPLICATION_STAGING_PARTITIONS": str(_STAGING_PARTITIONS),
            "STATE_DIR": str(self.run_dir / f"state-{name}"),
            "METRICS_PORT": str(metrics_port),
            "OFFSETSYNC_GROUPS_INCLUDE": ",".join(GROUPS),
            "OFFSETSYNC_INTERVAL_MS": "1000",
        }

    def _fault_window(self, window_s: float) -> None:
        assert self._world is not None
        window_start = self._window_start = time.monotonic()
        self._world.started = window_start
        pending = list(self._faults)
        active: list[tuple[Fault, dict[str, object]]] = []
        next_sample = window_start
        while pending or active or time.monotonic() - window_start < window_s:
            now = time.monotonic() - window_start
            while pending and pending[0].at_s <= now:
                fault = pending.pop(0)
                entry: dict[str, object] = {
                    "kind": fault.kind.value,
                    "target": fault.target,
                    "variant": fault.variant,
                    "planned_at_s": round(fault.at_s, 1),
                    "hold_s": round(fault.hold_s, 1),
                    "began_s": round(now, 1),
                }
                # The node a cluster fault took, or why the fault was skipped: a skipped one
                # is reported as planned, not counted as injected.
                entry.update(self._world.begin(fault))
                self._timeline.append(entry)
                if "skipped" in entry:
                    continue
                active.append((fault, entry))
            for fault, entry in [pair for pair in active if pair[0].ends_s <= now]:
                self._world.end(fault)
                entry["ended_s"] = round(time.monotonic() - window_start, 1)
                active.remove((fault, entry))
            self._world.supervise()
            self._check_traffic()
            if time.monotonic() >= next_sample:
                self._sample(now)
                next_sample += _SAMPLE_EVERY_S
            self._phase = (
                f"fault window {now:.0f}/{window_s:.0f} s: {len(self._timeline)} of "
                f"{len(self._faults)} faults begun, active: "
                + (", ".join(f.name for f, _ in active) or "none")
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
        """Both groups' failovers. A group offsetsync did not move in time is a verdict against
        the run (its reason in the outcome), not a failure of the run itself."""
        assert self._live is not None
        source = self._clusters.source.bootstrap_servers
        self._phase = f"stopping {LIVE_GROUP} and {FAILOVER_GROUP} on the source"
        stopped: list[StoppedGroup] = []
        try:
            stopped.append(stopped_at(source, LIVE_GROUP, LIVE_TOPIC, self._live.stop()))
        except (ChaosError, DemoError) as exc:
            self._failover_failed(LIVE_GROUP, str(exc))
        finally:
            self.outcome.live_group = self._live.counts
        stopped.append(stop_halfway(source, FAILOVER_GROUP, FAILOVER_TOPIC))
        self._phase = "waiting for offsetsync to sync the stopped groups"
        self._await_sync_cycles()
        for group in stopped:
            self._phase = f"moving {group.group} to the target"
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

    def _await_sync_cycles(self) -> None:
        """Until offsetsync has finished _SYNC_CYCLES successful cycles from now and its last
        cycle found every group synced (bounded): its commits on the target then translate the
        groups' last source commits. A cycle succeeds while one group's offsets cannot be
        fetched (that group waits for the next), so cycles alone are not enough: a run found
        offsetsync unable to fetch chaos-live's offsets for a minute after a source broker
        restart. A timeout is said, and the comparison shows what offsetsync had done by then."""
        assert self._world is not None
        counters = self._counters[OFFSETSYNC]
        process = self._world.instances[OFFSETSYNC].process

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
            self._world.supervise()
            time.sleep(_TICK_S)

    def _stop_roles(self) -> None:
        assert self._world is not None
        for name, instance in self._world.instances.items():
            status = instance.process.terminate(_ROLE_STOP_TIMEOUT_S)
            self.outcome.drained[name] = status
            if status != 0:
                self.view.say(
                    f"{name} did not drain cleanly on SIGTERM (exit {status})\n"
                    f"{instance.process.log_tail(15)}",
                    style="bold red",
                )

    def _verdict(self) -> Verdict:
        self._phase = "comparing"
        topics = [t.name for t in TOPICS]
        source = read_committed(self._clusters.source.bootstrap_servers, topics, _READ_TIMEOUT_S)
        destination = read_committed(
            self._clusters.target.bootstrap_servers, topics, _READ_TIMEOUT_S
        )
        verdict = judge(self._clusters.source.cluster_id, source, destination)
        aborted = self._traffic.counts.aborted if self._traffic is not None else 0
        self.view.show_verdict(verdict, aborted)
        return verdict

    def _audit(self) -> AuditResult:
        self._phase = "auditing"
        self.view.say("auditing on Spark: exactly validate --require-complete")
        audit = run_audit(
            source=self._clusters.source.bootstrap_servers,
            destination=self._clusters.target.bootstrap_servers,
            include=INCLUDE_PATTERN,
            report_dir=self.report_dir,
            log_dir=self.run_dir,
        )
        self.view.say(
            f"{audit.headline()} ({audit.seconds:.0f} s; {audit.report})",
            style="green" if audit.clean else "bold red",
        )
        return audit

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
        """The roles' counters for the live line, best effort."""
        if self._world is None:
            return
        world = self._world
        processes = {name: instance.process for name, instance in world.instances.items()}
        observe_roles(self._counters, processes, timeout_s=_SCRAPE_TIMEOUT_S, skip=world.held)

    def _total(self, names: tuple[str, ...], metric: str) -> int | None:
        totals = [t for name in names if (t := self._counters[name].total(metric)) is not None]
        return sum(totals) if totals else None

    def _destination_count(self) -> int:
        return self._watch.count if self._watch is not None else 0

    def _check_traffic(self) -> None:
        if self._traffic is not None and self._traffic.error:
            raise ChaosError(self._traffic.error)
        if self._live is not None and self._live.error:
            raise ChaosError(self._live.error)

    def _snapshot(self) -> Snapshot:
        counts = self._traffic.counts if self._traffic is not None else None
        instances = self._world.instances if self._world is not None else {}
        return Snapshot(
            phase=self._phase,
            committed=counts.committed if counts else 0,
            aborted=counts.aborted if counts else 0,
            staged=self._total((REPLICATOR,), REPLICATOR_RECORDS),
            destination=self._destination_count(),
            duplicates=self._total(DEDUPLICATORS, DEDUPLICATOR_DUPLICATES),
            orphans=None,
            dead_letters=None,
            roles=tuple(
                RoleStatus(name, i.process.is_running(), i.process.pid, i.process.starts)
                for name, i in instances.items()
            ),
        )

    # -- the report and the clean-up ----------------------------------------------------------

    def report(self) -> Path:
        """Write the report; say what the longest stall began under."""
        instances = self._world.instances if self._world is not None else {}
        roles: dict[str, dict[str, object]] = {
            name: {
                "starts": i.process.starts,
                "unexpected_exits": i.exits,
                "sigterm_exit": self.outcome.drained.get(name),
                "peak_rss_mib": round(i.peak_rss_mib, 1),
            }
            for name, i in instances.items()
        }
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
