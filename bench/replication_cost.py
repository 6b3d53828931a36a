"""What replication costs: the 1 KiB copy (bench/pipeline_vs_mirrormaker.py's throughput phase:
the plain loop, the pipeline, MirrorMaker 2 at-least-once and exactly-once) on two one-node
clusters, then on two clusters of three replicating nodes (replication factor 3,
min.insync.replicas 2, every write acknowledged by two replicas), in one invocation.

    python -m bench.replication_cost [--records N] [--rounds N]

The clusters of each shape run alone (six JVMs and then two would share the two cores
otherwise). Prints each candidate's rate on both shapes and the ratio three nodes / one node;
ratios within one run on a noisy 2-core machine, never pass/fail.
"""

from __future__ import annotations

import argparse
import signal
import time

from bench.clusters import bench_clusters
from bench.common import interrupt
from bench.mirrormaker import ensure_mirrormaker
from bench.pipeline_report import report_throughput
from bench.pipeline_throughput import Row
from bench.pipeline_vs_mirrormaker import Bench

SIZE = 1024
SHAPES = (1, 3)  # nodes per cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warm-up", type=int, default=100_000)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, interrupt)
    libs = ensure_mirrormaker()
    started = time.monotonic()
    rows: dict[int, Row] = {}
    for nodes in SHAPES:
        print(f"\n=== two clusters of {nodes} node(s) each", flush=True)
        with bench_clusters(f"bench-nodes{nodes}-", nodes=nodes) as (base, clusters):
            bench = Bench(clusters, base, libs, verify=False)
            if args.warm_up:
                bench.warm_up(args.warm_up)
            rows[nodes] = bench.throughput(SIZE, args.records, args.rounds)
            report_throughput(rows[nodes])
    one, three = rows[SHAPES[0]], rows[SHAPES[1]]
    print(f"\n{SIZE} B values, {args.records:,} records: records/s on 1 node, on 3, 3 / 1")
    for name, timing in one.timings.items():
        rate_one = one.count / timing.seconds
        rate_three = three.count / three.timings[name].seconds
        ratio = rate_three / rate_one
        print(f"  {name:<24} {rate_one:>10,.0f} {rate_three:>10,.0f} {ratio:>6.2f}x")
    for nodes, row in rows.items():
        pipeline = row.timings["pipeline"].seconds
        mm2 = row.timings["MM2 exactly-once"].seconds
        print(f"  pipeline / MM2 exactly-once on {nodes} node(s): {mm2 / pipeline:.2f}x")
    print(f"\nbench took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
