"""Issue 34's low-rate axis: a few records a second spread over many partitions, and what the
target pays for them: transactions, markers, CPU, and the latency each record sees.

    python -m bench.low_rate [--partitions 1200] [--topics 100] [--rate 10] [--size B]
        [--duration S] [--warm-up S] [--setups 1,1@1000,10,mm2]

Starts two local Kafka clusters (localkafka), creates --topics source topics of
--partitions/--topics partitions, then, for each setup in turn, starts its candidate, waits for
every destination topic to exist, and has a child process produce --rate records/s round-robin
over every source partition (bench/payloads.py values, production time as CreateTime). After
--warm-up seconds, counted from the first record visible in each flow's destinations, it
measures --duration seconds:
  N        the pipeline as N flows on the one target, flow i copying topics i, i+N, ... (its own
           stages, staging, transactional id); at its defaults;
  N@MS     the same with REPLICATION_COMMIT_MIN_INTERVAL_MS=MS (and the commit interval raised
           to it where it was below);
  mm2      MirrorMaker 2 exactly-once over every topic (bench/scale_partitions.py's set-up).
Per setup: records/s sent; stage 2's committed transactions/s (the deduplicators' own metric,
summed over the flows); transaction markers written to the destinations per second (their end
offsets' growth over the window less the records that became visible in it: aborted records,
had there been any, would count as markers); CPU of the candidate's processes and of both
brokers, in cores; and each record's latency from production to visibility under
read_committed, p50 and p99, for the records produced in the window (a reader of every
destination partition). Each
setup's destinations, staging and internal topics are deleted after it. Nothing here passes or
fails on a number: a 2-core machine, one run.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient

from bench.clusters import bench_clusters
from bench.common import interrupt, percentile
from bench.flowmeter import EndOffsets, cpu_seconds
from bench.mirrormaker import ensure_mirrormaker
from bench.pacing import LiveLatencies, PacedProducer
from bench.pipeline_candidates import CandidateFailedError, check_mm2, check_roles
from bench.replicator_throughput import create_topics
from bench.scale_partitions import ScaleBench, Tier, delete_topics_with
from localkafka import RoleProcess, free_port
from localkafka.scrape import sample, scrape

_READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Setup:
    flows: int = 1
    floor_ms: int = 0
    mm2: bool = False

    @property
    def name(self) -> str:
        if self.mm2:
            return "MM2 exactly-once"
        name = f"pipeline, {self.flows} flow{'s' if self.flows > 1 else ''}"
        return name + (f", floor {self.floor_ms} ms" if self.floor_ms else "")

    @classmethod
    def parse(cls, spec: str) -> Setup:
        if spec == "mm2":
            return cls(mm2=True)
        flows, _, floor = spec.partition("@")
        return cls(int(flows), int(floor or 0))


@dataclass
class Window:
    setup: Setup
    seconds: float
    sent: int = 0
    markers: int = 0
    transactions: float = float("nan")
    cpu_candidate: float = 0.0
    cpu_brokers: float = 0.0
    latencies: list[float] = field(default_factory=list)


@dataclass
class Running:
    """A candidate while it runs: its destinations by flow, processes, liveness and metrics
    ports."""

    flows: list[list[str]]
    pids: Callable[[], list[int | None]]
    check: Callable[[], None]
    ports: list[int]

    @property
    def destinations(self) -> list[str]:
        return [topic for flow in self.flows for topic in flow]


class LowRateBench(ScaleBench):
    def measure(self, setup: Setup, tier: Tier, args: argparse.Namespace, tag: str) -> Window:
        """One setup's window; its topics on the target deleted after it, however it ended."""
        try:
            return self._measure(setup, tier, args, tag)
        finally:
            delete_topics_with(self.target, tag)

    def _measure(self, setup: Setup, tier: Tier, args: argparse.Namespace, tag: str) -> Window:
        topics = tier.source_topics()
        each = tier.partitions // tier.topics
        with self._running(setup, sorted(topics), tier, tag) as running:
            ends = EndOffsets(
                self.target, [(d, each) for d in running.destinations], committed=False
            )
            self._await_destinations(running)
            with PacedProducer(self.source, sorted(topics), each, args.rate, args.size) as paced:
                # Reading from the start of the warm-up: at the window, every partition's end
                # is resolved and each record of the window is seen (the window's by CreateTime).
                reader = LiveLatencies(self.target, [(d, each) for d in running.destinations])
                # The warm-up counts from the first record copied: a fresh source cluster's
                # first group join (its offsets topic made) must not fall in the window.
                reader.await_each(
                    running.flows, lambda: _check_both(running, paced), _READY_TIMEOUT_S
                )
                _watch(running, paced.check_alive, args.warm_up)
                pids = running.pids()
                before = (paced.sent, ends.total(), _transactions(running.ports))
                cpu = (cpu_seconds(pids), cpu_seconds(self.broker_pids))
                began, wall = time.monotonic(), time.time()
                _watch(running, paced.check_alive, args.duration)
                window = Window(setup, time.monotonic() - began)
                window.sent = paced.sent - before[0]
                ended = ends.total()
                window.markers = ended - before[1] - reader.visible_between(wall, time.time())
                window.transactions = _transactions(running.ports) - before[2]
                window.cpu_candidate = cpu_seconds(pids) - cpu[0]
                window.cpu_brokers = cpu_seconds(self.broker_pids) - cpu[1]
                # What was produced in the window and is still on its way: up to a floor (or
                # a MirrorMaker 2 poll) and a commit later.
                time.sleep(setup.floor_ms / 1000 + 5)
                window.latencies = reader.stop(wall, wall + window.seconds)
        return window

    @contextmanager
    def _running(self, setup: Setup, topics: list[str], tier: Tier, tag: str) -> Iterator[Running]:
        with ExitStack() as stack:
            if setup.mm2:
                alias = f"mm2eos{tag}"
                mm2 = stack.enter_context(
                    self._mirrormaker(alias, "", exactly_once=True, pattern=tier.pattern)
                )
                yield Running(
                    [[f"{alias}.{t}" for t in topics]],
                    lambda: [mm2.pid],
                    lambda: check_mm2(mm2),
                    [],
                )
                mm2.stop()
                return
            roles: list[RoleProcess] = []
            ports: list[int] = []
            for i in range(setup.flows):
                env = {
                    "REPLICATION_TOPICS_INCLUDE": "|".join(
                        map(re.escape, topics[i :: setup.flows])
                    ),
                    "REPLICATION_DESTINATION_TOPIC": f"low-{tag}.{{topic}}",
                    "REPLICATION_COMMIT_MIN_INTERVAL_MS": str(setup.floor_ms),
                    "REPLICATION_COMMIT_INTERVAL_MS": str(max(100, setup.floor_ms)),
                }
                ports.append(free_port())
                own = {"deduplicator": {"METRICS_PORT": str(ports[-1])}}
                roles += stack.enter_context(self._roles(f"low-{tag}-f{i}", "", env, own))
            yield Running(
                [[f"low-{tag}.{t}" for t in topics[i :: setup.flows]] for i in range(setup.flows)],
                lambda: [role.pid for role in roles],
                lambda: check_roles(*roles),
                ports,
            )
            for role in roles:
                role.terminate(60)

    def _await_destinations(self, running: Running) -> None:
        admin = AdminClient({"bootstrap.servers": self.target})
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not set(running.destinations) <= set(admin.list_topics(timeout=30).topics):
            running.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"destinations not all created in {_READY_TIMEOUT_S:.0f} s")
            time.sleep(1)


def _watch(running: Running, producing: Callable[[], None], seconds: float) -> None:
    """Wait ``seconds``, failing at once if the candidate or the producer dies."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        running.check()
        producing()
        time.sleep(min(1.0, max(0.0, until - time.monotonic())))


def _check_both(running: Running, paced: PacedProducer) -> None:
    running.check()
    paced.check_alive()


def _transactions(ports: list[int]) -> float:
    """Stage 2's committed transactions, summed over the flows (NaN without a pipeline)."""
    if not ports:
        return float("nan")
    name = "exactly_deduplicator_transactions_total"
    return sum(sample(scrape(port), name, outcome="committed") or 0.0 for port in ports)


def _report(windows: list[Window], tier: Tier) -> None:
    print(
        f"\n{tier.partitions} source partitions in {tier.topics} topics\n"
        f"{'setup':<30} {'rec/s':>6} {'txn/s':>6} {'markers/s':>9} {'cores cand.':>11} "
        f"{'brokers':>8} {'latency p50':>11} {'p99 ms':>7} {'seen':>5}"
    )
    for w in windows:
        latency = (
            f"{percentile(w.latencies, 50):>11.0f} {percentile(w.latencies, 99):>7.0f}"
            if w.latencies
            else f"{'-':>11} {'-':>7}"
        )
        print(
            f"{w.setup.name:<30} {w.sent / w.seconds:>6.1f} {w.transactions / w.seconds:>6.1f} "
            f"{w.markers / w.seconds:>9.1f} {w.cpu_candidate / w.seconds:>11.2f} "
            f"{w.cpu_brokers / w.seconds:>8.2f} {latency} {len(w.latencies):>5}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1200)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--rate", type=float, default=10.0, help="records/s over all partitions")
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--duration", type=float, default=120.0, help="measured seconds")
    parser.add_argument("--warm-up", type=float, default=15.0, help="seconds before the window")
    parser.add_argument("--setups", default="1,1@1000,10,mm2", help="N, N@FLOOR_MS or mm2")
    args = parser.parse_args()
    if args.partitions % args.topics:
        parser.error(f"{args.partitions} partitions do not divide into {args.topics} topics")
    setups = [Setup.parse(spec) for spec in args.setups.split(",")]
    if any(s.flows < 1 or s.flows > args.topics for s in setups):
        parser.error(f"flows must be between 1 and --topics ({args.topics})")
    signal.signal(signal.SIGTERM, interrupt)
    libs = ensure_mirrormaker()
    tier = Tier(args.partitions, args.topics, prefix="low")
    started = time.monotonic()
    with bench_clusters("bench-low-rate-") as (base, clusters):
        bench = LowRateBench(clusters, base, libs, verify=False)
        create_topics(bench.source, tier.source_topics())
        windows = []
        for n, setup in enumerate(setups):
            try:
                windows.append(bench.measure(setup, tier, args, f"lr{n}x"))
            except CandidateFailedError as failed:
                print(f"\n{setup.name}: FAILED: {failed}", flush=True)
                continue
            _report(windows[-1:], tier)
    _report(windows, tier)
    print(f"\n{args.size} B values; bench took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
