"""A rolling restart of both clusters, the pipeline and MirrorMaker 2 exactly-once copying through
the same one: every node of the source, then of the target, stopped and started again one at a
time as an upgrade does (the next once every replica is in sync), under paced traffic.

    python -m bench.rolling_restart [--rate R] [--how SIGTERM|SIGKILL] [--sides source,target]
                                    [--candidates pipeline] [--logs DIR]

Two local clusters of three replicating nodes (replication factor 3, min.insync.replicas 2).
Each candidate copies a source topic of its own (12 partitions, 100 B values) fed at --rate
records/s (default 2,500 each: 5,000 records/s into the source in all); both run throughout the
one roll, so each node's restart is the same event for both. For each node: how long each
candidate's destination stood still (no record became visible to a read_committed reader)
between the node's stop and 5 s after it served again, the whole destination and its longest
partition (stage 2's one transaction holds every partition together; MirrorMaker 2's tasks each
commit their own). Then every record is checked on both destinations, and whether either
candidate exited is said. A noisy 2-core machine carrying six JVMs: compare the two columns,
never the numbers alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.clusters import bench_clusters
from bench.common import interrupt
from bench.flowmeter import exactly_once
from bench.mirrormaker import ensure_mirrormaker
from bench.pacing import PacedProducer, probe_until_visible
from bench.pipeline_paced import START_TIMEOUT_S
from bench.pipeline_vs_mirrormaker import Bench
from bench.recovery import Sample, Sampler, longest_partition_stall, longest_stall
from bench.replicator_throughput import PARTITIONS, create_topic
from localkafka import LocalCluster

CANDIDATES = ("pipeline", "MM2 exactly-once")
SIZE = 100
WARMUP_S = 20.0
SETTLE_S = 5.0  # after a node serves again: a stall that begins as it returns still counts
HOLD_S = 8.0  # a SIGKILLed node stays down this long, as a crashed machine's would
_TICK_S = 0.1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2500.0, help="records/s per candidate")
    parser.add_argument("--how", choices=("SIGTERM", "SIGKILL"), default="SIGTERM")
    parser.add_argument(
        "--sides", default="source,target", help="the clusters rolled, in this order"
    )
    parser.add_argument(
        "--candidates",
        default=",".join(CANDIDATES),
        help="which of them copy through the roll (the pipeline alone: 'pipeline')",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        help="keep the candidates' logs (stage 2's 'slow call' lines) and the samples here",
    )
    args = parser.parse_args()
    if not set(args.sides.split(",")) <= {"source", "target"}:
        parser.error(f"--sides {args.sides!r}: source, target or both, comma-separated")
    candidates = args.candidates.split(",")
    if not set(candidates) <= set(CANDIDATES):
        parser.error(f"--candidates {args.candidates!r}: of {', '.join(CANDIDATES)}")
    signal.signal(signal.SIGTERM, interrupt)
    libs = ensure_mirrormaker()
    started = time.monotonic()
    with bench_clusters("bench-rolling-", nodes=3) as (base, clusters):
        bench = Bench(clusters, base, libs, verify=False)
        with ExitStack() as stack:
            watched: dict[str, Watched] = {}
            if args.logs is not None:  # registered first: copied after every candidate stopped
                stack.callback(_keep_logs, base, args.logs)
            for n, candidate in enumerate(candidates):
                topic = f"rolling-{n}"
                create_topic(bench.source, topic)
                destination, check_alive = stack.enter_context(
                    bench._candidate(candidate, topic, f"roll{n}")
                )
                probe_until_visible(
                    bench.source, bench.target, topic, destination, PARTITIONS, START_TIMEOUT_S
                )
                producer = stack.enter_context(
                    PacedProducer(bench.source, topic, PARTITIONS, args.rate, SIZE)
                )
                sampler = Sampler(bench.source, topic, bench.target, destination, PARTITIONS)
                watched[candidate] = Watched(topic, destination, check_alive, sampler, producer)
            with sampling([w.sampler for w in watched.values()]):
                print(f"{args.rate:,.0f} records/s into each candidate's topic", flush=True)
                time.sleep(WARMUP_S)
                by_name = {cluster.name: cluster for cluster in clusters}
                windows = roll([by_name[side] for side in args.sides.split(",")], args.how)
                time.sleep(SETTLE_S)
            if args.logs is not None:  # first: kept even if the report fails
                _keep_samples(watched, windows, args.logs)
            report(watched, windows, args.how)
            for w in watched.values():
                w.producer.stop()  # the candidates copy what is left; then every record checked
            for candidate, w in watched.items():
                exited = w.exited()
                records, missing, duplicated = exactly_once(
                    bench.source, w.topic, bench.target, w.destination, PARTITIONS
                )
                print(
                    f"{candidate}: {records:,} source records, {missing:,} missing, "
                    f"{duplicated:,} duplicated on the destination"
                    + (f"; EXITED during the roll: {exited}" if exited else ""),
                    flush=True,
                )
    print(f"\nbench took {time.monotonic() - started:.0f} s")


class Watched:
    def __init__(
        self,
        topic: str,
        destination: str,
        check_alive: Callable[[], None],
        sampler: Sampler,
        producer: PacedProducer,
    ) -> None:
        self.topic = topic
        self.destination = destination
        self.check_alive = check_alive
        self.sampler = sampler
        self.producer = producer

    def exited(self) -> str | None:
        try:
            self.check_alive()
        except RuntimeError as exc:
            return str(exc).splitlines()[0]
        return None


@contextmanager
def sampling(samplers: Sequence[Sampler]) -> Iterator[None]:
    """Each sampler sampled every tick on a thread of its own while the roll blocks: a request
    to a node going down (up to 10 s) delays only its own candidate's samples."""
    stop = threading.Event()

    def run(sampler: Sampler) -> None:
        while not stop.wait(_TICK_S):
            sampler.sample()

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in samplers]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def roll(clusters: list[LocalCluster], how: str) -> list[tuple[str, float, float]]:
    """Each node of each cluster restarted in turn; (node, stopped at, serving again at)."""
    windows = []
    for cluster in clusters:
        for node in sorted(cluster.nodes):
            began = time.monotonic()
            cluster.restart_node(node, crash=how == "SIGKILL", down_s=HOLD_S, tie_to_parent=True)
            windows.append((f"{cluster.name} node {node}", began, time.monotonic()))
            print(f"  {windows[-1][0]} back after {windows[-1][2] - began:.0f} s", flush=True)
    return windows


def report(watched: dict[str, Watched], windows: list[tuple[str, float, float]], how: str) -> None:
    print(
        f"\nrolling restart ({how}): the longest stall of each destination per node, in s: the "
        "whole destination (nothing new on any partition) / any one partition"
    )
    print(f"  {'node':<16}" + "".join(f"{candidate:>22}" for candidate in watched))
    stalls: dict[str, list[tuple[float, float]]] = {candidate: [] for candidate in watched}
    for name, began, back in windows:
        row = f"  {name:<16}"
        for candidate, w in watched.items():
            until = back + SETTLE_S
            stall = (
                longest_stall(w.sampler.samples, began, until),
                longest_partition_stall(w.sampler.samples, began, until),
            )
            stalls[candidate].append(stall)
            row += f"{stall[0]:>15.1f} / {stall[1]:>4.1f}"
        print(row)
    for label, pick in (("median", _median), ("max", max)):
        print(
            f"  {label:<16}"
            + "".join(
                f"{pick([w for w, _ in s]):>15.1f} / {pick([p for _, p in s]):>4.1f}"
                for s in stalls.values()
            )
        )
    # A stall shorter than the gap between two samples can hide in it: a sample waits up to
    # 10 s on a node going down.
    roll_began = windows[0][1] if windows else 0.0
    gaps = [
        f"{candidate} {_longest_gap(w.sampler.samples, roll_began):.1f} s"
        for candidate, w in watched.items()
    ]
    print(f"  the longest gap between two samples through the roll: {', '.join(gaps)}")


def _longest_gap(samples: Sequence[Sample], since: float) -> float:
    return max((b.at - a.at for a, b in itertools.pairwise(samples) if b.at >= since), default=0.0)


def _keep_samples(
    watched: dict[str, Watched], windows: list[tuple[str, float, float]], logs: Path
) -> None:
    """Every sample and the roll's windows, for a stall read again partition by partition."""
    logs.mkdir(parents=True, exist_ok=True)
    kept = {
        "windows": windows,
        "samples": {
            c: [dataclasses.asdict(s) for s in w.sampler.samples] for c, w in watched.items()
        },
    }
    (logs / "samples.json").write_text(json.dumps(kept))


def _keep_logs(base: Path, logs: Path) -> None:
    for kept in ("roles", "mirrormaker"):
        if (base / kept).exists():
            shutil.copytree(base / kept, logs / kept, dirs_exist_ok=True)
    print(f"logs kept in {logs}", flush=True)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


if __name__ == "__main__":
    main()
