"""Where a record's latency goes, hop by hop: the pipeline at a paced rate, each record seen
in staging, on the destination once written and on the destination once committed, with stage
2's own commit timings over the same window.

    python -m bench.latency_hops [--rate 1000] [--pipeline-env N=V ...]

The load is bench/latency_outside.py's (fresh one-broker clusters, a 12-partition topic, 100 B
records paced round-robin, 20 s unmeasured then 30 s measured). Three readers in this process
take each record's arrival minus its source CreateTime:

- staging: an envelope's records, when stage 1's write of it can be read (read_uncommitted);
- written: the record on the destination once stage 2 produced it (read_uncommitted), before
  its transaction commits;
- visible: the record under read_committed, what a user's consumer sees.

Stage 2's /metrics over the window give its commits a second and where a commit's time goes
(exactly_deduplicator_transaction_call_seconds by call, the flush included). The readers cost
CPU on the same two cores (the staging reader decodes every envelope): compare the hops with
each other, not with bench/latency_outside.py's figures.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.clusters import bench_clusters
from bench.common import interrupt, percentile, say
from bench.latency_outside import (
    MEASURED_S,
    START_TIMEOUT_S,
    TOPIC,
    UNMEASURED_S,
    pipeline_settings,
)
from bench.pacing import PacedProducer, probe_until_visible
from bench.pipeline_candidates import add_pipeline_env, check_roles
from bench.replicator_throughput import PARTITIONS, create_topic
from envelope import decode_rows
from localkafka import RoleProcess, free_ports
from localkafka.scrape import sample, scrape

# How long after the window the readers may take to see its last records.
SETTLE_TIMEOUT_S = 60.0
CALLS = ("send_offsets_to_transaction", "flush", "commit_transaction")
CALL_METRIC = "exactly_deduplicator_transaction_call_seconds"
HOPS = ("staging", "written", "visible")


class HopReader(threading.Thread):
    """Every record of one hop: (source CreateTime ms, arrival ms), and the source partitions
    that showed a record produced at or after ``until_ms`` (the window is then complete)."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, hop: str, until_ms: float
    ) -> None:
        super().__init__(daemon=True)
        self.hop = hop
        self.seen: list[tuple[float, float]] = []
        self.past: set[int] = set()
        self._until_ms = until_ms
        self._stopping = threading.Event()
        self.failure: BaseException | None = None  # what ended the thread early, for _settle
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-hops-{hop}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if hop == "visible" else "read_uncommitted",
                "fetch.wait.max.ms": 10,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                messages = self._consumer.consume(2000, 0.05)
                # Once per batch, before decoding any of it: the decoding is this bench's cost,
                # not the pipeline's.
                arrived_ms = time.time() * 1000
                for message in messages:
                    if message.error() is None:
                        self._note(message, arrived_ms)
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self._consumer.close()

    def _note(self, message: Message, arrived_ms: float) -> None:
        if self.hop == "staging":
            envelope = decode_rows(message.value())
            records = [(envelope.partition, row[1], row[3]) for row in envelope.rows]
        else:
            records = [(message.partition(), message.timestamp()[1], message.key())]
        for partition, created_ms, key in records:
            if key == b"probe":
                continue
            self.seen.append((created_ms, arrived_ms))
            if created_ms >= self._until_ms:
                self.past.add(partition)

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)


@contextmanager
def _pipeline(
    base: Path, source: str, target: str, env: dict[str, str]
) -> Iterator[tuple[int, Callable[[], None]]]:
    """Both stages (at their defaults unless --pipeline-env says otherwise): the deduplicator's
    metrics port, and a check that both still run."""
    port = free_ports(1)[0]
    settings = pipeline_settings(base, source, target, env)
    roles = base / "roles"
    with (
        RoleProcess("replicator", settings, roles) as stage1,
        RoleProcess("deduplicator", {**settings, "METRICS_PORT": str(port)}, roles) as stage2,
    ):
        yield port, lambda: check_roles(stage1, stage2)


def measure(rate: float, env: dict[str, str]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each hop's latencies (ms) of the window's records, and stage 2's figures over it."""
    with bench_clusters("bench-hops-") as (base, clusters):
        source, target = (c.bootstrap_servers for c in clusters)
        create_topic(source, TOPIC)
        with _pipeline(base, source, target, env) as (port, alive):
            destination = f"copy.{TOPIC}"
            probe_until_visible(source, target, TOPIC, destination, PARTITIONS, START_TIMEOUT_S)
            staging = _staging_topic(target)
            begin = time.time() + UNMEASURED_S
            window_ms = (begin * 1000, (begin + MEASURED_S) * 1000)
            readers = [
                HopReader(target, staging[0], staging[1], "staging", window_ms[1]),
                HopReader(target, destination, PARTITIONS, "written", window_ms[1]),
                HopReader(target, destination, PARTITIONS, "visible", window_ms[1]),
            ]
            for reader in readers:
                reader.start()
            try:
                with PacedProducer(source, TOPIC, PARTITIONS, rate, 100) as producer:
                    time.sleep(max(0.0, begin - time.time()))
                    first = scrape(port)
                    time.sleep(MEASURED_S)
                    last = scrape(port)

                    def running() -> None:
                        alive()
                        producer.check_alive()

                    _settle(readers, running)
            finally:
                for reader in readers:
                    reader.stop()
    hops = {
        r.hop: [arrived - created for created, arrived in r.seen if _within(created, window_ms)]
        for r in readers
    }
    return hops, _stage2(first, last)


def _staging_topic(target: str) -> tuple[str, int]:
    admin = AdminClient({"bootstrap.servers": target})
    topics = admin.list_topics(timeout=10).topics
    name = next(t for t in topics if t.startswith("__exactly.") and t.endswith(".staging"))
    return name, len(topics[name].partitions)


def _settle(readers: list[HopReader], alive: Callable[[], None]) -> None:
    """Until every reader saw a record past the window in every source partition: partitions
    are ordered, so it has seen the whole window."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while any(len(r.past) < PARTITIONS for r in readers):
        alive()
        for reader in readers:
            if reader.failure is not None:
                raise RuntimeError(f"the {reader.hop} reader failed") from reader.failure
        if time.monotonic() > deadline:
            short = [r.hop for r in readers if len(r.past) < PARTITIONS]
            raise TimeoutError(f"records of the window still missing from {short}")
        time.sleep(0.2)


def _within(created_ms: float, window_ms: tuple[float, float]) -> bool:
    return window_ms[0] <= created_ms < window_ms[1]


def _stage2(first: str, last: str) -> dict[str, float]:
    """Commits a second over the window, and the mean ms of a commit and of each call in it
    (each over its own count: a transaction that aborted after its flush counts a flush)."""

    def grown(name: str, **labels: str) -> float:
        return (sample(last, name, **labels) or 0.0) - (sample(first, name, **labels) or 0.0)

    commits = grown("exactly_deduplicator_commit_seconds_count")
    figures = {"commits/s": commits / MEASURED_S}
    if commits:
        figures["commit ms"] = grown("exactly_deduplicator_commit_seconds_sum") * 1000 / commits
        for call in CALLS:
            if calls := grown(f"{CALL_METRIC}_count", call=call):
                figures[f"{call} ms"] = grown(f"{CALL_METRIC}_sum", call=call) * 1000 / calls
    return figures


def report(rate: float, hops: dict[str, list[float]], stage2: dict[str, float]) -> None:
    print(f"\nlatency by hop at {rate:,.0f} records/s, 100 B, ms from the source CreateTime")
    print(f"{'hop':<8} {'records':>8} {'p50':>6} {'p99':>6} {'max':>6}")
    for hop in HOPS:
        values = hops[hop]
        if not values:
            print(f"{hop:<8} {0:>8} (none seen)")
            continue
        p50, p99 = percentile(values, 50), percentile(values, 99)
        print(f"{hop:<8} {len(values):>8} {p50:>6.0f} {p99:>6.0f} {max(values):>6.0f}")
    print("stage 2 over the window: " + ", ".join(f"{k} {v:.1f}" for k, v in stage2.items()))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="records/s")
    add_pipeline_env(parser)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    signal.signal(signal.SIGTERM, interrupt)  # the clusters and roles stopped as on Ctrl-C
    env = dict(item.split("=", 1) for item in args.pipeline_env)
    say(f"== the pipeline at {args.rate:,.0f} records/s, hop by hop")
    hops, stage2 = measure(args.rate, env)
    report(args.rate, hops, stage2)


if __name__ == "__main__":
    main()
