"""The load bench/offsetsync_lag.py puts on the clusters: traffic (a producer on the source and a
copier to the destination, in a child process) and the groups (every one committing about every
second on the source, through one admin client, each acknowledgement noted)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import traceback

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from bench.common import copy_as_stage_2
from bench.payloads import Payloads
from runtime import kafka_error_of, produce_when_room

VALUE_BYTES = 64
ENDS_EVERY_S = 0.5  # how fresh the groups' idea of each partition's end is
COPY_LAG_EVERY_S = 1.0
COMMIT_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0


def run_traffic(
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
        producer, consumer, copier = _traffic_clients(source, target, prefix)
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


def _traffic_clients(source: str, target: str, prefix: str) -> tuple[Producer, Consumer, Producer]:
    """The source's producer, the copier's reader of the source and its producer to the target."""
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
    return producer, consumer, copier


def stop_traffic(process, stop, results) -> dict:
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


def await_groups(committer: Committer, count: int) -> None:
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
