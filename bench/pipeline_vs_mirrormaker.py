"""The whole pipeline (stage 1 + stage 2, exactly-once) beside a plain consume->produce loop and
MirrorMaker 2, in one invocation on the same source data.

    python -m bench.pipeline_vs_mirrormaker [--records-100b N] [--records-1kib N] [--rounds N]
        [--phases throughput,latency,recovery] [--latency-rates R,...] [--recovery-rate R]
        [--mm2-recovery] [--staging-compression lz4,zstd,none] [--verify]

Starts two local Kafka clusters (localkafka), copies an untimed warm-up topic with every
candidate, and, for each record size (100 B and 1 KiB values, 12 partitions, one header), fills
one source topic and copies it with each candidate, --rounds times in rotating order, each
into fresh destination topics on the target:
  plain loop:     bench/replicator_throughput.py's loop in a process of its own: batched
                  consume(), produce() of every record (key, value, headers, timestamp, same
                  partition), idempotent, no transactions; not exactly-once;
  pipeline:       `python -m replicator` and `python -m deduplicator` started together (once per
                  --staging-compression);
  MM2 at-least-once, MM2 exactly-once: MirrorMaker 2 in dedicated mode from the same Kafka
                  release (bench/mirrormaker.py), tasks.max = partitions, our producer settings.
Each copy is timed from its first record appended on the target to the source's last record
of every partition visible to a read_committed consumer of the destination (bench/flowmeter.py);
start-up (a JVM, group joins) is reported apart; the median round counts. Then:
  latency:   production time (CreateTime) to visibility on the destination, p50/p99, for the
             pipeline and MirrorMaker 2 exactly-once at each --latency-rates (default 1 000,
             20 000 and half the pipeline's 100 B rate);
  recovery:  at --recovery-rate (default 20 000 records/s), SIGKILL of the replicator, then of
             the deduplicator, then of both, each restarted at once with the default
             configuration, while production goes on: when the first record produced after the
             kill is visible, when the destination runs at >= 90 % of the produce rate again,
             and when it has caught up; then every record checked on the destination
             (--mm2-recovery: the same for MM2 EOS).
Every value is different and about as compressible as real data (bench/payloads.py).
Prints what it measured: ratios within one run on a noisy 2-core machine, never pass/fail.
"""

from __future__ import annotations

import argparse
import functools
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from runtime.names import FlowNames

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition

from bench.clusters import bench_clusters
from bench.flowmeter import (
    ChildRun,
    EndOffsets,
    FreshRecords,
    PacedProducer,
    Recovery,
    RunTiming,
    Sampler,
    SourceTail,
    analyse_recovery,
    await_copy,
    collect_latencies,
    exactly_once,
    percentile,
    probe_until_visible,
    source_tail,
)
from bench.mirrormaker import MirrorMaker2, ensure_mirrormaker
from bench.payloads import compression_ratio
from bench.replicator_throughput import (
    HEADERS,
    PARTITIONS,
    _baseline,
    _create,
    _fill,
    _producer_settings,
)
from localkafka import LocalCluster, RoleProcess, peak_rss_mib
from replicator.clients import SOURCE_FETCH_PARTITION_BYTES
from replicator.loop import CONSUME_BATCH

COPY_TIMEOUT_S = 900.0
START_TIMEOUT_S = 180.0
LATENCY_WARMUP_S = 3.0
LATENCY_WINDOW_S = 20.0
RECOVERY_WARMUP_S = 8.0
RECOVERY_TIMEOUT_S = 90.0
MM2_RECOVERY_TIMEOUT_S = 240.0
# The Java producer's batch.size set to librdkafka's default (what our producers keep), so
# MirrorMaker batches up to the same size as we do within the same linger.
JAVA_BATCH_SIZE = 1_000_000


# A candidate's copy of the source topic, tagged per round: (destination topic, its timing).
CopyRun = Callable[[str, SourceTail, str], tuple[str, RunTiming]]


@dataclass
class Row:
    size: int
    count: int
    timings: dict[str, RunTiming]  # each candidate's median round
    extra_offsets: dict[str, int]  # destination offsets beyond the records: markers, duplicates
    rounds: dict[str, list[RunTiming]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # About 10 s of the fastest copy (the plain loop) on a quiet 2-core machine.
    parser.add_argument("--records-100b", type=int, default=2_000_000)
    parser.add_argument("--records-1kib", type=int, default=1_000_000)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="copies by every candidate per record size, in rotating order; the median counts",
    )
    parser.add_argument(
        "--warm-up",
        type=int,
        default=200_000,
        help="records of an untimed first copy by every candidate (0: none)",
    )
    parser.add_argument(
        "--phases",
        default="throughput,latency,recovery",
        help="comma-separated subset of throughput,latency,recovery",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="records/s for latency and recovery (default: half the pipeline's 100 B rate)",
    )
    parser.add_argument(
        "--latency-rates",
        default="1000,20000,max",
        help="comma-separated records/s for the latency phase; 'max' is --rate (default: half "
        "the pipeline's 100 B rate: the paced producer shares the machine's cores)",
    )
    parser.add_argument(
        "--recovery-rate",
        type=float,
        default=20_000.0,
        help="records/s while the recovery phase kills (one both candidates keep up with)",
    )
    parser.add_argument("--mm2-recovery", action="store_true", help="also SIGKILL MM2 EOS")
    parser.add_argument(
        "--workers",
        default="1",
        help="comma-separated REPLICATION_WORKERS: the pipeline runs once more with each above 1",
    )
    parser.add_argument(
        "--pipeline-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable of both stages (repeatable), e.g. a librdkafka property",
    )
    parser.add_argument(
        "--staging-compression",
        default="lz4",
        help="comma-separated REPLICATION_STAGING_COMPRESSION values: the pipeline runs once "
        "with each (the first is 'pipeline' in the ratios; default: lz4, the default)",
    )
    parser.add_argument(
        "--verify", action="store_true", help="after each copy, count every destination record"
    )
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    if not phases <= {"throughput", "latency", "recovery"}:
        parser.error(f"unknown phase in {args.phases!r}")
    if "throughput" not in phases and not args.rate:
        parser.error("latency and recovery without the throughput phase need --rate")
    # SIGTERM like Ctrl-C: the finally blocks stop every process this bench started.
    signal.signal(signal.SIGTERM, _interrupt)
    libs = ensure_mirrormaker()
    started = time.monotonic()
    with bench_clusters("bench-pipeline-") as (base, clusters):
        bench = Bench(clusters, base, libs, verify=args.verify)
        bench.staging_compressions = args.staging_compression.split(",")
        bench.pipeline_env = dict(item.split("=", 1) for item in args.pipeline_env)
        bench.workers = [int(n) for n in args.workers.split(",")]
        rate = args.rate
        if "throughput" in phases:
            if args.warm_up:
                bench.warm_up(args.warm_up)
            rows = []
            for size, count in ((100, args.records_100b), (1024, args.records_1kib)):
                row = bench.throughput(size, count, args.rounds)
                rows.append(row)
                report_throughput(row)
            rate = rate or rows[0].count / rows[0].timings["pipeline"].seconds / 2
            report_summary(rows)
        if "latency" in phases:
            mm2_max = (
                rows[0].count / rows[0].timings["MM2 exactly-once"].seconds
                if "throughput" in phases
                else None
            )
            results = []
            for n, latency_rate in enumerate(_latency_rates(args.latency_rates, rate)):
                # MM2 at the same load, unless that is more than half its own maximum.
                mm2_rate = latency_rate if mm2_max is None else min(latency_rate, mm2_max / 2)
                results.append(bench.latency("pipeline", latency_rate, f"lat{n}"))
                results.append(bench.latency("MM2 exactly-once", mm2_rate, f"lat{n}"))
            report_latency(results)
        if "recovery" in phases:
            recovery_rate = args.recovery_rate
            report_recovery(bench.recovery_pipeline(recovery_rate), recovery_rate)
            if args.mm2_recovery:
                report_recovery(bench.recovery_mm2(recovery_rate), recovery_rate)
    print(f"\nbench took {time.monotonic() - started:.0f} s")


def _latency_rates(spec: str, max_rate: float) -> list[float]:
    return [max_rate if rate == "max" else float(rate) for rate in spec.split(",")]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class Bench:
    def __init__(self, clusters: list[LocalCluster], base: Path, libs: Path, *, verify: bool):
        self.source, self.target = (c.bootstrap_servers for c in clusters)
        # Node 1's replica of a topic stands for its size (every node holds one at RF 3).
        self.data_dirs = [next(iter(c.nodes.values())).data_dir for c in clusters]
        self.broker_pids = [node.pid for c in clusters for node in c.nodes.values()]
        self.base = base
        self.libs = libs
        self.verify = verify
        # Extra settings of both roles (bench/commit_limits.py varies the commit limits).
        self.pipeline_env: dict[str, str] = {}
        self.staging_compressions = ["lz4"]
        self.workers = [1]  # REPLICATION_WORKERS of the pipeline's candidates beyond the first

    # -- throughput ---------------------------------------------------------------------------

    def warm_up(self, count: int) -> None:
        """One untimed copy by every candidate first: the target's transaction and offsets
        topics are created and both brokers' JIT compilers have seen every request kind, so the
        first timed candidate pays no more than the last (measured: without it, the first
        pipeline run cost its brokers up to twice the CPU per record of the third)."""
        topic = "bench-warm-up"
        print(f"\n== warm-up: {count:,} records of 100 B through every candidate", flush=True)
        started = time.monotonic()
        _create(self.source, topic)
        _fill(self.source, topic, 100, count)
        tail = source_tail(self.source, topic, PARTITIONS)
        for _name, run in self._candidates():
            run(topic, tail, "w")
        print(f"   done in {time.monotonic() - started:.0f} s", flush=True)

    def throughput(self, size: int, count: int, rounds: int = 1) -> Row:
        topic = f"bench-{size}"
        print(f"\n== {size} B values: filling {topic} with {count:,} records", flush=True)
        _create(self.source, topic)
        filling = time.monotonic()
        _fill(self.source, topic, size, count)
        print(f"   filled in {time.monotonic() - filling:.1f} s", flush=True)
        raw_mb = count * (size + len(HEADERS[0][0]) + len(HEADERS[0][1]) + 8) / 1e6
        print(
            f"   data: bench/payloads.py's JSON mix, every value different; zlib-1 compresses a "
            f"batch of it {compression_ratio(size):.1f}x; the source topic (filled with lz4) "
            f"holds {_disk_mb(self.data_dirs[0], topic):.0f} MB on disk for {raw_mb:.0f} MB of "
            "keys, values and headers",
            flush=True,
        )
        tail = source_tail(self.source, topic, PARTITIONS)
        candidates = self._candidates()
        rounds_of: dict[str, list[RunTiming]] = {name: [] for name, _run in candidates}
        extra: dict[str, int] = {}
        for n in range(rounds):
            # Each round starts one candidate later: none always runs first or last.
            for name, run in candidates[n % len(candidates) :] + candidates[: n % len(candidates)]:
                print(f"   {name} ...", end=" ", flush=True)
                destination, timing = run(topic, tail, f"r{n}")
                written = EndOffsets(self.target, [(destination, PARTITIONS)], committed=False)
                extra[name] = written.total() - tail.total
                if self.verify:
                    self._verify(destination, tail, timing)
                rounds_of[name].append(timing)
                print(
                    f"{tail.total / timing.seconds:,.0f} records/s over {timing.seconds:.1f} s "
                    f"(start-up {timing.startup:.1f} s){''.join('; ' + n for n in timing.notes)}",
                    flush=True,
                )
        # The median round of each candidate (by time): one slow or fast round moves nothing.
        timings = {
            name: sorted(runs, key=lambda t: t.seconds)[(len(runs) - 1) // 2]
            for name, runs in rounds_of.items()
        }
        return Row(size, count, timings, extra, rounds_of)

    def _candidates(self) -> list[tuple[str, CopyRun]]:
        runs: list[tuple[str, CopyRun]] = [("plain loop", self._plain)]
        runs += [
            (
                "pipeline" if n == 0 else f"pipeline, staging {compression}",
                functools.partial(self._pipeline, staging_compression=compression),
            )
            for n, compression in enumerate(self.staging_compressions)
        ]
        runs += [
            (f"pipeline, {workers} workers", functools.partial(self._pipeline, workers=workers))
            for workers in self.workers
            if workers > 1
        ]
        runs += [
            ("MM2 at-least-once", functools.partial(self._mm2, exactly_once=False)),
            ("MM2 exactly-once", functools.partial(self._mm2, exactly_once=True)),
        ]
        return runs

    def _plain(self, topic: str, tail: SourceTail, tag: str) -> tuple[str, RunTiming]:
        destination = f"{topic}-baseline-{tag}"
        launched = time.monotonic()
        child = ChildRun(_baseline, self.source, self.target, topic, tail.total, destination)
        try:
            timing = self._await(destination, tail, [(destination, PARTITIONS)], launched,
                                 lambda: [child.pid], child.check_alive)  # fmt: skip
            # The loop exits once it has flushed, often before the last check here: its own
            # CPU count (from assignment to flush) instead of /proc.
            _seconds, timing.cpu_role = child.result(120)  # type: ignore[misc]  # (s, cpu s)
        finally:
            child.kill()
        return destination, timing

    def _pipeline(
        self,
        topic: str,
        tail: SourceTail,
        tag: str,
        *,
        staging_compression: str = "lz4",
        workers: int = 1,
    ) -> tuple[str, RunTiming]:
        flow = f"bench-{topic}-{staging_compression}-{workers}-{tag}"
        rename = f"pipeline-{staging_compression}-{workers}-{tag}.{{topic}}"
        destination = rename.format(topic=topic)
        launched = time.monotonic()
        env = {
            "REPLICATION_STAGING_COMPRESSION": staging_compression,
            "REPLICATION_DESTINATION_TOPIC": rename,
            "REPLICATION_WORKERS": str(workers),
        }
        with self._roles(flow, topic, env) as (replicator, deduplicator):
            timing = self._await(
                destination,
                tail,
                [(FlowNames(flow).staging, PARTITIONS), (destination, PARTITIONS)],
                launched,
                lambda: [replicator.pid, deduplicator.pid],
                lambda: _check_roles(replicator, deduplicator),
            )
            timing.notes.append(
                "peak RSS: "
                + ", ".join(
                    f"{r.name} {_peak_rss_mib(r.pid):.0f} MiB" for r in (replicator, deduplicator)
                )
            )
            for role in (replicator, deduplicator):  # stage 1 first: nothing new for stage 2
                if role.terminate(60) != 0:
                    timing.notes.append(f"{role.name} exited with {role.returncode}")
        # The clock starts at stage 1's first staging record; stage 2 is still starting then
        # (it waits for the staging topic stage 1 creates): that start-up is in the time.
        timing.notes.append(
            f"first destination record {timing.destination_first - timing.first_output:.1f} s "
            "after the first staging record"
        )
        stage1, stage2 = (cpu / tail.total * 1e6 for cpu in timing.cpu_each)
        timing.notes.append(f"cpu s/M: replicator {stage1:.2f}, deduplicator {stage2:.2f}")
        staging_mb = _disk_mb(self.data_dirs[1], FlowNames(flow).staging)
        timing.notes.append(
            f"on disk: staging {staging_mb:.0f} MB, destination "
            f"{_disk_mb(self.data_dirs[1], destination):.0f} MB"
        )
        return destination, timing

    def _mm2(
        self, topic: str, tail: SourceTail, tag: str, *, exactly_once: bool
    ) -> tuple[str, RunTiming]:
        alias = f"mm2{'eos' if exactly_once else 'alo'}{topic.rsplit('-', 1)[-1]}{tag}"
        with self._mirrormaker(alias, topic, exactly_once=exactly_once) as mm2:
            timing = self._await(
                mm2.destination_topic,
                tail,
                [(mm2.destination_topic, PARTITIONS)],
                mm2.launched,
                lambda: [mm2.pid],
                lambda: _check_mm2(mm2),
            )
            support, producers = mm2.exactly_once_evidence()
            timing.notes.append(
                f"log: exactly.once.source.support={support}, {producers} transactional producers"
            )
            if exactly_once and (support != "enabled" or producers < PARTITIONS):
                timing.notes.append("EXACTLY-ONCE NOT CONFIRMED BY THE LOG")
            mm2.stop()
        return mm2.destination_topic, timing

    def _await(
        self,
        destination: str,
        tail: SourceTail,
        first_output: list[tuple[str, int]],
        launched: float,
        role_pids: Callable[[], list[int | None]],
        check_alive: Callable[[], None],
    ) -> RunTiming:
        return await_copy(
            self.target,
            destination,
            tail,
            first_output_topics=first_output,
            launched=launched,
            role_pids=role_pids,
            broker_pids=self.broker_pids,
            check_alive=check_alive,
            timeout_s=COPY_TIMEOUT_S,
        )

    def _verify(self, destination: str, tail: SourceTail, timing: RunTiming) -> None:
        """Count every record a read_committed consumer sees, per partition, up to the last."""
        reader = Consumer(
            {
                "bootstrap.servers": self.target,
                "group.id": "bench-verify",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        reader.assign([TopicPartition(destination, p, 0) for p in range(PARTITIONS)])
        counts = dict.fromkeys(range(PARTITIONS), 0)
        open_partitions = {p for p, n in tail.counts.items() if n}
        deadline = time.monotonic() + 300
        while open_partitions and time.monotonic() < deadline:
            for message in reader.consume(10000, 0.5):
                p = message.partition()
                if message.error() or p not in open_partitions:
                    continue
                counts[p] += 1
                if message.key() == tail.last_keys[p]:
                    open_partitions.discard(p)
        reader.close()
        wrong = {p: (counts[p], n) for p, n in tail.counts.items() if counts[p] != n}
        timing.notes.append(
            "verified: per-partition counts equal the source's"
            if not wrong
            else f"VERIFY FAILED (got, want): {wrong}"
        )

    # -- latency ------------------------------------------------------------------------------

    def latency(
        self, candidate: str, rate: float, tag: str = "lat"
    ) -> tuple[str, float, list[float]]:
        topic = f"latency-{'pipeline' if candidate == 'pipeline' else 'mm2eos'}-{tag}"
        _create(self.source, topic)
        print(f"\n== latency of the {candidate} at {rate:,.0f} records/s", flush=True)
        with self._candidate(candidate, topic, tag) as (destination, check_alive):
            probe_until_visible(self.source, self.target, topic, destination, START_TIMEOUT_S)
            with PacedProducer(self.source, topic, PARTITIONS, rate, 100):
                time.sleep(LATENCY_WARMUP_S)
                window = (time.time(), time.time() + LATENCY_WINDOW_S)
                latencies = collect_latencies(
                    self.target, destination, PARTITIONS, window, check_alive, 120
                )
        return candidate, rate, latencies

    # -- recovery -----------------------------------------------------------------------------

    def recovery_pipeline(self, rate: float) -> list[Recovery]:
        topic = "recovery-pipeline"
        _create(self.source, topic)
        flow = "bench-recovery"
        destination = f"pipeline.{topic}"
        print(f"\n== recovery of the pipeline at {rate:,.0f} records/s", flush=True)
        results = []
        with self._roles(flow, topic) as (replicator, deduplicator), ExitStack() as stack:

            def check_alive() -> None:
                _check_roles(replicator, deduplicator)

            probe_until_visible(self.source, self.target, topic, destination, START_TIMEOUT_S)
            sampler = Sampler(self.source, topic, self.target, destination, PARTITIONS)
            fresh = stack.enter_context(closing(FreshRecords(self.target, destination, PARTITIONS)))
            with PacedProducer(self.source, topic, PARTITIONS, rate, 100):
                sampler.run_for(RECOVERY_WARMUP_S, check_alive)
                # The default configuration: each stage's identity is its host name.
                for victims in ([replicator], [deduplicator], [replicator, deduplicator]):
                    name = " and ".join(v.name for v in victims)
                    killed_at, moment = time.monotonic(), fresh.mark()
                    for victim in victims:
                        victim.kill()
                    for victim in victims:
                        victim.start()
                    sampler.run_until_recovered(killed_at, name, check_alive, RECOVERY_TIMEOUT_S)
                    results.append(
                        analyse_recovery(
                            sampler.samples, killed_at, name, _since(fresh, moment, killed_at)
                        )
                    )
            _report_exactness("pipeline", self.source, topic, self.target, destination)
        return results

    def recovery_mm2(self, rate: float) -> list[Recovery]:
        topic = "recovery-mm2eos"
        _create(self.source, topic)
        print(f"\n== recovery of MM2 exactly-once at {rate:,.0f} records/s", flush=True)
        with ExitStack() as stack:
            mm2 = stack.enter_context(self._mirrormaker("mm2eosrec", topic, exactly_once=True))
            destination = mm2.destination_topic
            probe_until_visible(self.source, self.target, topic, destination, START_TIMEOUT_S)
            sampler = Sampler(self.source, topic, self.target, destination, PARTITIONS)
            fresh = stack.enter_context(closing(FreshRecords(self.target, destination, PARTITIONS)))
            producer = stack.enter_context(PacedProducer(self.source, topic, PARTITIONS, rate, 100))
            sampler.run_for(RECOVERY_WARMUP_S, lambda: _check_mm2(mm2))
            killed_at, moment = time.monotonic(), fresh.mark()
            mm2.kill()
            mm2.start()  # same alias: its offsets, configs and transactional ids
            sampler.run_until_recovered(
                killed_at, "MirrorMaker 2", lambda: _check_mm2(mm2), MM2_RECOVERY_TIMEOUT_S
            )
            flowing = _since(fresh, moment, killed_at)
            producer.stop()  # MM2 goes on copying what is left
            _report_exactness("MirrorMaker 2 (EOS)", self.source, topic, self.target, destination)
        result = analyse_recovery(sampler.samples, killed_at, "MirrorMaker 2 (EOS)", flowing)
        return [result]

    # -- processes ----------------------------------------------------------------------------

    @contextmanager
    def _roles(
        self, flow: str, topic: str, extra: dict[str, str] | None = None
    ) -> Iterator[tuple[RoleProcess, RoleProcess]]:
        env = {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": self.source,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": self.target,
            "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
            "REPLICATION_DESTINATION_TOPIC": "pipeline.{topic}",
            "REPLICATION_FLOW": flow,
            "REPLICATION_STAGING_PARTITIONS": str(PARTITIONS),
            "STATE_DIR": str(self.base / "state" / flow),
            "METRICS_PORT": "0",
            **self.pipeline_env,
            **(extra or {}),
        }
        logs = self.base / "roles" / flow
        with ExitStack() as stack:
            started = []
            for role in ("replicator", "deduplicator"):
                # The kit's process dies with the bench (even a SIGKILLed one): no role
                # outlives the bench and its clusters. Workers are started by the command line.
                if env.get("REPLICATION_WORKERS", "1") == "1":
                    process = RoleProcess(role, env, logs)
                else:
                    process = RoleProcess("exactly", env, logs, args=(role,), name=role)
                started.append(stack.enter_context(process))
            yield started[0], started[1]

    def _mirrormaker(self, alias: str, topic: str, *, exactly_once: bool) -> MirrorMaker2:
        producer = {k: str(v).lower() for k, v in _producer_settings().items()}
        producer["batch.size"] = str(JAVA_BATCH_SIZE)
        mm2 = MirrorMaker2(
            self.libs,
            self.base / "mirrormaker",
            alias,
            self.source,
            self.target,
            topic,
            exactly_once=exactly_once,
            tasks=PARTITIONS,
            producer=producer,
            consume_batch=CONSUME_BATCH,
            fetch_partition_bytes=SOURCE_FETCH_PARTITION_BYTES,
        )
        return mm2

    @contextmanager
    def _candidate(
        self, candidate: str, topic: str, tag: str
    ) -> Iterator[tuple[str, Callable[[], None]]]:
        if candidate == "pipeline":
            with self._roles(f"bench-{tag}", topic) as (replicator, deduplicator):
                yield f"pipeline.{topic}", lambda: _check_roles(replicator, deduplicator)
        else:
            with self._mirrormaker(f"mm2eos{tag}", topic, exactly_once=True) as mm2:
                yield mm2.destination_topic, lambda: _check_mm2(mm2)


def _since(fresh: FreshRecords, moment: int, killed_at: float) -> float | None:
    seen = fresh.first_seen(moment)
    return None if seen is None else seen - killed_at


def _report_exactness(
    candidate: str, source: str, topic: str, target: str, destination: str
) -> None:
    """After the kills: every source record on the destination once, in order?"""
    records, missing, duplicated = exactly_once(source, topic, target, destination, PARTITIONS)
    print(
        f"   {candidate} after the kills: {records:,} source records, {missing:,} missing, "
        f"{duplicated:,} duplicated on the destination",
        flush=True,
    )


def _peak_rss_mib(pid: int | None) -> float:
    """The most resident memory one process of ``pid``'s tree has had so far (VmHWM)."""
    return float("nan") if pid is None else peak_rss_mib(pid)


def _disk_mb(data_dir: Path, topic: str) -> float:
    """What a topic's log segments hold on a broker's disk (compressed batches as written)."""
    return sum(f.stat().st_size for f in data_dir.glob(f"{topic}-*/*.log")) / 1e6


def _check_roles(*roles: RoleProcess) -> None:
    for role in roles:
        if not role.is_running():
            raise RuntimeError(f"{role.name} exited with {role.returncode}\n{role.log_tail()}")


def _check_mm2(mm2: MirrorMaker2) -> None:
    if not mm2.is_running():
        raise RuntimeError(f"MirrorMaker 2 exited\n{mm2.log_tail()}")


# -- reports --------------------------------------------------------------------------------------


def report_throughput(row: Row) -> None:
    megabytes = row.count * (row.size + 24) / 1e6  # value, key and header
    plain = row.timings["plain loop"].seconds
    eos = row.timings["MM2 exactly-once"].seconds
    print(
        f"\n{row.size} B values, {row.count:,} records in {PARTITIONS} partitions; time from the "
        "first record appended on the target to the last visible (read_committed), the median "
        "of each candidate's rounds:"
    )
    print(
        f"  {'candidate':<24} {'records/s':>10} {'MB/s':>6} {'seconds':>7} {'start-up':>8} "
        f"{'cpu s/M':>7} {'brokers':>7} {'x plain':>7} {'x MM2 EOS':>9} {'extra offsets':>13}"
    )
    for name, timing in row.timings.items():
        print(
            f"  {name:<24} {row.count / timing.seconds:>10,.0f} "
            f"{megabytes / timing.seconds:>6.1f} {timing.seconds:>7.1f} {timing.startup:>8.1f} "
            f"{timing.cpu_role / row.count * 1e6:>7.2f} "
            f"{timing.cpu_brokers / row.count * 1e6:>7.2f} "
            f"{plain / timing.seconds:>7.2f} {eos / timing.seconds:>9.2f} "
            f"{row.extra_offsets[name]:>13,}"
        )
    if any(len(runs) > 1 for runs in row.rounds.values()):
        print("  each round's records/s (the table shows the median round):")
        for name, runs in row.rounds.items():
            print(f"    {name:<24} " + ", ".join(f"{row.count / t.seconds:,.0f}" for t in runs))
    short = [n for n, timing in row.timings.items() if timing.seconds < 10]
    if short:
        print(f"  (shorter than 10 s: {', '.join(short)}; raise the record count)")


def report_summary(rows: list[Row]) -> None:
    print(
        "\nrecords/s: the source records over the copy's time; MB/s counts value + key + header; "
        "start-up: launch to first record on the target (not in the rate); cpu s/M: CPU seconds "
        "per million records of the candidate's processes and of both brokers over the copy; "
        "x plain, x MM2 EOS: throughput ratio (higher is faster); extra offsets: destination "
        "offsets beyond the records (transaction markers, or duplicates where there are none)."
    )
    print(
        "\ncompression: the plain loop's and MirrorMaker 2's producers lz4 (the same settings); "
        "the pipeline's staging as REPLICATION_STAGING_COMPRESSION says (default lz4), its "
        "destination none (stage 2's producer, librdkafka's default)"
    )
    print("\npipeline, the targets of issue 16 (>= 1.5x MM2 exactly-once, >= 0.7x the plain loop):")
    for row in rows:
        pipeline = row.timings["pipeline"].seconds
        print(
            f"  {row.size:>5} B: {row.timings['MM2 exactly-once'].seconds / pipeline:.2f}x "
            f"MM2 exactly-once, {row.timings['plain loop'].seconds / pipeline:.2f}x the plain "
            f"loop, {row.timings['MM2 at-least-once'].seconds / pipeline:.2f}x MM2 at-least-once"
        )


def report_latency(results: list[tuple[str, float, list[float]]]) -> None:
    print(
        f"\nlatency, production time (the record's CreateTime, producer linger 1 ms) to "
        f"visibility under read_committed on the destination, 100 B records over "
        f"{LATENCY_WINDOW_S:.0f} s after {LATENCY_WARMUP_S:.0f} s of warm-up:"
    )
    for candidate, rate, latencies in results:
        print(
            f"  {candidate:<18} at {rate:>8,.0f} records/s: p50 {percentile(latencies, 50):>6.0f}"
            f" ms, p99 {percentile(latencies, 99):>6.0f} ms, max {max(latencies):>6.0f} ms "
            f"({len(latencies):,} records)"
        )


def _describe(result: Recovery) -> str:
    def seconds(value: float | None) -> str:
        return "not within the wait" if value is None else f"{value:.1f} s"

    full_speed = (
        f"full speed (>= 90 % of {result.produce_rate:,.0f}/s) again after "
        f"{seconds(result.full_speed_s)}"
        if result.dipped
        else f"never below half of {result.produce_rate:,.0f}/s over any 1 s"
    )
    extra = result.max_lag - result.lag_before
    return (
        f"SIGKILL {result.victim}: records produced after the kill visible after "
        f"{seconds(result.flowing_again_s)}; {full_speed}, caught up after "
        f"{seconds(result.caught_up_s)}; longest stretch without progress "
        f"{result.stalled_s:.1f} s; lag {result.lag_before:,.0f} records before, "
        f"{result.max_lag:,} at most (+{extra / result.produce_rate:.1f} s of production)"
    )


def report_recovery(results: list[Recovery], rate: float) -> None:
    print(
        f"\nrecovery while producing {rate:,.0f} records/s, each victim SIGKILLed and restarted at "
        "once: visible after = kill to the first record produced after the kill seen by a "
        "read_committed reader of the destination's tail (docs/design.md §10: records flowing "
        "again); full speed = the first second after the kill's dip in which the destination "
        "gained >= 90 % of the produce rate; caught up = after the largest lag, records produced "
        "but not yet visible back to <= 2x the lag before the kill + 0.1 s of production "
        "(samples every 0.1 s):"
    )
    for result in results:
        print(f"  {_describe(result)}")


if __name__ == "__main__":
    main()
