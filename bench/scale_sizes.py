"""Issue 34's record-size axis: the same bytes in records of 100 B to 1 MiB, copied by the plain
loop, the pipeline and MirrorMaker 2 exactly-once, in one invocation.

    python -m bench.scale_sizes [--sizes 100,1024,102400,1048576] [--megabytes MB]
        [--max-records N] [--rounds N] [--warm-up N]

Starts two local Kafka clusters (localkafka) and, for each record size, fills a 12-partition
source topic with --megabytes of values of that size (at most --max-records records;
bench/payloads.py: a different value for every record, about as compressible as real data),
then copies it with every candidate as bench/scale_partitions.py does (same candidates, same
timing, fresh destinations deleted after each copy, rounds in rotating order, the median copy
counts). Records too large for the broker's default limit (about 1 MB) are what a user with
such records has: the source topic's max.message.bytes raised to twice the record size, which
the pipeline mirrors onto its destination (at least 16 MiB there) and MirrorMaker 2 syncs onto
its own; MirrorMaker 2's
producer gets max.request.size to match, the plain loop its message.max.bytes. The pipeline
runs at its defaults: a record of any size up to its staging topic's limit (16 MiB) travels in
an envelope of its own. Ratios are within this run, on a noisy 2-core machine.
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
from bench.mirrormaker import ensure_mirrormaker
from bench.pipeline_candidates import add_pipeline_env
from bench.scale_partitions import (
    CANDIDATES,
    Copy,
    ScaleBench,
    Tier,
    cpu_ratio,
    run_tier,
    warm_up,
)

# Kafka's default max.message.bytes (1048588) with room for a record's key, headers and batch.
_DEFAULT_LIMIT = 1_000_000


def record_limit(size: int) -> int:
    """max.message.bytes a topic of ``size``-byte records needs (0: the broker's default)."""
    return 0 if size < _DEFAULT_LIMIT else 2 * size


def _report(results: dict[int, list[Copy | None]]) -> None:
    print(
        "\nvalue bytes  records   ours/MM2-EOS  MB/s plain  ours  MM2-EOS  "
        "cpu/rec ours/MM2 (roles+brokers; without JIT)"
    )
    for size, copies in results.items():
        plain, ours, mm2 = copies
        if plain is None or ours is None or mm2 is None:
            print(f"{size:>11,}  (a candidate failed: no ratios)")
            continue
        megabytes = [copy.rate * size / 1e6 for copy in (plain, ours, mm2)]
        print(
            f"{size:>11,} {ours.records:>8,} {ours.rate / mm2.rate:>13.2f}x "
            + "".join(f"{mb:>6.1f}" for mb in megabytes)
            + f"   {cpu_ratio(ours, mm2)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1024,102400,1048576", help="value bytes,...")
    parser.add_argument("--megabytes", type=int, default=1000, help="of values per size")
    parser.add_argument("--max-records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warm-up", type=int, default=200_000, help="records (0: none)")
    add_pipeline_env(parser)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    signal.signal(signal.SIGTERM, interrupt)
    libs = ensure_mirrormaker()
    started = time.monotonic()
    results: dict[int, list[Copy | None]] = {}
    with bench_clusters("bench-sizes-") as (base, clusters):
        bench = ScaleBench(clusters, base, libs, verify=False)
        bench.pipeline_env = dict(item.split("=", 1) for item in args.pipeline_env)
        # connect-mirror-maker.sh's own heap (its KAFKA_HEAP_OPTS default, -Xmx2G), not the
        # other benches' 1 GiB: with 1 GiB, MirrorMaker 2 exited during its 100 KiB copy with
        # nothing in its log (it runs with ExitOnOutOfMemoryError; 12 tasks each buffer fetches
        # of up to 8 MiB a partition and a producer's 32 MiB).
        bench.mm2_heap = "2g"
        warm_up(bench, CANDIDATES, args.warm_up)
        for size in sizes:
            bench.record_limit = record_limit(size)
            bench.mm2_producer = (
                {"max.request.size": str(bench.record_limit)} if bench.record_limit else {}
            )
            count = min(args.max_records, args.megabytes * 1_000_000 // size)
            tier = Tier(12, 1, prefix=f"size{size}x")
            results[size] = run_tier(bench, tier, size, count, args.rounds)
    _report(results)
    print(f"\nbench took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
