"""What splitting stage 2's one transaction into one per staging partition would cost and buy,
measured before anything is built (docs/replicated-clusters.md, "What a node's death costs any
writer").

    python -m bench.transaction_split [--rate R] [--faults kill:leader,kill:coordinator]

One local target cluster of three replicating nodes (replication factor 3, min.insync.replicas
2). Three writers, each in a process of its own, write the same paced traffic (--rate records/s
of 100 B values over a 12-partition destination topic; the transactional ones add one changelog
record per touched partition to every transaction and commit every 100 ms, as stage 2 does by
default):

- ``one transaction`` is today's stage 2: one transactional producer writes every partition,
  and each commit carries the staging offsets to the group coordinator
  (``send_offsets_to_transaction``);
- ``per partition`` is the proposal: twelve transactional producers, one per partition, each in
  a thread of its own, each commit carrying its staging offset in its changelog record, with no
  group in the commit path;
- ``no transactions`` is the floor: one idempotent producer (acks=all), nothing committed.

Each writer runs 20 s, then one node is stopped (``kill``: SIGKILL; ``stop``: SIGTERM, a
controlled shutdown): the leader of destination partition 0, the transaction coordinator of the
writer's first transactional id, or the group coordinator of the one-transaction writer's group;
it is started again 20 s later. With ``--faults roll`` every node is instead stopped with
SIGTERM and started in turn, the next once every replica is in sync, and the whole
destination's longest stall per node is reported. A read_committed reader of the destination
(no group) notes when each partition's records become visible. For each writer: CPU per record
of the writer and of the three nodes before the fault, its commits' p50/p99, and after the fault
the longest stretch in which no partition advanced (the whole destination stood still), the
longest stall of a partition the stopped node did not lead, and of one it led. A noisy 2-core
machine carrying three JVMs: compare the rows of one run, never the numbers alone.
"""

from __future__ import annotations

import argparse
import itertools
import signal
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bench.clusters import bench_clusters
from bench.common import ChildRun, interrupt, percentile, process_cpu_seconds, say
from bench.payloads import Payloads
from bench.replicator_throughput import create_topics
from localkafka import LocalCluster
from localkafka.broker_config import SESSION_TIMEOUT_MS
from localkafka.readiness import QUIET_CLIENT_LOG
from localkafka.replicas import group_coordinator, leader_of, transaction_coordinator
from runtime import call_retrying

PARTITIONS = 12
SIZE = 100
COMMIT_EVERY_S = 0.1
WARM_S = 20.0  # before the kill; CPU is counted over its last CPU_S
CPU_S = 10.0
DOWN_S = 20.0
AFTER_S = 45.0  # observed after the kill
WRITERS = ("one transaction", "per partition", "no transactions")
# Only when asked for (--writers): one transaction whose group consumer is a member of its group
# (subscribed to the staging topic and polled, as stage 2's is), so that its commits carry a
# member's generation and the group rebalances when its coordinator moves.
MEMBER = "one transaction as member"


@dataclass
class WriterStats:
    commits: list[float] = field(default_factory=list)
    aborted: int = 0
    new_producers: int = 0


def _producer(bootstrap: str, transactional_id: str | None) -> Producer:
    """Transactional, its first transaction begun; or only idempotent (no id)."""
    identity = {"transactional.id": transactional_id} if transactional_id else {}
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            **identity,
            "linger.ms": 5,
            # stage 2's own (deduplicator/clients.py): CONCURRENT_TRANSACTIONS retried soon.
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
            "logger": QUIET_CLIENT_LOG,
        }
    )
    if transactional_id:
        producer.init_transactions(60)
        producer.begin_transaction()
    return producer


def _commit(
    producer: Producer,
    bootstrap: str,
    transactional_id: str,
    group: Consumer | None,
    offsets: list[TopicPartition],
    stats: WriterStats,
) -> Producer:
    """Commit the open transaction (its staging offsets to ``group``, when there is one) and
    begin the next; the producer to go on with. An abortable error aborts (its records are
    lost to this bench, which measures flow, not content); a fatal one makes a new producer."""
    started = time.monotonic()
    while True:
        try:
            if group is not None:
                producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            break
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.txn_requires_abort():
                stats.aborted += 1
                try:
                    producer.abort_transaction(30)
                    break
                except KafkaException:
                    pass
            elif error.retriable():
                continue
            stats.new_producers += 1
            producer = _producer(bootstrap, transactional_id)
            stats.commits.append(time.monotonic() - started)
            return producer
    stats.commits.append(time.monotonic() - started)
    producer.begin_transaction()
    return producer


def _write(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    transactional_id: str | None,
    group_id: str | None,
    member: bool,
    rate: float,
    until: float,
    stats: WriterStats,
    payloads: Payloads,
    first: int,
) -> None:
    producer = _producer(bootstrap, transactional_id)
    group = None
    if group_id is not None:
        group = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group_id, "logger": QUIET_CLIENT_LOG}
        )
        if member:
            group.subscribe([f"{topic}.staging"])
            joined_by = time.monotonic() + 60
            while not group.assignment() and time.monotonic() < joined_by:
                group.poll(0.1)
    interval = 1.0 / rate
    next_send = last_commit = time.monotonic()
    touched: dict[int, int] = {}
    i = first
    while (now := time.monotonic()) < until:
        while next_send <= now:
            partition = partitions[i % len(partitions)]
            while True:
                try:
                    producer.produce(topic, payloads.value(i), partition=partition)
                    break
                except BufferError:
                    producer.poll(0.01)
            touched[partition] = i
            i += 1
            next_send += interval
        producer.poll(0)
        if member and group is not None:
            group.poll(0)  # its membership kept: staging itself stays empty
        if transactional_id and now - last_commit >= COMMIT_EVERY_S and touched:
            for partition, position in touched.items():
                # Its state and, with no group, its staging offset: as a changelog record would.
                producer.produce(f"{topic}.changelog", b"%d" % position, partition=partition)
            offsets = [TopicPartition(f"{topic}.staging", p, o + 1) for p, o in touched.items()]
            producer = _commit(producer, bootstrap, transactional_id, group, offsets, stats)
            touched.clear()
            last_commit = time.monotonic()
        else:
            # Ticks of 10 ms for both writers: twelve threads waking more often would cost
            # the split CPU that a stage 2 driven by its consumer would not spend.
            time.sleep(0.01)


def run_writer(bootstrap: str, topic: str, writer: str, rate: float, seconds: float) -> dict:
    """One writer's whole run, in its own process; its stats summed over its threads."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    until = time.monotonic() + seconds
    work: list[tuple[list[int], str | None, str | None, bool, float]]
    every = list(range(PARTITIONS))
    if writer == "no transactions":
        work = [(every, None, None, False, rate)]
    elif writer in ("one transaction", MEMBER):
        work = [(every, f"{topic}-tx", f"{topic}-group", writer == MEMBER, rate)]
    else:
        work = [([p], f"{topic}-tx-{p}", None, False, rate / PARTITIONS) for p in every]
    stats = [WriterStats() for _ in work]
    payloads = Payloads(SIZE)  # one pool: each thread's values start apart
    threads = [
        threading.Thread(
            target=_write,
            args=(bootstrap, topic, *w, until, s, payloads, n * 100_000_000),
            daemon=True,
        )
        for n, (w, s) in enumerate(zip(work, stats, strict=True))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "commits": [c for s in stats for c in s.commits],
        "aborted": sum(s.aborted for s in stats),
        "new_producers": sum(s.new_producers for s in stats),
    }


class Arrivals:
    """When records of each destination partition became visible under read_committed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.times: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
                "logger": QUIET_CLIENT_LOG,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        # Asking its group's offsets makes __consumer_offsets exist, whose leaders say where a
        # group's coordinator is (the "group" victim) whichever writer runs first.
        # NOT_COORDINATOR while a new cluster makes and loads it.
        call_retrying(
            lambda: self._consumer.committed([TopicPartition(topic, 0)], timeout=10),
            deadline_s=60,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            messages = self._consumer.consume(10_000, 0.05)
            now = time.monotonic()
            seen = {m.partition() for m in messages if m.error() is None}
            for partition in seen:
                self.times[partition].append(now)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def _longest_gap(times: Sequence[float], since: float, until: float) -> float:
    """The longest stretch within [since, until] with no arrival in ``times``."""
    inside = [since, *(t for t in times if since < t < until), until]
    return max(b - a for a, b in itertools.pairwise(inside))


def _topics_watched(bootstrap: str, topic: str) -> Arrivals:
    """A writer's destination, changelog and staging topics made, the destination watched."""
    create_topics(
        bootstrap,
        {topic: PARTITIONS, f"{topic}.changelog": PARTITIONS, f"{topic}.staging": PARTITIONS},
    )
    return Arrivals(bootstrap, topic)


ROLL_S = 240.0  # a writer's run through a roll of all three nodes, after WARM_S


def one_roll(cluster: LocalCluster, writer: str, rate: float, round_: int) -> dict[str, object]:
    """A rolling restart under one writer: each node in turn stopped with SIGTERM and started
    again, the next once every replica is in sync (as an upgrade does); the whole destination's
    longest stall per node, from its stop to 5 s after it serves again."""
    bootstrap = cluster.bootstrap_servers
    topic = f"split-{round_}-roll-{writer.replace(' ', '-')}"
    arrivals = _topics_watched(bootstrap, topic)
    seconds = WARM_S + ROLL_S
    child = ChildRun(run_writer, bootstrap, topic, writer, rate, seconds)
    started = time.monotonic()
    windows: list[tuple[int, float, float]] = []
    try:
        time.sleep(WARM_S)
        for node in sorted(cluster.nodes):
            child.check_alive()
            stopped_at = time.monotonic()
            cluster.stop_node(node)
            cluster.start_node(node, tie_to_parent=True)
            time.sleep(5.0)
            windows.append((node, stopped_at, time.monotonic()))
        if time.monotonic() > started + seconds:
            raise RuntimeError(f"the roll outlasted the writer's {seconds:.0f} s")
        result = child.result(started + seconds - time.monotonic() + 120)
    finally:
        child.kill()
        arrivals.close()
    assert isinstance(result, dict)
    everything = sorted(t for times in arrivals.times.values() for t in times)
    return {
        "writer": writer,
        "victim": "every node (roll, SIGTERM)",
        "whole stall per node s": ", ".join(
            f"{_longest_gap(everything, since, until):.1f}" for _, since, until in windows
        ),
        "aborted": result["aborted"],
        "new producers": result["new_producers"],
    }


def one_run(
    cluster: LocalCluster, writer: str, fault: str, rate: float, round_: int
) -> dict[str, object]:
    bootstrap = cluster.bootstrap_servers
    topic = f"split-{round_}-{fault.replace(':', '-')}-{writer.replace(' ', '-')}"
    arrivals = _topics_watched(bootstrap, topic)
    nodes = sorted(cluster.nodes)
    seconds = WARM_S + AFTER_S
    child = ChildRun(run_writer, bootstrap, topic, writer, rate, seconds)
    started = time.monotonic()
    try:
        time.sleep(WARM_S - CPU_S)
        cpu_before = [process_cpu_seconds(child.pid)]
        cpu_before += [process_cpu_seconds(cluster.nodes[n].pid) for n in nodes]
        time.sleep(CPU_S)
        cpu_after = [process_cpu_seconds(child.pid)]
        cpu_after += [process_cpu_seconds(cluster.nodes[n].pid) for n in nodes]
        first_id = f"{topic}-tx-0" if writer == "per partition" else f"{topic}-tx"
        coordinator = transaction_coordinator(bootstrap, first_id)
        leaders = {p: leader_of(bootstrap, topic, p) for p in range(PARTITIONS)}
        how, whom = fault.split(":")
        if whom == "leader":
            victim = leaders[0]
        elif whom == "group":
            victim = group_coordinator(bootstrap, f"{topic}-group")
        else:
            victim = coordinator
        child.check_alive()
        killed_at = time.monotonic()
        if how == "kill":
            cluster.kill_node(victim)
        else:
            cluster.stop_node(victim)  # a controlled shutdown: leadership handed over first
        say(f"   {writer}: node {victim} {how} (transaction coordinator {coordinator})")
        time.sleep(DOWN_S)
        cluster.launch_node(victim, tie_to_parent=True)
        result = child.result(started + seconds - time.monotonic() + 120)
        cluster.await_serving([victim], 120)
    finally:
        child.kill()
        arrivals.close()
    assert isinstance(result, dict)
    until = killed_at + AFTER_S - 2
    everything = sorted(t for times in arrivals.times.values() for t in times)
    gaps = {p: _longest_gap(times, killed_at, until) for p, times in arrivals.times.items()}
    led = [gaps[p] for p, leader in leaders.items() if leader == victim]
    others = [gaps[p] for p, leader in leaders.items() if leader != victim]
    records_in_window = rate * CPU_S
    commits = result["commits"]
    return {
        "writer": writer,
        "victim": f"node {victim} ({fault})",
        "session s": SESSION_TIMEOUT_MS / 1000,
        "writer cpu s/M": 1e6 * (cpu_after[0] - cpu_before[0]) / records_in_window,
        "nodes cpu s/M": 1e6 * (sum(cpu_after[1:]) - sum(cpu_before[1:])) / records_in_window,
        "commit p50 ms": 1000 * statistics.median(commits) if commits else 0.0,
        "commit p99 ms": 1000 * percentile(commits, 99) if commits else 0.0,
        "whole stall s": _longest_gap(everything, killed_at, until),
        "others max s": max(others, default=0.0),
        "others p50 s": statistics.median(others) if others else 0.0,
        "led max s": max(led, default=0.0),
        "aborted": result["aborted"],
        "new producers": result["new_producers"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000.0, help="records/s, each writer")
    parser.add_argument(
        "--faults",
        default="kill:leader,kill:coordinator",
        help="comma-separated HOW:WHOM, HOW kill (SIGKILL) or stop (SIGTERM), WHOM leader (of "
        "destination partition 0), coordinator (the transaction coordinator of the writer's "
        "first id) or group (the group coordinator of the one-transaction writer's group); or roll "
        "(every node in turn, SIGTERM, as an upgrade does)",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--writers",
        default=",".join(WRITERS),
        help=f"comma-separated, of: {', '.join(WRITERS)}; {MEMBER!r}",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, interrupt)
    rows: list[dict[str, object]] = []
    with bench_clusters("bench-split-", nodes=3, names=("target",)) as (_base, (cluster,)):
        _runs(cluster, args, rows)
    print("\nall runs:")
    for row in rows:
        _print(row)


def _runs(cluster: LocalCluster, args: argparse.Namespace, rows: list[dict[str, object]]) -> None:
    writers = args.writers.split(",")
    for round_ in range(args.rounds):
        for fault in args.faults.split(","):
            # Alternated: whichever runs second meets a cluster that has been through more.
            order = writers if len(rows) % (2 * len(writers)) == 0 else writers[::-1]
            for writer in order:
                say(f"== {writer}, {fault}, round {round_ + 1}")
                if fault == "roll":
                    rows.append(one_roll(cluster, writer, args.rate, round_))
                else:
                    rows.append(one_run(cluster, writer, fault, args.rate, round_))
                _print(rows[-1])


def _print(row: dict[str, object]) -> None:
    print(
        "  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
        flush=True,
    )


if __name__ == "__main__":
    main()
