"""The demo's timeline, and the clean-up that leaves no process behind.

    fresh clusters -> sample topics -> traffic on -> replicator, deduplicator, offsetsync on
    -> SIGKILL the replicator, restart it (at 35 % of the traffic time)
    -> SIGKILL the deduplicator, restart it (at 65 %)
    -> traffic off -> wait for the destination to catch up (bounded)
    -> the failover: consumer group demo-app processes about half of demo.orders on the source
       and stops, offsetsync moves it to the target (bounded wait), it resumes there and what
       it reads is checked record by record against what it had not processed
    -> SIGTERM the three roles (they drain) -> the verdict

The run is clean only when both are: the destination holds every committed source record
exactly once, and the group resumed on the target with nothing read again and nothing skipped.

cleanup() runs whatever happened (a verdict, an error, Ctrl-C): traffic stopped, roles stopped
(SIGTERM, then SIGKILL), both clusters stopped. It never raises; what it could not do, it says.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from exactly.acls import apply_flow_grants, flow_grants
from exactly.demo.options import DemoOptions, DemoOutcome
from exactly.demo.verdicts import audit_on_spark, compare, stop_roles
from exactly.harness.audit import AuditResult
from exactly.harness.cleanup import clean_up
from exactly.harness.clusters import SOURCE_NAME, TARGET_NAME, DemoClusters, DemoLock
from exactly.harness.destination import DestinationWatch
from exactly.harness.errors import DemoError
from exactly.harness.failover import (
    FailoverResult,
    GroupNotMovedError,
    await_moved,
    resume_and_compare,
    stop_halfway,
)
from exactly.harness.metrics import (
    DEDUPLICATOR_DEAD_LETTERS,
    DEDUPLICATOR_DUPLICATES,
    DEDUPLICATOR_ORPHANS,
    REPLICATOR_RECORDS,
    RestartSafeCounters,
    observe_roles,
)
from exactly.harness.progress import DemoView, RoleStatus, Snapshot
from exactly.harness.traffic import (
    INCLUDE_PATTERN,
    TOPICS,
    SampleTraffic,
    TrafficCounts,
    create_topics,
)
from exactly.harness.verdict import Verdict
from exactly.localenv import secured_pair_environment
from exactly.roles import DEDUPLICATOR, OFFSETSYNC, REPLICATOR
from localkafka import RoleProcess, free_ports
from localkafka.replicas import leader_of
from runtime import load_settings

FLOW = "demo"
KILL_REPLICATOR_AT = 0.35  # of the traffic time
KILL_DEDUPLICATOR_AT = 0.65
# Clusters of several nodes: the target node leading the destination's first partition is
# SIGKILLed halfway and started again after NODE_DOWN_S, while the flow goes on.
KILL_TARGET_NODE_AT = 0.5
NODE_DOWN_S = 8.0
_TICK_S = 0.5
_WATCH_BUDGET_S = 0.2
_CLEANUP_ROLE_STOP_TIMEOUT_S = 10.0
FAILOVER_GROUP = "demo-app"
FAILOVER_TOPIC = TOPICS[0].name  # demo.orders, 6 partitions
_OFFSETSYNC_INTERVAL_MS = 1000
_MOVE_TIMEOUT_S = 30.0  # many sync cycles
# Few lanes: the demo moves a few hundred records a second on a laptop, and every staging
# partition is a consumer fetch more for two small brokers.
_STAGING_PARTITIONS = 4


class DemoRun:
    def __init__(self, options: DemoOptions, view: DemoView, directory: Path) -> None:
        self.options = options
        self.view = view
        self.directory = directory
        self.run_dir = directory / "run"
        self._lock = DemoLock(directory)
        self._clusters = DemoClusters(directory, secure=options.secure, nodes=options.nodes)
        self._traffic: SampleTraffic | None = None
        self._watch: DestinationWatch | None = None
        self._roles: dict[str, RoleProcess] = {}
        self._counters = {
            REPLICATOR: RestartSafeCounters([REPLICATOR_RECORDS]),
            DEDUPLICATOR: RestartSafeCounters(
                [
                    DEDUPLICATOR_DUPLICATES,
                    DEDUPLICATOR_ORPHANS,
                    DEDUPLICATOR_DEAD_LETTERS,
                ]
            ),
        }
        self._phase = "starting"

    # -- the timeline -----------------------------------------------------------------------------

    def run(self) -> DemoOutcome:
        self._lock.acquire()
        self._start_clusters()
        self._prepare_run_dir()
        self._create_topics()
        self._start_traffic()
        self._start_roles()
        self._watch = DestinationWatch(
            self._clusters.target.bootstrap_servers, [t.name for t in TOPICS]
        )
        self._phase = "producing sample traffic"
        self.view.start_live(self._snapshot())
        self._traffic_phase()
        self._stop_traffic()
        caught_up = self._catch_up()
        self.view.stop_live(self._snapshot())
        failover = self._fail_over() if caught_up else None
        self._stop_roles()
        verdict = self._verdict()
        self.view.show_failover(failover, FAILOVER_GROUP, FAILOVER_TOPIC)
        audit = self._audit() if self.options.audit else None
        return DemoOutcome(verdict, failover, audit)

    def _start_clusters(self) -> None:
        self.view.say(
            f"starting two Kafka clusters, {SOURCE_NAME} and {TARGET_NAME}, in {self.directory}"
        )
        started = time.monotonic()
        self._clusters.start()
        source, target = self._clusters.source, self._clusters.target
        self.view.say(
            f"clusters ready in {time.monotonic() - started:.1f} s: "
            f"source {source.bootstrap_servers} (cluster id {source.cluster_id}), "
            f"target {target.bootstrap_servers}"
        )

    def _prepare_run_dir(self) -> None:
        # The last run's logs and stage-2 state belong to the clusters just deleted.
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)

    def _create_topics(self) -> None:
        create_topics(self._clusters.source.bootstrap_servers)
        described = ", ".join(
            f"{t.name} ({t.partitions} partitions{', compacted' if t.config else ''})"
            for t in TOPICS
        )
        self.view.say(f"created on the source: {described}")

    def _start_traffic(self) -> None:
        self._traffic = SampleTraffic(
            self._clusters.source.bootstrap_servers,
            records_per_second=self.options.records_per_second,
        )
        self._traffic.start()
        self.view.say(
            f"producing about {self.options.records_per_second:.0f} records/s for "
            f"{self.options.duration_s:.0f} s, one transaction per 25 records, every 8th "
            "transaction aborted"
        )

    def _start_roles(self) -> None:
        roles = (REPLICATOR, DEDUPLICATOR, OFFSETSYNC)
        if self.options.secure:
            self._grant_acls()
        for role, port in zip(roles, free_ports(len(roles)), strict=True):
            settings = self._role_settings(port) | self._secured_environment(role)
            if role == OFFSETSYNC:
                settings["OFFSETSYNC_GROUPS_INCLUDE"] = FAILOVER_GROUP
                settings["OFFSETSYNC_INTERVAL_MS"] = str(_OFFSETSYNC_INTERVAL_MS)
            process = RoleProcess(role, settings, self.run_dir, cwd=self.run_dir, metrics_port=port)
            self._roles[role] = process
            pid = process.start().pid
            self.view.say(
                f"started {role} (pid {pid}, metrics on :{port}/metrics), log {process.log_path}"
            )

    def _role_settings(self, metrics_port: int) -> dict[str, str]:
        return {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": self._clusters.source.bootstrap_servers,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": self._clusters.target.bootstrap_servers,
            "REPLICATION_TOPICS_INCLUDE": INCLUDE_PATTERN,
            "REPLICATION_FLOW": FLOW,
            "REPLICATION_INSTANCE_ID": "demo",
            "REPLICATION_STAGING_PARTITIONS": str(_STAGING_PARTITIONS),
            "STATE_DIR": str(self.run_dir / "state"),
            "METRICS_PORT": str(metrics_port),
        }

    def _grant_acls(self) -> None:
        """Each role's least privileges (exactly/acls.py), granted through the PLAINTEXT
        listener, whose principal (the demo's own tools) is a super-user."""
        settings = load_settings(self._role_settings(0))
        grants = flow_grants(settings, [t.name for t in TOPICS], [FAILOVER_GROUP])
        apply_flow_grants(
            self._clusters.source.bootstrap_servers,
            self._clusters.target.bootstrap_servers,
            grants,
        )
        self.view.say(
            f"secured: each role its own user, source over SASL_SSL (SCRAM), target over mutual "
            f"TLS; {len(grants)} grants of least privilege (exactly acls)"
        )

    def _secured_environment(self, role: str) -> dict[str, str]:
        if not self.options.secure:
            return {}
        return secured_pair_environment(self._clusters.source, self._clusters.target, role)

    def _traffic_phase(self) -> None:
        duration = self.options.duration_s
        crashes: list[tuple[float, Callable[[], None]]] = [
            (KILL_REPLICATOR_AT * duration, lambda: self._crash_and_restart(REPLICATOR)),
            (KILL_DEDUPLICATOR_AT * duration, lambda: self._crash_and_restart(DEDUPLICATOR)),
        ]
        if self.options.nodes > 1:
            at = KILL_TARGET_NODE_AT * duration
            crashes += [(at, self._kill_target_node), (at + NODE_DOWN_S, self._restart_nodes)]
            crashes.sort(key=lambda crash: crash[0])
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < duration:
            if crashes and elapsed >= crashes[0][0]:
                crashes.pop(0)[1]()
            self._tick()

    def _kill_target_node(self) -> None:
        target = self._clusters.target
        node = leader_of(target.bootstrap_servers, TOPICS[0].name, 0)
        target.kill_node(node)
        self.view.say(
            f"killed target node {node} (leader of {TOPICS[0].name}[0]) with SIGKILL — "
            f"the other two lead on; restarting it in {NODE_DOWN_S:.0f} s",
            style="bold yellow",
        )

    def _restart_nodes(self) -> None:
        target = self._clusters.target
        for node in target.nodes:
            target.launch_node(node, tie_to_parent=True)
        self.view.say("restarted the target's stopped node", style="yellow")

    def _crash_and_restart(self, role: str) -> None:
        process = self._roles[role]
        pid = process.kill()
        self.view.say(f"killed {role} (pid {pid}) with SIGKILL — restarting", style="bold yellow")
        new_pid = process.start().pid
        self.view.say(f"restarted {role} (pid {new_pid})", style="yellow")

    def _stop_traffic(self) -> None:
        assert self._traffic is not None
        self._traffic.stop()
        self._check_traffic()
        counts = self._traffic.counts
        self.view.say(
            f"stopped producing: {counts.committed} records committed in "
            f"{counts.transactions} transactions, {counts.aborted} records in aborted ones"
        )

    def _catch_up(self) -> bool:
        """Whether the destination caught up in time."""
        self._phase = "waiting for the destination to catch up"
        committed = self._traffic_counts().committed
        started = time.monotonic()
        deadline = started + self.options.catch_up_timeout_s
        while True:
            self._tick()
            arrived = self._watch.count if self._watch is not None else 0
            if arrived >= committed:
                self._phase = "caught up"
                break
            if time.monotonic() > deadline:
                self._phase = "the destination did not catch up"
                self.view.say(
                    f"the destination did not catch up within {self.options.catch_up_timeout_s:.0f}"
                    f" s: {arrived} of {committed} records are readable there; the verdict shows "
                    "what is missing",
                    style="bold red",
                )
                return False
        self.view.say(
            f"destination caught up: {arrived} records readable, "
            f"{time.monotonic() - started:.1f} s after the traffic stopped"
        )
        return True

    def _fail_over(self) -> FailoverResult:
        """demo-app stops on the source, offsetsync moves it, it resumes on the target."""
        self._phase = f"moving {FAILOVER_GROUP} to the target"
        group, topic = FAILOVER_GROUP, FAILOVER_TOPIC
        stopped = stop_halfway(self._clusters.source.bootstrap_servers, group, topic)
        self.view.say(
            f"{group} processed {stopped.processed} of {stopped.total} records of {topic} on "
            "the source and stopped"
        )
        try:
            moved_s = await_moved(
                self._clusters.target.bootstrap_servers,
                stopped,
                _MOVE_TIMEOUT_S,
                check=self._check_roles,
            )
        except GroupNotMovedError as exc:
            raise DemoError(f"{exc}\n{self._roles[OFFSETSYNC].log_tail(15)}") from exc
        self.view.say(f"offsetsync moved {group} to the target in {moved_s:.1f} s")
        result = resume_and_compare(self._clusters.target.bootstrap_servers, stopped)
        self.view.say(
            f"{group} resumed on the target: read {result.read} records, {result.re_read} read "
            f"again, {result.skipped} skipped",
            style=None if result.exact else "bold red",
        )
        return result

    def _stop_roles(self) -> None:
        self._phase = "stopping the roles"
        stop_roles(self._roles, self.view)

    def _verdict(self) -> Verdict:
        self._phase = "comparing"
        return compare(self._clusters, self._traffic_counts().aborted, self.view)

    def _audit(self) -> AuditResult:
        self._phase = "auditing"
        return audit_on_spark(self._clusters, self.run_dir, self.view)

    # -- every tick: counts, display, health ------------------------------------------------------

    def _tick(self) -> None:
        tick_ends = time.monotonic() + _TICK_S
        self._check_traffic()
        self._check_roles()
        self._scrape_roles()
        if self._watch is not None:
            self._watch.poll(_WATCH_BUDGET_S)
        self.view.update(self._snapshot())
        time.sleep(max(0.0, tick_ends - time.monotonic()))

    def _check_traffic(self) -> None:
        if self._traffic is not None and self._traffic.error:
            raise DemoError(self._traffic.error)

    def _check_roles(self) -> None:
        for role, process in self._roles.items():
            status = process.unexpected_exit()
            if status is not None:
                raise DemoError(
                    f"the {role} exited by itself with status {status}\n{process.log_tail(15)}"
                )

    def _scrape_roles(self) -> None:
        # offsetsync has no counters here: what it did shows in the failover's lines.
        observe_roles(self._counters, self._roles)

    def _traffic_counts(self) -> TrafficCounts:
        return self._traffic.counts if self._traffic is not None else TrafficCounts(0, 0, 0)

    def _snapshot(self) -> Snapshot:
        traffic = self._traffic_counts()
        replicator, deduplicator = self._counters[REPLICATOR], self._counters[DEDUPLICATOR]
        return Snapshot(
            phase=self._phase,
            committed=traffic.committed,
            aborted=traffic.aborted,
            staged=replicator.total(REPLICATOR_RECORDS),
            destination=self._watch.count if self._watch is not None else 0,
            duplicates=deduplicator.total(DEDUPLICATOR_DUPLICATES),
            orphans=deduplicator.total(DEDUPLICATOR_ORPHANS),
            dead_letters=deduplicator.total(DEDUPLICATOR_DEAD_LETTERS),
            roles=tuple(
                RoleStatus(role, process.is_running(), process.pid, process.starts)
                for role, process in self._roles.items()
            ),
        )

    # -- clean-up ---------------------------------------------------------------------------------

    def cleanup(self) -> bool:
        """Stop everything this run started; whether nothing is left running. Never raises."""
        watch, self._watch = self._watch, None
        return clean_up(
            self.view,
            traffics=[self._traffic] if self._traffic is not None else [],
            watch=watch,
            roles=self._roles,
            stop_role=lambda process: process.terminate(_CLEANUP_ROLE_STOP_TIMEOUT_S),
            clusters=self._clusters,
            lock=self._lock,
        )
