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
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.clusters import bench_clusters
from bench.common import interrupt
from bench.mirrormaker import MirrorMaker2, ensure_mirrormaker
from bench.pipeline_candidates import add_pipeline_env
from bench.pipeline_paced import PacedBench
from bench.pipeline_report import (
    report_latency,
    report_recovery,
    report_summary,
    report_throughput,
)
from bench.replicator_throughput import PARTITIONS, producer_settings
from replicator.clients import SOURCE_FETCH_PARTITION_BYTES
from replicator.loop import CONSUME_BATCH

# The Java producer's batch.size set to librdkafka's default (what our producers keep), so
# MirrorMaker batches up to the same size as we do within the same linger.
JAVA_BATCH_SIZE = 1_000_000


class Bench(PacedBench):
    """Every candidate and phase, MirrorMaker 2 set up like our stages: our producer settings,
    stage 1's consume batch and fetch size."""

    def _mirrormaker(
        self, alias: str, topic: str, *, exactly_once: bool, pattern: str | None = None
    ) -> MirrorMaker2:
        producer = {k: str(v).lower() for k, v in producer_settings().items()}
        producer["batch.size"] = str(JAVA_BATCH_SIZE)
        producer.update(self.mm2_producer)
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
            pattern=pattern,
            heap=self.mm2_heap,
        )
        return mm2


def _parser() -> argparse.ArgumentParser:
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
    _pipeline_options(parser)
    return parser


def _pipeline_options(parser: argparse.ArgumentParser) -> None:
    """How the pipeline's candidates run, and whether every copy is counted."""
    parser.add_argument(
        "--workers",
        default="1",
        help="comma-separated REPLICATION_WORKERS: the pipeline runs once more with each above 1",
    )
    add_pipeline_env(parser)
    parser.add_argument(
        "--staging-compression",
        default="lz4",
        help="comma-separated REPLICATION_STAGING_COMPRESSION values: the pipeline runs once "
        "with each (the first is 'pipeline' in the ratios; default: lz4, the default)",
    )
    parser.add_argument(
        "--verify", action="store_true", help="after each copy, count every destination record"
    )


def _arguments() -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    if not phases <= {"throughput", "latency", "recovery"}:
        parser.error(f"unknown phase in {args.phases!r}")
    if "throughput" not in phases and not args.rate:
        parser.error("latency and recovery without the throughput phase need --rate")
    return args


def main() -> None:
    args = _arguments()
    phases = set(args.phases.split(","))
    # SIGTERM like Ctrl-C: the finally blocks stop every process this bench started.
    signal.signal(signal.SIGTERM, interrupt)
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


if __name__ == "__main__":
    main()
