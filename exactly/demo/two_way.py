"""`exactly demo --topology active-active`: two clusters that both produce and receive.

    fresh clusters A (demo-source) and B (demo-target) -> the sample topics on both
    -> traffic on both -> a replicator and a deduplicator for A->B and for B->A
    -> SIGKILL A->B's replicator (at 35 % of the traffic time), B->A's deduplicator (at 65 %)
    -> traffic off -> wait until each cluster holds the other's records (bounded)
    -> SIGTERM the four roles -> a verdict per direction, and the loop counters

A direction is exactly once when every record produced in its source cluster (one without the
exactly.origin header) is in the other cluster exactly once, unchanged and in order, as a copy
whose header names the source. No record may come back: a copy of a copy carries two headers.
Stage 1 passes over the copies the other direction wrote (loop prevention); the demo shows how
many, from each replicator's `exactly_replicator_copies_passed_over_total`.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from envelope import HEADER_PROVENANCE, find_provenance
from exactly.demo.options import DemoOptions
from exactly.harness.cleanup import clean_up
from exactly.harness.clusters import DemoClusters, DemoLock
from exactly.harness.errors import DemoError
from exactly.harness.metrics import REPLICATOR_RECORDS, RestartSafeCounters, observe_roles
from exactly.harness.progress import DemoView
from exactly.harness.traffic import INCLUDE_PATTERN, TOPICS, SampleTraffic, create_topics
from exactly.harness.verdict import Reading, Record, Verdict, judge, read_committed
from exactly.roles import DEDUPLICATOR, REPLICATOR
from localkafka import LocalCluster, RoleProcess, free_ports

COPIES_PASSED_OVER = "exactly_replicator_copies_passed_over_total"
DIRECTIONS = ("A->B", "B->A")
# (share of the traffic time, direction, stage): one stage of each direction killed.
KILLS = ((0.35, "A->B", REPLICATOR), (0.65, "B->A", DEDUPLICATOR))
_STAGES = (REPLICATOR, DEDUPLICATOR)
_STAGING_PARTITIONS = 4
_TICK_S = 0.5
_STATUS_EVERY_S = 5.0
_LOOK_EVERY_S = 2.0
_READ_TIMEOUT_S = 60.0
_ROLE_STOP_TIMEOUT_S = 30.0
_CLEANUP_ROLE_STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class TwoWayOutcome:
    verdicts: Mapping[str, Verdict]  # by direction
    came_back: int  # records that are copies of copies, in either cluster: a loop

    @property
    def clean(self) -> bool:
        return all(v.clean for v in self.verdicts.values()) and self.came_back == 0


class ActiveActiveRun:
    def __init__(self, options: DemoOptions, view: DemoView, directory: Path) -> None:
        if options.secure:
            raise DemoError("the active-active demo runs on PLAINTEXT clusters only")
        self.options = options
        self.view = view
        self.directory = directory
        self.run_dir = directory / "run"
        self._lock = DemoLock(directory)
        self._clusters = DemoClusters(directory)
        self._traffic: dict[str, SampleTraffic] = {}
        self._roles: dict[str, RoleProcess] = {}
        self._counters = {
            _role_name(direction, REPLICATOR): RestartSafeCounters(
                [REPLICATOR_RECORDS, COPIES_PASSED_OVER]
            )
            for direction in DIRECTIONS
        }

    def run(self) -> TwoWayOutcome:
        self._lock.acquire()
        self._start_clusters()
        shutil.rmtree(self.run_dir, ignore_errors=True)  # the last run's state and logs
        self.run_dir.mkdir(parents=True)
        for cluster in self._both().values():
            create_topics(cluster.bootstrap_servers)
        self.view.say(
            f"created on both clusters: {', '.join(t.name for t in TOPICS)}; each is both a "
            "source and a target"
        )
        for name, cluster in self._both().items():
            self._traffic[name] = SampleTraffic(
                cluster.bootstrap_servers, records_per_second=self.options.records_per_second
            )
            self._traffic[name].start()
        self.view.say(
            f"producing about {self.options.records_per_second:.0f} records/s in each cluster "
            f"for {self.options.duration_s:.0f} s"
        )
        self._start_roles()
        self._traffic_phase()
        for traffic in self._traffic.values():
            traffic.stop()
        self._check_traffic()
        caught_up = self._catch_up()
        self._stop_roles()
        return self._verdicts(caught_up)

    def _both(self) -> dict[str, LocalCluster]:
        return {"A": self._clusters.source, "B": self._clusters.target}

    def _start_clusters(self) -> None:
        self.view.say(f"starting two Kafka clusters, A and B, in {self.directory}")
        started = time.monotonic()
        self._clusters.start()
        a, b = self._both().values()
        self.view.say(
            f"clusters ready in {time.monotonic() - started:.1f} s: A {a.bootstrap_servers} "
            f"(cluster id {a.cluster_id}), B {b.bootstrap_servers} (cluster id {b.cluster_id})"
        )

    def _start_roles(self) -> None:
        both = self._both()
        ports = iter(free_ports(len(DIRECTIONS) * len(_STAGES)))
        for direction in DIRECTIONS:
            source, target = (both[name] for name in direction.split("->"))
            flow = direction.replace("->", "-to-").lower()
            for stage in _STAGES:
                port = next(ports)
                name = _role_name(direction, stage)
                settings = {
                    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source.bootstrap_servers,
                    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target.bootstrap_servers,
                    "REPLICATION_TOPICS_INCLUDE": INCLUDE_PATTERN,
                    "REPLICATION_FLOW": flow,
                    "REPLICATION_INSTANCE_ID": f"demo-{flow}",
                    "REPLICATION_STAGING_PARTITIONS": str(_STAGING_PARTITIONS),
                    "STATE_DIR": str(self.run_dir / flow / "state"),
                    "METRICS_PORT": str(port),
                }
                process = RoleProcess(
                    stage,
                    settings,
                    self.run_dir / flow,
                    cwd=self.run_dir,
                    metrics_port=port,
                )
                self._roles[name] = process
                pid = process.start().pid
                self.view.say(f"started {name} (pid {pid}), log {process.log_path}")

    def _traffic_phase(self) -> None:
        duration = self.options.duration_s
        kills = [
            (share * duration, _role_name(direction, stage)) for share, direction, stage in KILLS
        ]
        started = time.monotonic()
        next_status = started + _STATUS_EVERY_S
        while (elapsed := time.monotonic() - started) < duration:
            if kills and elapsed >= kills[0][0]:
                name = kills.pop(0)[1]
                pid = self._roles[name].kill()
                self.view.say(f"killed {name} (pid {pid}) with SIGKILL — restarting", "bold yellow")
                self.view.say(f"restarted {name} (pid {self._roles[name].start().pid})", "yellow")
            self._tick()
            if time.monotonic() >= next_status:
                self._status()
                next_status += _STATUS_EVERY_S

    def _tick(self) -> None:
        tick_ends = time.monotonic() + _TICK_S
        self._check_traffic()
        for name, process in self._roles.items():
            status = process.unexpected_exit()
            if status is not None:
                raise DemoError(
                    f"{name} exited by itself with status {status}\n{process.log_tail(15)}"
                )
        observe_roles(self._counters, self._roles)
        time.sleep(max(0.0, tick_ends - time.monotonic()))

    def _check_traffic(self) -> None:
        for name, traffic in self._traffic.items():
            if traffic.error:
                raise DemoError(f"cluster {name}: {traffic.error}")

    def _status(self) -> None:
        parts = []
        for direction in DIRECTIONS:
            counters = self._counters[_role_name(direction, REPLICATOR)]
            staged, passed = counters.total(REPLICATOR_RECORDS), counters.total(COPIES_PASSED_OVER)
            parts.append(f"{direction}: {staged or 0} staged, {passed or 0} copies passed over")
        self.view.say("; ".join(parts), style="dim")

    def _catch_up(self) -> bool:
        """Whether each cluster came to hold the other's committed records in time."""
        wanted = {name: traffic.counts.committed for name, traffic in self._traffic.items()}
        self.view.say(
            f"stopped producing: {wanted['A']} records committed in A, {wanted['B']} in B; "
            "waiting for both directions to catch up"
        )
        both = self._both()
        started = time.monotonic()
        deadline = started + self.options.catch_up_timeout_s
        while True:
            arrived = {
                there: _copies_of(
                    read_committed(both[there].bootstrap_servers, _names(), _READ_TIMEOUT_S),
                    both[origin].cluster_id,
                )
                for origin, there in (("A", "B"), ("B", "A"))
            }
            if arrived["B"] >= wanted["A"] and arrived["A"] >= wanted["B"]:
                self.view.say(
                    f"both directions caught up {time.monotonic() - started:.1f} s after the "
                    "traffic stopped"
                )
                return True
            if time.monotonic() > deadline:
                self.view.say(
                    f"not caught up within {self.options.catch_up_timeout_s:.0f} s: B holds "
                    f"{arrived['B']} of A's {wanted['A']}, A {arrived['A']} of B's {wanted['B']}",
                    style="bold red",
                )
                return False
            deadline_tick = time.monotonic() + _LOOK_EVERY_S
            while time.monotonic() < deadline_tick:
                self._tick()

    def _stop_roles(self) -> None:
        observe_roles(self._counters, self._roles)  # the last counts before they stop
        self.view.say("stopping the four roles with SIGTERM (each drains and exits 0)")
        for name, process in self._roles.items():
            status = process.terminate(_ROLE_STOP_TIMEOUT_S)
            if status != 0:
                self.view.say(
                    f"{name} exited with status {status}. {process.log_tail(15)}", "bold red"
                )

    def _verdicts(self, caught_up: bool) -> TwoWayOutcome:
        both = self._both()
        readings = {
            name: read_committed(cluster.bootstrap_servers, _names(), _READ_TIMEOUT_S)
            for name, cluster in both.items()
        }
        verdicts = {}
        for direction in DIRECTIONS:
            origin, there = direction.split("->")
            self.view.say(
                f"{direction}: the records produced in {origin} against their copies in {there}, "
                "record by record (read_committed)"
            )
            cluster_id = both[origin].cluster_id
            verdict = judge(
                cluster_id,
                _filtered(readings[origin], lambda r: _headers(r) == 0),
                _filtered(readings[there], functools.partial(_names_origin, cluster_id=cluster_id)),
            )
            self.view.show_verdict(verdict, self._traffic[origin].counts.aborted)
            verdicts[direction] = verdict
        came_back = sum(
            _headers(r) > 1
            for reading in readings.values()
            for records in reading.records.values()
            for r in records
        )
        for direction in DIRECTIONS:
            passed = self._counters[_role_name(direction, REPLICATOR)].total(COPIES_PASSED_OVER)
            other = DIRECTIONS[1 - DIRECTIONS.index(direction)]
            self.view.say(
                f"loop prevention: {direction}'s stage 1 passed over {passed or 0} copies that "
                f"{other} wrote (counted while it ran)"
            )
        self.view.say(
            f"records that came back to where they were produced: {came_back}",
            style="bold green" if came_back == 0 else "bold red",
        )
        if not caught_up:
            self.view.say("the run did not catch up in time: the verdicts show what is missing")
        return TwoWayOutcome(verdicts, came_back)

    def cleanup(self) -> bool:
        """Stop everything this run started; whether nothing is left running. Never raises."""
        return clean_up(
            self.view,
            traffics=list(self._traffic.values()),
            watch=None,
            roles=self._roles,
            stop_role=lambda process: process.terminate(_CLEANUP_ROLE_STOP_TIMEOUT_S),
            clusters=self._clusters,
            lock=self._lock,
        )


def _role_name(direction: str, stage: str) -> str:
    return f"{direction} {stage}"


def _names() -> list[str]:
    return [topic.name for topic in TOPICS]


def _headers(record: Record) -> int:
    """Provenance headers with a value: 1 on a copy, 2 on a copy of a copy (a loop)."""
    return sum(name == HEADER_PROVENANCE and value is not None for name, value in record.headers)


def _names_origin(record: Record, cluster_id: str) -> bool:
    origin = find_provenance(record.headers)
    return origin is not None and origin.source_cluster_id == cluster_id


def _copies_of(reading: Reading, cluster_id: str) -> int:
    return sum(
        _names_origin(record, cluster_id)
        for records in reading.records.values()
        for record in records
    )


def _filtered(reading: Reading, keep: Callable[[Record], bool]) -> Reading:
    return Reading(
        {where: [r for r in records if keep(r)] for where, records in reading.records.items()},
        set(reading.unread),
    )
