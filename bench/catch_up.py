"""Issue 34's catch-up axis: the backlog an outage leaves, drained by the pipeline and by
MirrorMaker 2 exactly-once while live traffic goes on, then the latency once caught up.

    python -m bench.catch_up [--records 10000000] [--size 1024] [--rate 200] [--after S]
        [--settle S] [--candidates pipeline,MM2 exactly-once]

Starts two local Kafka clusters (localkafka) and fills a 12-partition source topic with
--records records of --size bytes (bench/payloads.py): what accumulated while the replicator
was stopped. Then, for each candidate in turn (the pipeline at its defaults, MirrorMaker 2
exactly-once as bench/scale_partitions.py sets it up), a child process produces --rate
records/s into the same topic and the candidate starts from the topic's beginning into fresh
destinations (deleted after it). Drain: from the candidate's first record on the target to the
backlog's last record of every partition visible under read_committed (bench/flowmeter.py), and
the backlog's records/s over it. Once drained, the live records produced meanwhile are still
behind: after --settle seconds, the latency of every live record produced in the next --after
seconds (CreateTime to visibility under read_committed), p50/p99/max. One run on a noisy
2-core machine; nothing passes or fails on a number.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.clusters import bench_clusters
from bench.common import interrupt, percentile
from bench.mirrormaker import ensure_mirrormaker
from bench.pacing import LiveLatencies, PacedProducer
from bench.pipeline_candidates import CandidateFailedError
from bench.scale_partitions import Copy, ScaleBench, Tier, fill_tier
from localkafka import LocalCluster

CANDIDATES = ("pipeline", "MM2 exactly-once")


class CatchUpBench(ScaleBench):
    def __init__(
        self,
        clusters: list[LocalCluster],
        base: Path,
        libs: Path,
        *,
        settle_s: float,
        after_s: float,
    ) -> None:
        super().__init__(clusters, base, libs, verify=False)
        self.settle_s, self.after_s = settle_s, after_s
        self.latencies: list[float] = []
        self.after_copy = self._measure_latency

    def _measure_latency(self, destinations: dict[str, int]) -> None:
        """While the candidate still runs: settle, then the live records' latency."""
        reader = LiveLatencies(self.target, list(destinations.items()))
        time.sleep(self.settle_s)
        begin = time.time()
        time.sleep(self.after_s)
        # What the window produced is visible within a commit or two: read a little past it.
        time.sleep(5)
        self.latencies = reader.stop(begin, begin + self.after_s)


def _report(size: int, backlog: int, rows: list[tuple[Copy, list[float]]]) -> None:
    print(
        f"\nbacklog of {backlog:,} records of {size} B in 12 partitions, live traffic on top\n"
        f"{'candidate':<18} {'drain s':>8} {'backlog rec/s':>14} {'start-up s':>10} "
        f"{'then p50 ms':>11} {'p99':>7} {'max':>7} {'records':>8}"
    )
    for copy, latencies in rows:
        t = copy.timing
        tail = (
            f"{percentile(latencies, 50):>11.0f} {percentile(latencies, 99):>7.0f} "
            f"{max(latencies):>7.0f}"
            if latencies
            else f"{'-':>11} {'-':>7} {'-':>7}"
        )
        print(
            f"{copy.candidate:<18} {t.seconds:>8.1f} {copy.rate:>14,.0f} "
            f"{t.destination_first - t.launched:>10.1f} {tail} {len(latencies):>8}"
        )
    if len(rows) == 2:
        ours, mm2 = (copy for copy, _ in rows)
        print(
            f"drain time, ours / MM2 exactly-once: {ours.timing.seconds / mm2.timing.seconds:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    # Live records are produced one by one (1 ms linger, for their CreateTime): 2,000 a second
    # were as many produce requests, which on this 2-core machine cut both candidates' drain
    # of a 300,000-record backlog to 5,212 and 9,262 records/s (10 a second: 22,477 and 14,785).
    parser.add_argument("--rate", type=float, default=200.0, help="live records/s")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after the drain")
    parser.add_argument("--after", type=float, default=30.0, help="seconds of latency window")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    args = parser.parse_args()
    candidates = args.candidates.split(",")
    if not set(candidates) <= set(CANDIDATES):
        parser.error(f"unknown candidate in {args.candidates!r}")
    signal.signal(signal.SIGTERM, interrupt)
    libs = ensure_mirrormaker()
    started = time.monotonic()
    tier = Tier(12, 1, prefix="catchup")
    (topic,) = tier.source_topics()
    with bench_clusters("bench-catch-up-") as (base, clusters):
        bench = CatchUpBench(clusters, base, libs, settle_s=args.settle, after_s=args.after)
        tails = fill_tier(bench, tier, args.size, args.records)
        rows = []
        for n, candidate in enumerate(candidates):
            try:
                with PacedProducer(bench.source, topic, 12, args.rate, args.size):
                    copy = bench.copy(candidate, tier, tails, f"cu{n}x")
            except CandidateFailedError as failed:
                print(f"   {candidate}: FAILED: {failed}", flush=True)
                continue
            rows.append((copy, bench.latencies))
            print(f"   {candidate}: drained in {copy.timing.seconds:.1f} s", flush=True)
    _report(args.size, args.records, rows)
    print(
        f"\nlive traffic {args.rate:,.0f} records/s; bench took {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
