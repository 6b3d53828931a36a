"""What the reverse flow costs an active-active pair: A->B alone against A->B while B->A runs
at the same time, in one invocation.

    python -m bench.active_active [--records N] [--size BYTES] [--rounds R]

Two local clusters, A and B. Each round makes a new topic on both (12 partitions, N records of
SIZE bytes each side, a different value for every record), then copies it with both stages of
A->B running together, end to end: from the roles' start until stage 2 has committed every
envelope of A's records. In the "both" mode B->A starts at the same moment, on the same topic
name: its copies land in A while A->B reads it, and A->B's stage 1 passes them over (loop
prevention). Reports seconds and records/s of A->B per mode (best of the rounds) and both/alone
time. The modes alternate within each round, so drift on a noisy machine touches both; the
processes of both flows share this machine's cores, as they would share a host.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.clusters import bench_clusters
from bench.common import committed_total
from bench.topics import fill_topic, partition_count
from localkafka import LocalCluster, RoleProcess
from runtime.names import FlowNames

PARTITIONS = 12
MODES = ("alone", "both")
STAGES = ("replicator", "deduplicator")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    with bench_clusters("bench-aa-") as (base, clusters):
        a, b = clusters  # "source" and "target" to bench_clusters: here each is both
        for round_number in range(args.rounds):
            for mode in MODES if round_number % 2 == 0 else reversed(MODES):
                topic = f"aa-{mode}-{round_number}"
                for number, cluster in enumerate(clusters):
                    fill_topic(
                        cluster.bootstrap_servers,
                        topic,
                        PARTITIONS,
                        args.size,
                        args.records,
                        first=number * args.records,
                    )
                seconds = _copy(a, b, topic, mode, base / topic)
                results[mode].append(seconds)
                print(f"round {round_number + 1} {mode:5} A->B {seconds:6.1f} s", flush=True)
    _report(results, args.records, args.size)


def _env(source: LocalCluster, target: LocalCluster, topic: str, flow: str, base: Path):
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        "STATE_DIR": str(base / flow / "state"),
    }


def _copy(a: LocalCluster, b: LocalCluster, topic: str, mode: str, base: Path) -> float:
    """Seconds from the start of A->B's stages until B holds every record of A's topic; in the
    "both" mode, also prints how far B->A had come by then (a reverse flow that had not run
    would make the comparison meaningless)."""
    flows = {"ab": _env(a, b, topic, f"{topic}-ab", base)}
    if mode == "both":
        flows["ba"] = _env(b, a, topic, f"{topic}-ba", base)
    local_ends = _ends(a, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    processes = [
        RoleProcess(stage, env, base / flow) for flow, env in flows.items() for stage in STAGES
    ]
    started = time.monotonic()
    for process in processes:
        process.start()
    try:
        names = FlowNames(f"{topic}-ab")
        # Stage 1 committed past every record A's producers wrote: all in staging...
        _await_committed(a, names.replicator_group, local_ends)
        staging = [
            TopicPartition(names.staging, p)
            for p in range(partition_count(b.bootstrap_servers, names.staging))
        ]
        # ... and stage 2 committed every envelope of them: all in B.
        _await_committed(b, names.deduplicator_group, _ends(b, staging))
        seconds = time.monotonic() - started
        if mode == "both":
            reverse = FlowNames(f"{topic}-ba").replicator_group
            read = _committed_total(b, reverse, list(_ends(b, list(local_ends))))
            arrived = sum(_ends(a, list(local_ends)).values()) - sum(local_ends.values())
            print(
                f"  meanwhile B->A: stage 1 had read {read:,} records of B,"
                f" and {arrived:,} offsets (copies and transaction markers) had arrived on A",
                flush=True,
            )
        return seconds
    finally:
        for process in processes:
            process.terminate(60)


def _ends(cluster: LocalCluster, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    probe = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "bench-probe"})
    try:
        return {tp: probe.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions}
    finally:
        probe.close()


def _await_committed(cluster: LocalCluster, group: str, ends: dict[TopicPartition, int]) -> None:
    watcher = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        while True:
            try:
                committed = watcher.committed(list(ends), timeout=10)
            except KafkaException:  # the coordinator not ready yet
                committed = []
            # An empty partition has nothing to commit: no offset (-1001) is done there.
            done = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in committed}
            if committed and all(done[(tp.topic, tp.partition)] >= end for tp, end in ends.items()):
                return
            time.sleep(0.05)
    finally:
        watcher.close()


def _committed_total(cluster: LocalCluster, group: str, partitions: list[TopicPartition]) -> int:
    watcher = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        return committed_total(watcher, partitions)
    finally:
        watcher.close()


def _report(results: dict[str, list[float]], count: int, size: int) -> None:
    alone, both = min(results["alone"]), min(results["both"])
    print(f"\nA->B, {count} records of {size} B, {PARTITIONS} partitions; best of each mode")
    print(f"{'mode':28} {'seconds':>8} {'records/s':>10}")
    print(f"{'A->B alone':28} {alone:>8.1f} {count / alone:>10,.0f}")
    print(f"{'A->B while B->A runs':28} {both:>8.1f} {count / both:>10,.0f}")
    print(f"both / alone time: {both / alone:.2f}x")


if __name__ == "__main__":
    main()
