"""Stage 2's commit limits by measurement: pipeline throughput and latency for several
REPLICATION_COMMIT_INTERVAL_MS / REPLICATION_COMMIT_MAX_RECORDS pairs, in one invocation.

    python -m bench.commit_limits [--records N] [--rates R,R] [--variants 100:10000,100:100000]

On its own two local clusters: the plain consume->produce loop once (the baseline), then per
variant a fresh 12-partition source topic of 100 B records copied by the whole pipeline
(records/s and the ratio to the baseline), and the pipeline's p50/p99 latency (production to
read_committed visibility) at each of the given rates, after an untimed warm-up copy. Noisy
2-core machine: compare within one run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.clusters import bench_clusters
from bench.common import percentile
from bench.flowmeter import source_tail
from bench.mirrormaker import ensure_mirrormaker
from bench.pipeline_vs_mirrormaker import Bench
from bench.replicator_throughput import create_topic, fill


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument(
        "--rates", default="1000,20000", help="comma-separated records/s for latency"
    )
    parser.add_argument(
        "--variants",
        default="100:10000,100:100000,250:100000,1000:1000000",
        help="comma-separated INTERVAL_MS:MAX_RECORDS pairs",
    )
    args = parser.parse_args()
    variants = [tuple(int(x) for x in v.split(":")) for v in args.variants.split(",")]
    with bench_clusters("bench-commit-") as (base, clusters):
        bench = Bench(clusters, base, ensure_mirrormaker(), verify=False)
        bench.warm_up(200_000)
        rates = [float(rate) for rate in args.rates.split(",")]
        rows = []
        baseline = 0.0  # records/s of the plain loop, measured with the first variant
        for interval_ms, max_records in variants:
            topic = f"commit-{interval_ms}-{max_records}"
            create_topic(bench.source, topic)
            fill(bench.source, topic, 100, args.records)
            tail = source_tail(bench.source, topic, 12)
            if not baseline:
                _, timing = bench._plain(topic, tail, "c")
                baseline = tail.total / timing.seconds
                print(f"plain loop: {baseline:,.0f} records/s", flush=True)
            bench.pipeline_env = {
                "REPLICATION_COMMIT_INTERVAL_MS": str(interval_ms),
                "REPLICATION_COMMIT_MAX_RECORDS": str(max_records),
            }
            _, timing = bench._pipeline(topic, tail, "c")
            throughput = tail.total / timing.seconds
            latencies = [
                bench.latency("pipeline", rate, tag=f"lat-{interval_ms}-{max_records}-{n}")[2]
                for n, rate in enumerate(rates)
            ]
            rows.append((interval_ms, max_records, throughput, latencies))
            print(
                f"{interval_ms} ms / {max_records} records: {throughput:,.0f} records/s, "
                + ", ".join(
                    f"at {rate:,.0f}/s p50 {percentile(lat, 50):.0f} ms p99 "
                    f"{percentile(lat, 99):.0f} ms"
                    for rate, lat in zip(rates, latencies, strict=True)
                ),
                flush=True,
            )
    _report(rows, rates, baseline)


def _report(rows: list, rates: list[float], baseline: float) -> None:
    print(f"\n100 B records; plain loop {baseline:,.0f} records/s; latency p50/p99 in ms")
    print(
        f"{'interval ms':>12} {'max records':>12} {'records/s':>11} {'x plain':>8} "
        + " ".join(f"{f'at {rate:,.0f}/s':>16}" for rate in rates)
    )
    for interval_ms, max_records, throughput, latencies in rows:
        print(
            f"{interval_ms:>12} {max_records:>12,} {throughput:>11,.0f} "
            f"{throughput / baseline:>8.2f} "
            + " ".join(
                f"{f'{percentile(lat, 50):.0f} / {percentile(lat, 99):.0f}':>16}"
                for lat in latencies
            )
        )


if __name__ == "__main__":
    main()
