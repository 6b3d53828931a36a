"""Offset sync's lag, its requests to each cluster and its CPU, with many groups committing.

    python -m bench.offsetsync_lag [--duration S] [--interval-ms MS] [--groups G]
                                   [--partitions P] [--rate R] [--json PATH]

Issue 7's measure: sync lag p50/p99 with 50 groups x 12 partitions committing continuously, and
the requests per second offset sync sends to each cluster at that load. Starts two local Kafka
clusters (localkafka), a --partitions source topic and its destination topic, then:
  traffic:  a child process produces --rate records/s (64 B values, current timestamps) to the
            source, and copies each one, read_committed, to the same partition of the
            destination with the provenance header, as a live stage 2 would (idempotent, not
            transactional: every copy sits at its source record's offset, which checks each
            translation for free);
  groups:   --groups consumer groups (bench-os-<run>-g00...) commit, each about every second
            (jittered), for every partition an offset a random 0..--behind (200) records behind
            the end (never below the group's last one: offset sync never moves a target group
            back), through one AdminClient; the bench notes when each commit was acknowledged;
  offsetsync: `python -m offsetsync` for this topic and these groups, every --interval-ms,
            started once every group has committed on the source; after a warm-up of one
            interval, --duration seconds are measured, then it is stopped with SIGTERM.
Sync lag, measured from outside: each checkpoint record written in the window for an offset
committed on the target, from the source commit's acknowledgement to the checkpoint's
written_ms (taken after the target commit). It includes the wait for the next cycle, so with
commits every second it is at most about one second plus a cycle: a group committing less often
waits up to one interval. Its two parts are shown: to the cycle that first saw the offset
(seen_ms), then to the target commit. Offset sync's own lag histogram (seen to committed) and
cycle times come from its /metrics, as do its requests per cluster (librdkafka statistics, the
counter moves once a second), all as differences between the window's two ends. Its CPU, with
its offset fetch processes (the role's process group), is read from /proc at the same two ends
(issue 34's groups axis: `make bench-groups`).
Timings on a 2-core machine are noisy (two brokers, the traffic, 50 groups and offset sync share
the cores): nothing here passes or fails on a number. Exit status 1 only when something broke:
offset sync exited non-zero, the traffic died, no checkpoint was seen, or a translation was wrong.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import process_group_cpu_seconds, record_as_stage_1, say
from bench.offsetsync_load import (
    START_TIMEOUT_S,
    Committer,
    await_groups,
    run_traffic,
    stop_traffic,
)
from bench.offsetsync_numbers import CLUSTERS, broken_translations, numbers, report
from localkafka import LocalCluster, RoleProcess, free_port, start_all
from localkafka.scrape import scrape
from offsetsync.checkpoints import Checkpoint
from runtime.names import FlowNames
from runtime.topics import ensure_topic

ROOT = Path(__file__).resolve().parents[1]
STOP_TIMEOUT_S = 60.0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="Measured seconds.")
    parser.add_argument("--interval-ms", type=int, default=5000, help="OFFSETSYNC_INTERVAL_MS.")
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=2000, help="Source records per second.")
    parser.add_argument("--commit-every-s", type=float, default=1.0, help="Per group, jittered.")
    parser.add_argument("--behind", type=int, default=200, help="Commits lag the end by 0..this.")
    parser.add_argument("--json", type=Path, help="Also write the numbers here.")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    run = uuid.uuid4().hex[:6]
    prefix = f"bench-os-{run}"
    groups = [f"{prefix}-g{i:02d}" for i in range(args.groups)]
    source_topic, topic = "bench-os-source", "bench-os-copy"
    flow = prefix
    broke: list[str] = []
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-os-") as tmp:
        base = Path(tmp)
        clusters = [LocalCluster.create(base / name, name) for name in CLUSTERS]
        sync: RoleProcess | None = None
        committer: Committer | None = None
        traffic: SpawnProcess | None = None
        traffic_stop = spawn.Event()
        traffic_results = spawn.Queue()
        try:
            start_all(clusters, tie_to_parent=True)
            source, target = (c.bootstrap_servers for c in clusters)
            traffic = _start_traffic(
                spawn, args, clusters, (source_topic, topic), prefix, traffic_stop, traffic_results
            )
            committer = Committer(source, target, (source_topic, topic), args.partitions,
                                  groups, args.commit_every_s, args.behind)  # fmt: skip
            committer.start()
            say(
                f"traffic at {args.rate:,} records/s, {args.groups} groups x {args.partitions} "
                f"partitions committing about every {args.commit_every_s:g} s"
            )
            # Offset sync starts once every group has committed: librdkafka's admin client
            # crashes (SIGSEGV, librdkafka #5040) on an offset fetch answered NOT_COORDINATOR,
            # which a group whose coordinator is still loading gets (offsetsync/groups.py).
            await_groups(committer, len(groups))
            port = free_port()
            settings = _settings(source, target, source_topic, topic, prefix, args, port)
            record_as_stage_1(source, target, settings, [source_topic])
            sync = RoleProcess("offsetsync", settings, base, cwd=ROOT).start()
            # Offset sync and its offset fetch processes: the role runs in a session of its own.
            pgid = sync.pid
            assert pgid is not None
            first, last, window, seconds, cpu_s = _measure(
                port,
                args,
                lambda: _check_alive(sync, traffic, committer),
                lambda: process_group_cpu_seconds(pgid),
            )
            returncode = sync.terminate(STOP_TIMEOUT_S)
            if returncode != 0:
                broke.append(f"offsetsync exited {returncode} after SIGTERM, wanted 0")
            committer.stop()
            traffic_stats = stop_traffic(traffic, traffic_stop, traffic_results)
            if "error" in traffic_stats:
                broke.append(f"traffic: {traffic_stats['error']}")
            checkpoints = _read_checkpoints(target, FlowNames(flow).checkpoints)
        except BaseException:
            if sync is not None and sync.log_text():
                say(sync.log_tail())
            raise
        finally:
            _stop_all(sync, committer, traffic, traffic_stop, traffic_results, clusters)
        sync_log = sync.log_text() if sync is not None else ""

    found = numbers(
        args, window, seconds, first, last, committer, traffic_stats, checkpoints, cpu_s
    )
    _finish(args, found, broke, sync_log)


def _start_traffic(
    spawn: SpawnContext,
    args: argparse.Namespace,
    clusters: list[LocalCluster],
    topics: tuple[str, str],
    prefix: str,
    stop: Any,
    results: Any,
) -> SpawnProcess:
    """Both topics made, then the traffic's child process started."""
    source, target = (c.bootstrap_servers for c in clusters)
    source_topic, topic = topics
    for bootstrap, name in ((source, source_topic), (target, topic)):
        ensure_topic(AdminClient({"bootstrap.servers": bootstrap}), NewTopic(name, args.partitions))
    traffic = spawn.Process(
        target=run_traffic,
        name="bench-os-traffic",
        args=(source, target, source_topic, topic, args.partitions, args.rate,
              clusters[0].cluster_id, prefix, os.getpid(), stop, results),
    )  # fmt: skip
    traffic.start()
    return traffic


def _stop_all(
    sync: RoleProcess | None,
    committer: Committer | None,
    traffic: SpawnProcess | None,
    stop: Any,
    results: Any,
    clusters: list[LocalCluster],
) -> None:
    """Whatever of the run is still up, stopped: offset sync, the groups, the traffic, the
    clusters."""
    if sync is not None and sync.is_running():
        sync.terminate(STOP_TIMEOUT_S)
    if committer is not None:
        committer.stop()
    if traffic is not None and traffic.is_alive():
        stop_traffic(traffic, stop, results)
    for cluster in clusters:
        cluster.stop()


def _settings(
    source: str,
    target: str,
    source_topic: str,
    topic: str,
    prefix: str,
    args: argparse.Namespace,
    port: int,
) -> dict[str, str]:
    """Offset sync's settings: this topic, the bench's groups, the flow named after the run."""
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
        "KAFKA_CLUSTERS_SOURCE_TOPIC": source_topic,
        "KAFKA_CLUSTERS_DESTINATION_TOPIC": topic,
        "OFFSETSYNC_GROUPS_INCLUDE": f"{prefix}-g.*",
        "OFFSETSYNC_INTERVAL_MS": str(args.interval_ms),
        "REPLICATION_FLOW": prefix,  # the flow is the run's prefix
        "METRICS_PORT": str(port),
        # A crash (a signal in a native library) leaves its Python stacks in the log.
        "PYTHONFAULTHANDLER": "1",
    }


def _finish(args: argparse.Namespace, found: dict, broke: list[str], sync_log: str) -> None:
    """Report, write --json, and exit 1 naming what broke, with offset sync's last log lines."""
    broke += broken_translations(found)
    found["broke"] = broke
    report(found)
    # Why a cycle failed is in offset sync's own log only: its warnings, each kind once.
    warnings: dict[str, str] = {}
    for line in sync_log.splitlines():
        if "level=warning" in line:
            warnings.setdefault(line.partition(" msg=")[2][:80], line)
    for line in list(warnings.values())[:8]:
        say("offsetsync warned: " + line.partition(" msg=")[2][:400])
    if args.json is not None:
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    if broke:
        say("offsetsync's log, last lines:\n" + "\n".join(sync_log.splitlines()[-40:]))
        raise SystemExit("broke: " + "; ".join(broke))


def _measure(
    port: int, args: argparse.Namespace, alive: Callable[[], None], cpu: Callable[[], float]
) -> tuple[str, str, list[float], float, float]:
    """After a warm-up interval: /metrics at the start and the end of the measured window,
    the window's wall-clock bounds, its length and offset sync's CPU seconds in it."""
    _await_ready(port, alive)
    say(f"offsetsync ready; warm-up of one interval ({args.interval_ms / 1000:g} s)")
    _sleep(args.interval_ms / 1000, alive)
    first = scrape(port)
    cpu_before = cpu()
    window = [time.time(), 0.0]
    started = time.monotonic()
    say(f"measuring for {args.duration:g} s")
    _sleep(args.duration, alive)
    last = scrape(port)
    cpu_s = cpu() - cpu_before
    window[1] = time.time()
    return first, last, window, time.monotonic() - started, cpu_s


# -- offset sync: start-up, the window, its checkpoints --------------------------------------------


def _await_ready(port: int, alive: Callable[[], None]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        alive()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"offsetsync not ready after {START_TIMEOUT_S:g} s")


def _sleep(seconds: float, alive: Callable[[], None]) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        alive()
        time.sleep(min(0.5, left))


def _check_alive(sync, traffic, committer) -> None:
    if sync is not None and not sync.is_running():
        raise SystemExit(f"offsetsync exited {sync.returncode} on its own")
    if traffic is not None and not traffic.is_alive():
        raise SystemExit(f"the traffic process died (exit code {traffic.exitcode})")
    if committer is not None and committer.error is not None:
        raise SystemExit(f"the groups' committer failed: {committer.error}")


def _read_checkpoints(bootstrap: str, topic: str) -> list[Checkpoint]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-os-checkpoint-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return []
        checkpoints = []
        for partition in metadata.partitions:
            tp = TopicPartition(topic, partition)
            _low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            if high == 0:
                continue
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            deadline = time.monotonic() + 60
            position = 0
            while position < high:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic} [{partition}]: not read to {high}")
                for message in consumer.consume(1000, 0.5):
                    if message.error():
                        raise KafkaException(message.error())
                    checkpoints.append(Checkpoint.from_value(message.value()))
                    position = message.offset() + 1
        return checkpoints
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
