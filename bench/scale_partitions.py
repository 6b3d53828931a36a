"""Issue 34's partition axis: the same records spread over more source partitions and topics,
copied by the plain loop, the pipeline and MirrorMaker 2 exactly-once, in one invocation.

    python -m bench.scale_partitions [--tiers 12x1,240x20,1200x100] [--records N] [--size B]
        [--rounds N] [--warm-up N]

Starts two local Kafka clusters (localkafka) and, for each tier PxT, creates T source topics
of P/T partitions each and fills them with --records records of --size bytes, round-robin over
every partition (bench/payloads.py: a different value for every record, about as compressible
as real data). Then each candidate copies every topic of the tier, --rounds times in rotating
order, into fresh destination topics that are deleted after the copy (the target broker
carries one tier's copy at a time):
  plain loop:        bench/replicator_throughput.py's loop (not exactly-once) in a process;
  pipeline:          both stages at their defaults, REPLICATION_TOPICS_INCLUDE matching the
                     tier's topics;
  MM2 exactly-once:  MirrorMaker 2 in dedicated mode, 12 tasks, our producer settings
                     (bench/pipeline_vs_mirrormaker.py's set-up), the same pattern.
Each copy is timed from its first record on the target to the last source record of every
partition visible under read_committed (bench/flowmeter.py). Per copy it reports records/s,
MB/s, CPU seconds per million records of the candidate and of both brokers over that interval,
transaction markers on the destination per second (destination offsets beyond the records),
stage 2's committed transactions per second (its own metric), start-up (launch to the first
destination record) and peak RSS. Ratios are within this run, on a noisy 2-core machine.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient

from bench.clusters import bench_clusters
from bench.common import ChildRun, interrupt
from bench.flowmeter import EndOffsets, RunTiming, SourceTail, source_tails
from bench.mirrormaker import ensure_mirrormaker
from bench.pipeline_candidates import CandidateFailedError, add_pipeline_env, check_mm2, check_roles
from bench.pipeline_vs_mirrormaker import Bench
from bench.replicator_throughput import HEADERS, PARTITIONS, create_topics, fill_spread, plain_copy
from localkafka import free_port, peak_rss_mib
from localkafka.scrape import sample, scrape
from runtime.names import FlowNames

CANDIDATES = ("plain loop", "pipeline", "MM2 exactly-once")


@dataclass
class Tier:
    partitions: int
    topics: int
    prefix: str = "scale"

    @property
    def name(self) -> str:
        return f"{self.partitions}x{self.topics}"

    def source_topics(self) -> dict[str, int]:
        return {
            f"{self.prefix}{self.partitions}-t{i:03d}": self.partitions // self.topics
            for i in range(self.topics)
        }

    @property
    def pattern(self) -> str:
        return f"{self.prefix}{self.partitions}-t[0-9]+"


@dataclass
class Copy:
    """One candidate's copy of one tier."""

    candidate: str
    records: int
    timing: RunTiming
    markers: int = 0  # destination offsets beyond the records
    transactions: float = float("nan")  # stage 2's committed transactions (the pipeline only)
    rss_mib: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.timing.seconds

    def cpu_per_m(self, seconds: float) -> float:
        return seconds / self.records * 1e6


class ScaleBench(Bench):
    """The tier's copies by every candidate; MirrorMaker 2 set up as pipeline_vs_mirrormaker's."""

    # max.message.bytes of the source topics and the plain loop's destinations (0: the
    # broker's default); the pipeline mirrors the source's (at least 16 MiB on its
    # destinations), MirrorMaker 2 syncs it.
    record_limit = 0
    # Called with the destinations (name -> partitions) once a copy is complete, while the
    # pipeline or MirrorMaker 2 still runs (bench/catch_up.py: the latency once caught up).
    after_copy: Callable[[dict[str, int]], None] | None = None

    def copy(self, candidate: str, tier: Tier, tails: dict[str, SourceTail], tag: str) -> Copy:
        run = {
            "plain loop": self._by_plain_loop,
            "pipeline": self._by_pipeline,
            "MM2 exactly-once": self._by_mm2,
        }
        try:
            copy, destinations = run[candidate](tier, tails, tag)
            written = EndOffsets(self.target, destinations, committed=False).total()
            copy.markers = written - copy.records
        finally:
            delete_topics_with(self.target, tag)
        return copy

    def _after_copy(self, destinations: dict[str, int]) -> None:
        if self.after_copy is not None:
            self.after_copy(destinations)

    def _by_plain_loop(
        self, tier: Tier, tails: dict[str, SourceTail], tag: str
    ) -> tuple[Copy, list[tuple[str, int]]]:
        topics = tier.source_topics()
        renamed = {t: f"plain-{tag}.{t}" for t in topics}
        count = sum(tail.total for tail in tails.values())
        launched = time.monotonic()
        child = ChildRun(
            plain_copy, self.source, self.target, topics, count, renamed, self.record_limit
        )
        try:
            timing = self._await_all({renamed[t]: tails[t] for t in topics}, [], launched,
                                     lambda: [child.pid], child.check_alive)  # fmt: skip
            # The loop exits once it has flushed: its own CPU count instead of /proc's.
            _seconds, timing.cpu_role = child.result(120)  # type: ignore[misc]
        finally:
            child.kill()
        return Copy("plain loop", count, timing), [(renamed[t], n) for t, n in topics.items()]

    def _by_pipeline(
        self, tier: Tier, tails: dict[str, SourceTail], tag: str
    ) -> tuple[Copy, list[tuple[str, int]]]:
        topics = tier.source_topics()
        flow = f"scale-{tag}"
        renamed = {t: f"pipeline-{tag}.{t}" for t in topics}
        port = free_port()
        env = {
            "REPLICATION_TOPICS_INCLUDE": tier.pattern,
            "REPLICATION_DESTINATION_TOPIC": f"pipeline-{tag}.{{topic}}",
        }
        own = {"deduplicator": {"METRICS_PORT": str(port)}}
        count = sum(tail.total for tail in tails.values())
        launched = time.monotonic()
        with self._roles(flow, tier.pattern, env, own) as (replicator, deduplicator):
            timing = self._await_all(
                {renamed[t]: tails[t] for t in topics},
                [(FlowNames(flow).staging, PARTITIONS)],
                launched,
                lambda: [replicator.pid, deduplicator.pid],
                lambda: check_roles(replicator, deduplicator),
            )
            self._after_copy({renamed[t]: n for t, n in topics.items()})
            metrics = scrape(port)
            transactions = (
                sample(metrics, "exactly_deduplicator_transactions_total", outcome="committed")
                or 0.0
            )
            rss = [peak_rss_mib(r.pid) for r in (replicator, deduplicator) if r.pid]
            for role in (replicator, deduplicator):
                if role.terminate(60) != 0:
                    timing.notes.append(f"{role.name} exited with {role.returncode}")
        copy = Copy("pipeline", count, timing, transactions=transactions, rss_mib=rss)
        return copy, [(renamed[t], n) for t, n in topics.items()]

    def _by_mm2(
        self, tier: Tier, tails: dict[str, SourceTail], tag: str
    ) -> tuple[Copy, list[tuple[str, int]]]:
        topics = tier.source_topics()
        alias = f"mm2eos{tag}"
        count = sum(tail.total for tail in tails.values())
        with self._mirrormaker(alias, "", exactly_once=True, pattern=tier.pattern) as mm2:
            timing = self._await_all(
                {f"{alias}.{t}": tails[t] for t in topics},
                [],
                mm2.launched,
                lambda: [mm2.pid],
                lambda: check_mm2(mm2),
            )
            support, producers = mm2.exactly_once_evidence()
            if support != "enabled" or producers < 1:
                timing.notes.append("EXACTLY-ONCE NOT CONFIRMED BY THE LOG")
            self._after_copy({f"{alias}.{t}": n for t, n in topics.items()})
            rss = [peak_rss_mib(mm2.pid)] if mm2.pid else []
            mm2.stop()
        copy = Copy("MM2 exactly-once", count, timing, rss_mib=rss)
        return copy, [(f"{alias}.{t}", n) for t, n in topics.items()]


def delete_topics_with(bootstrap: str, tag: str) -> None:
    """Delete every topic of one copy (its destinations, staging, changelog, MirrorMaker's own):
    the next copy meets a broker holding what it held before this one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=30).topics if tag in t]
    if names:
        for future in admin.delete_topics(names, operation_timeout=60).values():
            future.result(90)


def fill_tier(bench: ScaleBench, tier: Tier, size: int, count: int) -> dict[str, SourceTail]:
    topics = tier.source_topics()
    started = time.monotonic()
    create_topics(bench.source, topics, bench.record_limit)
    every = [(t, p) for t, n in topics.items() for p in range(n)]
    fill_spread(bench.source, every, size, count, bench.record_limit)
    print(
        f"\n== {tier.name}: {tier.partitions} partitions in {tier.topics} topics, {count:,} "
        f"records of {size} B filled in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    return source_tails(bench.source, topics)


def run_tier(
    bench: ScaleBench,
    tier: Tier,
    size: int,
    count: int,
    rounds: int,
    candidates: tuple[str, ...] = CANDIDATES,
) -> list[Copy | None]:
    """Every candidate's copies of one tier, in rotating order; the median copy of each (None:
    every copy of that candidate failed, CandidateFailedError)."""
    tails = fill_tier(bench, tier, size, count)
    copies: dict[str, list[Copy]] = {name: [] for name in candidates}
    for n in range(rounds):
        order = candidates[n % len(candidates) :] + candidates[: n % len(candidates)]
        for name in order:
            tag = f"{tier.prefix}{tier.partitions}r{n}{name[:3].strip()}"
            try:
                copy = bench.copy(name, tier, tails, tag)
            except CandidateFailedError as failed:
                print(f"   {name:<17} FAILED: {failed}", flush=True)
                continue
            copies[name].append(copy)
            _print_copy(copy, size)
    return [
        sorted(runs, key=lambda c: c.timing.seconds)[(len(runs) - 1) // 2] if runs else None
        for runs in copies.values()
    ]


def _print_copy(copy: Copy, size: int) -> None:
    t = copy.timing
    seconds = t.seconds
    line = (
        f"   {copy.candidate:<17} {copy.rate:>9,.0f} rec/s {copy.rate * size / 1e6:>6.1f} MB/s"
        f"  cpu s/M role {copy.cpu_per_m(t.cpu_role):5.2f} brokers "
        f"{copy.cpu_per_m(t.cpu_brokers):5.2f} (JIT {copy.cpu_per_m(t.cpu_brokers_jit):.2f})"
        f"  markers/s {copy.markers / seconds:>7,.0f}"
    )
    if copy.transactions == copy.transactions:  # not NaN: the pipeline's own count
        line += f"  txn/s {copy.transactions / seconds:5.1f}"
    line += f"  start-up {t.destination_first - t.launched:5.1f} s"
    line += "  peak RSS " + "+".join(f"{r:.0f}" for r in copy.rss_mib) + " MiB"
    print(line + "".join(f"; {note}" for note in t.notes), flush=True)


def cpu_ratio(ours: Copy, mm2: Copy) -> str:
    """CPU per record, roles and brokers, ours over MirrorMaker 2's: all of it, then without the
    brokers' JIT compilers, whose share depends on which candidate copied while they compiled
    (bench.common.jit_thread_seconds)."""
    a, b = ours.timing, mm2.timing
    whole = (a.cpu_role + a.cpu_brokers) / (b.cpu_role + b.cpu_brokers)
    without_jit = (a.cpu_role + a.cpu_brokers - a.cpu_brokers_jit) / (
        b.cpu_role + b.cpu_brokers - b.cpu_brokers_jit
    )
    return f"{whole:>13.2f}x {without_jit:>11.2f}x"


def _report(results: dict[str, list[Copy | None]]) -> None:
    """The ratios the issue's targets are stated in, within this run."""
    if any(len(copies) != len(CANDIDATES) or None in copies for copies in results.values()):
        return  # some candidates left out or failed: no ratios between them
    first = next(iter(results.values()))
    ours12 = next(c for c in first if c and c.candidate == "pipeline")
    mm2_12 = next(c for c in first if c and c.candidate == "MM2 exactly-once")
    print(
        "\ntier        ours/MM2-EOS  ours/ours@first  MM2/MM2@first  "
        "cpu/rec ours/MM2 (roles+brokers; without JIT)"
    )
    for name, copies in results.items():
        plain, ours, mm2 = (copy for copy in copies if copy is not None)
        print(
            f"{name:<11} {ours.rate / mm2.rate:>11.2f}x {ours.rate / ours12.rate:>15.2f}x "
            f"{mm2.rate / mm2_12.rate:>13.2f}x {cpu_ratio(ours, mm2)}"
            f"   (plain loop {plain.rate:,.0f} rec/s)"
        )


def warm_up(bench: ScaleBench, candidates: tuple[str, ...], records: int) -> None:
    """An untimed copy by every candidate: the target's transaction and offsets topics exist
    and both brokers' JIT compilers have seen every request kind before the first timed copy."""
    if records:
        warm = Tier(12, 1, prefix="warm")
        tails = fill_tier(bench, warm, 100, records)
        for name in candidates:
            try:
                bench.copy(name, warm, tails, f"warm{name[:3].strip()}")
            except CandidateFailedError as failed:
                print(f"   warm-up of {name} FAILED: {failed}", flush=True)


def _tiers(spec: str) -> list[Tier]:
    tiers = []
    for item in spec.split(","):
        partitions, topics = (int(n) for n in item.split("x"))
        if partitions % topics:
            raise SystemExit(
                f"tier {item}: {partitions} partitions do not divide into {topics} topics"
            )
        tiers.append(Tier(partitions, topics))
    return tiers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", default="12x1,240x20,1200x100", help="PARTITIONSxTOPICS,...")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--warm-up", type=int, default=200_000, help="records of an untimed first copy (0: none)"
    )
    parser.add_argument(
        "--candidates",
        default=",".join(CANDIDATES),
        help=f"comma-separated subset of {', '.join(CANDIDATES)} (ratios need all three)",
    )
    add_pipeline_env(parser)
    args = parser.parse_args()
    candidates = tuple(args.candidates.split(","))
    if not set(candidates) <= set(CANDIDATES):
        parser.error(f"unknown candidate in {args.candidates!r}")
    tiers = _tiers(args.tiers)
    signal.signal(signal.SIGTERM, interrupt)
    libs = ensure_mirrormaker()
    started = time.monotonic()
    with bench_clusters("bench-scale-") as (base, clusters):
        bench = ScaleBench(clusters, base, libs, verify=False)
        bench.pipeline_env = dict(item.split("=", 1) for item in args.pipeline_env)
        warm_up(bench, candidates, args.warm_up)
        results = {
            tier.name: run_tier(bench, tier, args.size, args.records, args.rounds, candidates)
            for tier in tiers
        }
    _report(results)
    print(
        f"\none header of {len(HEADERS[0][1])} B per record; "
        f"bench took {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
