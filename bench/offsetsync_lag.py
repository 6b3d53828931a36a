"""Offset sync's lag, and the requests it sends to each cluster, with many groups committing.

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
counter moves once a second), all as differences between the window's two ends.
Timings on a 2-core machine are noisy (two brokers, the traffic, 50 groups and offset sync share
the cores): nothing here passes or fails on a number. Exit status 1 only when something broke:
offset sync exited non-zero, the traffic died, no checkpoint was seen, or a translation was wrong.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime import produce_when_room

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from prometheus_client.parser import text_string_to_metric_families

from bench.flowmeter import copy_as_stage_2
from bench.payloads import Payloads
from localkafka import LocalCluster, RoleProcess, free_port, start_all
from localkafka.scrape import sample, scrape
from offsetsync.checkpoints import Checkpoint
from runtime import kafka_error_of
from runtime.names import FlowNames
from runtime.topics import ensure_topic

ROOT = Path(__file__).resolve().parents[1]
VALUE_BYTES = 64
ENDS_EVERY_S = 0.5  # how fresh the groups' idea of each partition's end is
COPY_LAG_EVERY_S = 1.0
COMMIT_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
LAG = "exactly_offsetsync_lag_seconds"
CYCLE = "exactly_offsetsync_cycle_seconds"
REQUESTS = "exactly_offsetsync_requests_total"
CLUSTERS = ("source", "target")
GROUP_STATES = ("synced", "waiting", "active_on_target", "behind_retention")


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
        traffic = None
        stop_traffic = spawn.Event()
        traffic_results = spawn.Queue()
        try:
            start_all(clusters, tie_to_parent=True)
            source, target = (c.bootstrap_servers for c in clusters)
            for bootstrap, name in ((source, source_topic), (target, topic)):
                ensure_topic(
                    AdminClient({"bootstrap.servers": bootstrap}), NewTopic(name, args.partitions)
                )
            traffic = spawn.Process(
                target=_traffic,
                name="bench-os-traffic",
                args=(source, target, source_topic, topic, args.partitions, args.rate,
                      clusters[0].cluster_id, prefix, os.getpid(), stop_traffic,
                      traffic_results),
            )  # fmt: skip
            traffic.start()
            committer = Committer(source, target, (source_topic, topic), args.partitions,
                                  groups, args.commit_every_s, args.behind)  # fmt: skip
            committer.start()
            _say(
                f"traffic at {args.rate:,} records/s, {args.groups} groups x {args.partitions} "
                f"partitions committing about every {args.commit_every_s:g} s"
            )
            # Offset sync starts once every group has committed: librdkafka's admin client
            # crashes (SIGSEGV, librdkafka #5040) on an offset fetch answered NOT_COORDINATOR,
            # which a group whose coordinator is still loading gets (offsetsync/groups.py).
            _await_groups(committer, len(groups))
            port = free_port()
            settings = {
                "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
                "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
                "KAFKA_CLUSTERS_SOURCE_TOPIC": source_topic,
                "KAFKA_CLUSTERS_DESTINATION_TOPIC": topic,
                "OFFSETSYNC_GROUPS_INCLUDE": f"{prefix}-g.*",
                "OFFSETSYNC_INTERVAL_MS": str(args.interval_ms),
                "REPLICATION_FLOW": flow,
                "METRICS_PORT": str(port),
                # A crash (a signal in a native library) leaves its Python stacks in the log.
                "PYTHONFAULTHANDLER": "1",
            }
            sync = RoleProcess("offsetsync", settings, base, cwd=ROOT).start()
            first, last, window, seconds = _measure(
                port, args, lambda: _check_alive(sync, traffic, committer)
            )
            returncode = sync.terminate(STOP_TIMEOUT_S)
            if returncode != 0:
                broke.append(f"offsetsync exited {returncode} after SIGTERM, wanted 0")
            committer.stop()
            traffic_stats = _stop_traffic(traffic, stop_traffic, traffic_results)
            if "error" in traffic_stats:
                broke.append(f"traffic: {traffic_stats['error']}")
            checkpoints = _read_checkpoints(target, FlowNames(flow).checkpoints)
        except BaseException:
            if sync is not None and sync.log_text():
                _say(sync.log_tail())
            raise
        finally:
            if sync is not None and sync.is_running():
                sync.terminate(STOP_TIMEOUT_S)
            if committer is not None:
                committer.stop()
            if traffic is not None and traffic.is_alive():
                _stop_traffic(traffic, stop_traffic, traffic_results)
            for cluster in clusters:
                cluster.stop()
        sync_log = sync.log_text() if sync is not None else ""

    numbers = _numbers(args, window, seconds, first, last, committer, traffic_stats, checkpoints)
    broke += _broken_translations(numbers)
    numbers["broke"] = broke
    _report(numbers)
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")
    if broke:
        _say("offsetsync's log, last lines:\n" + "\n".join(sync_log.splitlines()[-40:]))
        raise SystemExit("broke: " + "; ".join(broke))


def _measure(
    port: int, args: argparse.Namespace, alive: Callable[[], None]
) -> tuple[str, str, list[float], float]:
    """After a warm-up interval: /metrics at the start and the end of the measured window,
    the window's wall-clock bounds and its length."""
    _await_ready(port, alive)
    _say(f"offsetsync ready; warm-up of one interval ({args.interval_ms / 1000:g} s)")
    _sleep(args.interval_ms / 1000, alive)
    first = scrape(port)
    window = [time.time(), 0.0]
    started = time.monotonic()
    _say(f"measuring for {args.duration:g} s")
    _sleep(args.duration, alive)
    last = scrape(port)
    window[1] = time.time()
    return first, last, window, time.monotonic() - started


def _broken_translations(numbers: dict) -> list[str]:
    """What the checkpoints show to be wrong: none written, or not the groups' own offsets."""
    broke = []
    if not numbers["checkpoints_committed_in_window"]:
        broke.append("no checkpoint of a committed offset was written in the measured window")
    if numbers["checkpoints_unmatched"]:
        broke.append(
            f"{numbers['checkpoints_unmatched']} checkpoints name a source offset no group of the "
            "bench committed"
        )
    if numbers["translations_wrong"]:
        broke.append(
            f"{numbers['translations_wrong']} checkpoints translate to an offset other than the "
            f"copy's (each copy sits at its source offset): {numbers['wrong_examples']}"
        )
    return broke


# -- traffic: a producer on the source and a copier to the destination, in a child process -------


def _traffic(
    source: str,
    target: str,
    source_topic: str,
    topic: str,
    partitions: int,
    rate: int,
    cluster_id: str,
    prefix: str,
    parent: int,
    stop,
    results,
) -> None:
    """Produce ``rate`` records/s round-robin over the partitions and copy each to the same
    partition of ``topic`` with the provenance header, in one loop until ``stop``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it, Ctrl-C or not
    stats: dict[str, object] = {"produced": 0, "copied": 0}
    try:
        producer = Producer({"bootstrap.servers": source, "linger.ms": 5})
        consumer = Consumer(
            {
                "bootstrap.servers": source,
                "group.id": f"{prefix}-copier",  # assign() only, never commits
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 50,
            }
        )
        copier = Producer({"bootstrap.servers": target, "enable.idempotence": True, "linger.ms": 5})
        consumer.assign([TopicPartition(source_topic, p, 0) for p in range(partitions)])
        payloads = Payloads(VALUE_BYTES)  # a different value for every record
        produced = copied = 0
        started = time.monotonic()
        while not stop.is_set() and os.getppid() == parent:
            due = int((time.monotonic() - started) * rate) - produced
            for _ in range(due):
                produce_when_room(
                    producer,
                    source_topic,
                    value=payloads.value(produced),
                    key=b"k%d" % produced,
                    partition=produced % partitions,
                )
                produced += 1
            producer.poll(0)
            for message in consumer.consume(1000, 0.01):
                if message.error():
                    raise KafkaException(message.error())
                copy_as_stage_2(copier, topic, message, cluster_id)
                copied += 1
            copier.poll(0)
            stats.update(
                produced=produced, copied=copied, seconds=round(time.monotonic() - started, 1)
            )
        consumer.close()
        for name, client in (("source producer", producer), ("copier", copier)):
            if client.flush(30):
                raise RuntimeError(f"{name}: records left undelivered")
    except BaseException as exc:
        stats["error"] = f"{exc!r}\n{traceback.format_exc()}"
    results.put(stats)


def _stop_traffic(process, stop, results) -> dict:
    stop.set()
    try:
        stats = results.get(timeout=60)
    except Exception:  # queue.Empty, or the child died without a word
        stats = {"error": f"no report from the traffic process (exit code {process.exitcode})"}
    process.join(30)
    if process.is_alive():
        process.terminate()
        process.join(10)
    return stats


# -- the groups: every one commits about every second, through one admin client -----------------


class Committer(threading.Thread):
    """Commits for every group, each about every ``every_s`` (jittered), an offset a random
    0..``behind`` records behind each partition's end, and notes when each was acknowledged. On
    the side, samples how far the copier is behind (the destination's ends against the
    source's)."""

    def __init__(
        self,
        source: str,
        target: str,
        topics: tuple[str, str],
        partitions: int,
        groups: list[str],
        every_s: float,
        behind: int,
    ) -> None:
        super().__init__(name="bench-os-committer", daemon=True)
        self._source_admin = AdminClient({"bootstrap.servers": source})
        self._target_admin = AdminClient({"bootstrap.servers": target})
        self._topics = topics
        self._partitions = partitions
        self._groups = groups
        self._every_s = every_s
        self._behind = behind
        self._stopping = threading.Event()
        # (group, partition, offset) -> wall ms of the first acknowledgement of that commit
        self.first_ack: dict[tuple[str, int, int], int] = {}
        self.acks: list[tuple[float, float]] = []  # (wall s acknowledged, round trip s)
        self.groups_committed: set[str] = set()  # groups with a commit acknowledged whole
        self.failures: list[tuple[float, str]] = []  # (wall s, a group commit's first error)
        self.retried: list[str] = []  # end offsets asked again
        self.copy_lag: list[tuple[float, int]] = []  # (wall s, source records not yet copied)
        self.error: str | None = None

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(COMMIT_TIMEOUT_S + 10)
        if not self.is_alive():
            # Gone before the clusters stop, or they complain of them on the way out.
            self._source_admin = self._target_admin = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = f"{exc!r}\n{traceback.format_exc()}"

    def _run(self) -> None:
        rng = random.Random()
        now = time.monotonic()
        due = {group: now + rng.uniform(0, self._every_s) for group in self._groups}
        last = {(group, p): 0 for group in self._groups for p in range(self._partitions)}
        ends, ends_at, lag_at = self._ends(self._source_admin, 0), now, now
        while not self._stopping.is_set():
            group = min(due, key=due.__getitem__)
            if self._stopping.wait(max(0.0, due[group] - time.monotonic())):
                return
            now = time.monotonic()
            if now - ends_at >= ENDS_EVERY_S:
                ends, ends_at = self._ends(self._source_admin, 0), now
                if now - lag_at >= COPY_LAG_EVERY_S:
                    copied = self._ends(self._target_admin, 1)
                    self.copy_lag.append((time.time(), sum(ends) - sum(copied)))
                    lag_at = now
            offsets = {}
            for p in range(self._partitions):
                wanted = max(0, ends[p] - rng.randint(0, self._behind))
                offsets[p] = last[(group, p)] = max(last[(group, p)], wanted)
            self._commit(group, offsets)
            due[group] = max(now, due[group] + self._every_s * rng.uniform(0.8, 1.2))

    def _ends(self, admin: AdminClient, which: int) -> list[int]:
        """Each partition's end offset; retried a while (a new topic's leaders are not known
        everywhere at once)."""
        topic = self._topics[which]
        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        while True:
            futures = admin.list_offsets(
                {TopicPartition(topic, p): OffsetSpec.latest() for p in range(self._partitions)},
                request_timeout=COMMIT_TIMEOUT_S,
            )
            try:
                found = {tp.partition: future.result().offset for tp, future in futures.items()}
                return [found[p] for p in range(self._partitions)]
            except KafkaException as exc:
                if time.monotonic() > deadline or self._stopping.is_set():
                    raise
                self.retried.append(f"end offsets of {topic}: {exc}")
                time.sleep(0.2)

    def _commit(self, group: str, offsets: dict[int, int]) -> None:
        topic = self._topics[0]
        sent = time.monotonic()
        future = self._source_admin.alter_consumer_group_offsets(
            [
                ConsumerGroupTopicPartitions(
                    group, [TopicPartition(topic, p, o) for p, o in offsets.items()]
                )
            ],
            request_timeout=COMMIT_TIMEOUT_S,
        )[group]
        try:
            result = future.result()
        except KafkaException as exc:
            self.failures.append((time.time(), f"{group}: {kafka_error_of(exc).str()}"))
            return
        acked, round_trip = time.time(), time.monotonic() - sent
        acked_ms = int(acked * 1000)
        errors = [tp for tp in result.topic_partitions if tp.error is not None]
        for tp in result.topic_partitions:
            if tp.error is None:
                self.first_ack.setdefault((group, tp.partition, offsets[tp.partition]), acked_ms)
        if errors:
            self.failures.append((acked, f"{group} [{errors[0].partition}]: {errors[0].error}"))
        else:
            self.acks.append((acked, round_trip))
            self.groups_committed.add(group)


# -- offset sync: start-up, the window, its checkpoints --------------------------------------------


def _await_groups(committer: Committer, count: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(committer.groups_committed) < count:
        if committer.error is not None:
            raise SystemExit(f"the groups' committer failed: {committer.error}")
        if time.monotonic() > deadline:
            raise SystemExit(
                f"{len(committer.groups_committed)} groups of {count} committed after "
                f"{START_TIMEOUT_S:g} s: {committer.failures[-3:]}"
            )
        time.sleep(0.2)
    time.sleep(1.0)  # and the copier has caught up with the first records


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


# -- the numbers ---------------------------------------------------------------------------------


def _staleness(
    committer: Committer,
    checkpoints: list[Checkpoint],
    start_ms: int,
    end_ms: int,
    interval_ms: int,
) -> dict:
    """Every source commit acknowledged in the window (up to two intervals before its end, so
    that each had time to be synced), to the first target commit at or past it. Unlike the lag
    of the commits offset sync saw, this counts the commits superseded before a cycle saw them:
    how long the target stays behind any one source commit."""
    synced: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for c in checkpoints:
        if c.committed:
            synced.setdefault((c.group, c.partition), []).append((c.written_ms, c.source_offset))
    for found in synced.values():
        found.sort()
    lags, never = [], 0
    for (group, partition, offset), acked in committer.first_ack.items():
        if not start_ms <= acked <= end_ms - 2 * interval_ms:
            continue
        lag = next(
            (
                written - acked
                for written, source_offset in synced.get((group, partition), [])
                if written >= acked and source_offset >= offset
            ),
            None,
        )
        if lag is None:
            never += 1
        else:
            lags.append(lag)
    return {
        "staleness_count": len(lags),
        "staleness_never_reached": never,
        "staleness_ms_p50": _percentile(lags, 0.5),
        "staleness_ms_p99": _percentile(lags, 0.99),
        "staleness_ms_max": max(lags, default=None),
    }


def _numbers(
    args,
    window: list[float],
    seconds: float,
    first: str,
    last: str,
    committer: Committer,
    traffic: dict,
    checkpoints: list[Checkpoint],
) -> dict:
    start_ms, end_ms = (int(t * 1000) for t in window)
    in_window = [c for c in checkpoints if c.committed and start_ms <= c.written_ms <= end_ms]
    lags, to_seen, to_written, unmatched, wrong = [], [], [], 0, []
    for c in in_window:
        acked = committer.first_ack.get((c.group, c.partition, c.source_offset))
        if acked is None:
            unmatched += 1
            continue
        lags.append(c.written_ms - acked)
        to_seen.append(c.seen_ms - acked)
        to_written.append(c.written_ms - c.seen_ms)
        if c.offset != c.source_offset or not c.exact:
            wrong.append(c)
    commits = [a for a in committer.acks if window[0] <= a[0] <= window[1]]
    copy_lag = [n for t, n in committer.copy_lag if window[0] <= t <= window[1]]
    requests = {
        cluster: _delta(first, last, REQUESTS, cluster=cluster) / seconds for cluster in CLUSTERS
    }
    cycles = _delta(first, last, f"{CYCLE}_count")
    return {
        "duration_seconds": round(seconds, 1),
        "interval_ms": args.interval_ms,
        "groups": args.groups,
        "partitions": args.partitions,
        "records_per_second_wanted": args.rate,
        "records_produced": traffic.get("produced"),
        "records_copied": traffic.get("copied"),
        "traffic_seconds": traffic.get("seconds"),
        "copier_behind_records_max": max(copy_lag, default=None),
        "copier_behind_records_mean": round(sum(copy_lag) / len(copy_lag)) if copy_lag else None,
        "group_commits_per_second": round(len(commits) / seconds, 1),
        "partition_offsets_committed_per_second": round(
            len(commits) * args.partitions / seconds, 1
        ),
        "group_commit_round_trip_ms_p50": _ms(_percentile([rt for _, rt in commits], 0.5)),
        "group_commit_round_trip_ms_p99": _ms(_percentile([rt for _, rt in commits], 0.99)),
        "group_commit_failures_in_window": sum(
            window[0] <= t <= window[1] for t, _ in committer.failures
        ),
        "group_commit_failures_before": sum(t < window[0] for t, _ in committer.failures),
        "group_commit_failure_examples": sorted({e for _, e in committer.failures})[:5],
        "end_offset_retries": len(committer.retried),
        "checkpoints_total": len(checkpoints),
        "checkpoints_committed_in_window": len(in_window),
        "checkpoints_not_committed_in_window": sum(
            not c.committed and start_ms <= c.written_ms <= end_ms for c in checkpoints
        ),
        "checkpoints_unmatched": unmatched,
        "translations_wrong": len(wrong),
        "wrong_examples": [
            f"{c.group} p{c.partition}: {c.source_offset} -> {c.offset} exact={c.exact}"
            for c in wrong[:5]
        ],
        "sync_lag_count": len(lags),
        "sync_lag_ms_p50": _percentile(lags, 0.5),
        "sync_lag_ms_p99": _percentile(lags, 0.99),
        "sync_lag_ms_max": max(lags, default=None),
        **_staleness(committer, checkpoints, start_ms, end_ms, args.interval_ms),
        "commit_to_seen_ms_p50": _percentile(to_seen, 0.5),
        "seen_to_written_ms_p50": _percentile(to_written, 0.5),
        "seen_to_written_ms_p99": _percentile(to_written, 0.99),
        "offsetsync_lag_seconds_p50_estimate": _histogram_quantile(first, last, LAG, 0.5),
        "offsetsync_lag_seconds_p99_estimate": _histogram_quantile(first, last, LAG, 0.99),
        "offsetsync_lag_observations": int(_delta(first, last, f"{LAG}_count")),
        "offsetsync_cycles": int(cycles),
        "offsetsync_cycle_seconds_mean": (
            round(_delta(first, last, f"{CYCLE}_sum") / cycles, 3) if cycles else None
        ),
        "offsetsync_cycle_failures": int(
            _delta(first, last, "exactly_offsetsync_cycle_failures_total")
        ),
        "offsetsync_groups_at_end": {
            state: int(sample(last, "exactly_offsetsync_groups", state=state) or 0)
            for state in GROUP_STATES
        },
        "requests_per_second_source": round(requests["source"], 1),
        "requests_per_second_target": round(requests["target"], 1),
        "load_average_at_end": round(os.getloadavg()[0], 2),
    }


def _delta(first: str, last: str, name: str, **labels: str) -> float:
    return (sample(last, name, **labels) or 0.0) - (sample(first, name, **labels) or 0.0)


def _buckets(metrics: str, name: str) -> dict[float, float]:
    return {
        float(found.labels["le"]): found.value
        for family in text_string_to_metric_families(metrics)
        for found in family.samples
        if found.name == f"{name}_bucket"
    }


def _histogram_quantile(first: str, last: str, name: str, q: float) -> float | None:
    """As Prometheus's histogram_quantile does, from the buckets' growth over the window: linear
    within the bucket the quantile falls in (the highest finite bound when it is in +Inf)."""
    before, after = _buckets(first, name), _buckets(last, name)
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank, lower, below = q * counts[-1], 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            share = (rank - below) / inside if inside else 1.0
            return round(lower + (bound - lower) * share, 3)
        lower, below = bound, count
    return None


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _report(n: dict) -> None:
    def v(value, unit: str = "") -> str:
        return "-" if value is None else f"{value:,}{unit}"

    states = ", ".join(f"{s} {c}" for s, c in n["offsetsync_groups_at_end"].items() if c)
    rows = [
        (
            "load",
            f"{n['groups']} groups x {n['partitions']} partitions, interval "
            f"{n['interval_ms']} ms, measured {n['duration_seconds']:g} s",
        ),
        (
            "traffic",
            f"{v(n['records_produced'])} produced, {v(n['records_copied'])} copied in "
            f"{v(n['traffic_seconds'])} s (wanted {n['records_per_second_wanted']:,}/s); copier "
            f"behind {v(n['copier_behind_records_mean'])} records on average, "
            f"{v(n['copier_behind_records_max'])} at most",
        ),
        (
            "group commits on the source",
            f"{n['group_commits_per_second']}/s ({n['partition_offsets_committed_per_second']} "
            f"partition offsets/s), round trip p50 {v(n['group_commit_round_trip_ms_p50'])} ms "
            f"p99 {v(n['group_commit_round_trip_ms_p99'])} ms, "
            f"{n['group_commit_failures_in_window']} failed "
            f"({n['group_commit_failures_before']} before the window)",
        ),
        (
            "checkpoints in the window",
            f"{n['checkpoints_committed_in_window']:,} committed, "
            f"{n['checkpoints_not_committed_in_window']} not; {n['checkpoints_unmatched']} "
            f"unmatched, {n['translations_wrong']} wrong",
        ),
        (
            "sync lag, commit ack -> written",
            f"p50 {v(n['sync_lag_ms_p50'])} ms  p99 {v(n['sync_lag_ms_p99'])} ms  "
            f"max {v(n['sync_lag_ms_max'])} ms  (n={n['sync_lag_count']:,})",
        ),
        (
            "  of which: ack -> seen",
            f"p50 {v(n['commit_to_seen_ms_p50'])} ms; seen -> written p50 "
            f"{v(n['seen_to_written_ms_p50'])} ms, p99 {v(n['seen_to_written_ms_p99'])} ms",
        ),
        (
            "every source commit -> target",
            f"p50 {v(n['staleness_ms_p50'])} ms  p99 {v(n['staleness_ms_p99'])} ms  "
            f"max {v(n['staleness_ms_max'])} ms  (n={n['staleness_count']:,}, "
            f"{n['staleness_never_reached']} never reached)",
        ),
        (
            "offsetsync's lag histogram",
            f"p50 ~{v(n['offsetsync_lag_seconds_p50_estimate'])} s  p99 "
            f"~{v(n['offsetsync_lag_seconds_p99_estimate'])} s (seen -> committed, "
            f"n={n['offsetsync_lag_observations']:,}, bucket estimates)",
        ),
        (
            "cycles",
            f"{n['offsetsync_cycles']}, mean {v(n['offsetsync_cycle_seconds_mean'])} s, "
            f"{n['offsetsync_cycle_failures']} failed; groups at the end: {states or '-'}",
        ),
        (
            "offsetsync requests/s",
            f"source {n['requests_per_second_source']}  target {n['requests_per_second_target']}",
        ),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print(
        "One run on a 2-core machine shared by two brokers, the traffic, the groups and offset "
        f"sync (load average {n['load_average_at_end']:.1f} at the end): the timings are noisy."
    )


if __name__ == "__main__":
    main()
