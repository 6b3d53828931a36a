"""What security costs each role: the same flow through PLAINTEXT and through the secured
listeners (source SASL_SSL with SCRAM-SHA-512, target mutual TLS, each role its own principal
with only its ACLs), side by side in one invocation.

    python -m bench.tls_cost [--records N] [--size BYTES] [--rounds R]

Two secured local clusters (localkafka, secure=True: every listener on the same brokers, so
only the client side of the connection differs). The source topic (12 partitions, a different
value for every record) is copied by each mode in turn, stage by stage:
  stage 1: `python -m replicator` until its committed source offsets reach the end;
  stage 2: `python -m deduplicator` until the destination holds every record;
  audit:   `exactly validate --require-complete` on the result (start-up included).
Reports seconds and records/s per role and mode, and secured / plaintext time. The modes
alternate within each round, so drift on a noisy 2-core machine touches both.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition

from bench.common import COPY_TIMEOUT_S, await_committed
from bench.topics import fill_topic, partition_count
from exactly.acls import ROLES, apply_flow_grants, flow_grants
from exactly.localenv import secured_pair_environment
from localkafka import LocalCluster, RoleProcess, start_all
from runtime import load_settings
from runtime.names import FlowNames

PARTITIONS = 12
MODES = ("plaintext", "secured")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        base = Path(tmp)
        clusters = [
            LocalCluster.create(base / name, name, secure=True) for name in ("source", "target")
        ]
        start_all(clusters, tie_to_parent=True)
        try:
            source, target = clusters
            topic = "bench-tls"
            fill_topic(source.bootstrap_servers, topic, PARTITIONS, args.size, args.records)
            results: dict[tuple[str, str], list[float]] = {}
            for round_number in range(args.rounds):
                for mode in MODES if round_number % 2 == 0 else reversed(MODES):
                    timings = _copy(source, target, topic, args.records, mode, base, round_number)
                    for role, seconds in timings.items():
                        results.setdefault((role, mode), []).append(seconds)
                        print(f"round {round_number + 1} {mode:9} {role:12} {seconds:7.1f} s")
        finally:
            for cluster in clusters:
                cluster.stop()
    _report(results, args.records, args.size)


def _copy(
    source: LocalCluster,
    target: LocalCluster,
    topic: str,
    count: int,
    mode: str,
    base: Path,
    round_number: int,
) -> dict[str, float]:
    flow = f"tls-{mode}-{round_number}"
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
        "REPLICATION_DESTINATION_TOPIC": f"{{topic}}.{flow}",
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        "STATE_DIR": str(base / flow / "state"),
    }
    envs = dict.fromkeys(ROLES, env)
    if mode == "secured":
        grants = flow_grants(load_settings(env), [topic])
        apply_flow_grants(source.bootstrap_servers, target.bootstrap_servers, grants)
        envs = {role: {**env, **secured_pair_environment(source, target, role)} for role in ROLES}
    names = FlowNames(flow)
    logs = base / flow
    timings = {}
    # Stage 1 alone: until every source offset is committed (all acknowledged in staging).
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    timings["replicator"] = _run_until_committed(
        "replicator", envs, logs, source, names.replicator_group, partitions, count
    )
    # Stage 2 alone: until its committed staging offsets reach staging's end (they commit in
    # the same transactions as the records they wrote).
    staging = [
        TopicPartition(names.staging, p)
        for p in range(partition_count(target.bootstrap_servers, names.staging))
    ]
    probe = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": "bench-probe"})
    ends = sum(probe.get_watermark_offsets(tp, timeout=10)[1] for tp in staging)
    probe.close()
    timings["deduplicator"] = _run_until_committed(
        "deduplicator", envs, logs, target, names.deduplicator_group, staging, ends
    )
    # The audit, as a user runs it.
    started = time.monotonic()
    audit = subprocess.run(
        [
            *(sys.executable, "-m", "exactly", "validate", "--require-complete"),
            *("--report", str(logs / "audit.json"), "--chart", str(logs / "audit.html")),
        ],
        env={**os.environ, **envs["validator"]},
        capture_output=True,
        text=True,
        check=False,
    )
    timings["validate"] = time.monotonic() - started
    if audit.returncode != 0:
        raise RuntimeError(f"{mode}: exactly validate exited {audit.returncode}\n{audit.stderr}")
    return timings


def _run_until_committed(
    role: str,
    envs: dict[str, dict[str, str]],
    logs: Path,
    cluster: LocalCluster,
    group: str,
    partitions: list[TopicPartition],
    end: int,
) -> float:
    """Seconds from the role's start until ``group`` has committed ``end`` offsets in all."""
    watcher = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    with RoleProcess(role, envs[role], logs) as process:
        started = time.monotonic()
        await_committed(watcher, partitions, end, process, COPY_TIMEOUT_S)
        seconds = time.monotonic() - started
        process.terminate(60)
    watcher.close()
    return seconds


def _report(results: dict[tuple[str, str], list[float]], count: int, size: int) -> None:
    print(f"\n{count} records of {size} B, {PARTITIONS} partitions; best of each mode")
    header = ("role", "plaintext s", "secured s", "rec/s plain", "rec/s sec", "secured/plain")
    print("{:12} {:>12} {:>10} {:>12} {:>10} {:>14}".format(*header))
    for role in ("replicator", "deduplicator", "validate"):
        plain, secured = min(results[(role, "plaintext")]), min(results[(role, "secured")])
        print(
            f"{role:12} {plain:>12.1f} {secured:>10.1f} {count / plain:>12,.0f} "
            f"{count / secured:>10,.0f} {secured / plain:>13.2f}x"
        )


if __name__ == "__main__":
    main()
