"""The throughput phase of bench/pipeline_vs_mirrormaker.py: one source topic copied by every
candidate (the plain loop, the pipeline, MirrorMaker 2 both ways), rounds in rotating order,
each timed from its first record on the target to the last visible under read_committed."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.common import COPY_TIMEOUT_S, ChildRun
from bench.flowmeter import EndOffsets, RunTiming, SourceTail, await_copies, source_tail
from bench.payloads import compression_ratio
from bench.pipeline_candidates import Candidates, check_mm2, check_roles
from bench.replicator_throughput import HEADERS, PARTITIONS, create_topic, fill, plain_loop
from localkafka import peak_rss_mib
from runtime.names import FlowNames

# A candidate's copy of the source topic, tagged per round: (destination topic, its timing).
CopyRun = Callable[[str, SourceTail, str], tuple[str, RunTiming]]


@dataclass
class Row:
    size: int
    count: int
    timings: dict[str, RunTiming]  # each candidate's median round
    extra_offsets: dict[str, int]  # destination offsets beyond the records: markers, duplicates
    rounds: dict[str, list[RunTiming]]


class ThroughputBench(Candidates):
    """The candidates, each copying one filled source topic to fresh destination topics."""

    def warm_up(self, count: int) -> None:
        """One untimed copy by every candidate first: the target's transaction and offsets
        topics are created and both brokers' JIT compilers have seen every request kind, so the
        first timed candidate pays no more than the last (measured: without it, the first
        pipeline run cost its brokers up to twice the CPU per record of the third)."""
        topic = "bench-warm-up"
        print(f"\n== warm-up: {count:,} records of 100 B through every candidate", flush=True)
        started = time.monotonic()
        create_topic(self.source, topic)
        fill(self.source, topic, 100, count)
        tail = source_tail(self.source, topic, PARTITIONS)
        for _name, run in self._candidates():
            run(topic, tail, "w")
        print(f"   done in {time.monotonic() - started:.0f} s", flush=True)

    def throughput(self, size: int, count: int, rounds: int = 1) -> Row:
        topic = f"bench-{size}"
        print(f"\n== {size} B values: filling {topic} with {count:,} records", flush=True)
        create_topic(self.source, topic)
        filling = time.monotonic()
        fill(self.source, topic, size, count)
        print(f"   filled in {time.monotonic() - filling:.1f} s", flush=True)
        raw_mb = count * (size + len(HEADERS[0][0]) + len(HEADERS[0][1]) + 8) / 1e6
        print(
            f"   data: bench/payloads.py's JSON mix, every value different; zlib-1 compresses a "
            f"batch of it {compression_ratio(size):.1f}x; the source topic (filled with lz4) "
            f"holds {_disk_mb(self.data_dirs[0], topic):.0f} MB on disk for {raw_mb:.0f} MB of "
            "keys, values and headers",
            flush=True,
        )
        tail = source_tail(self.source, topic, PARTITIONS)
        candidates = self._candidates()
        rounds_of: dict[str, list[RunTiming]] = {name: [] for name, _run in candidates}
        extra: dict[str, int] = {}
        for n in range(rounds):
            # Each round starts one candidate later: none always runs first or last.
            for name, run in candidates[n % len(candidates) :] + candidates[: n % len(candidates)]:
                print(f"   {name} ...", end=" ", flush=True)
                destination, timing = run(topic, tail, f"r{n}")
                written = EndOffsets(self.target, [(destination, PARTITIONS)], committed=False)
                extra[name] = written.total() - tail.total
                if self.verify:
                    self._verify(destination, tail, timing)
                rounds_of[name].append(timing)
                print(
                    f"{tail.total / timing.seconds:,.0f} records/s over {timing.seconds:.1f} s "
                    f"(start-up {timing.startup:.1f} s){''.join('; ' + n for n in timing.notes)}",
                    flush=True,
                )
        # The median round of each candidate (by time): one slow or fast round moves nothing.
        timings = {
            name: sorted(runs, key=lambda t: t.seconds)[(len(runs) - 1) // 2]
            for name, runs in rounds_of.items()
        }
        return Row(size, count, timings, extra, rounds_of)

    def _candidates(self) -> list[tuple[str, CopyRun]]:
        runs: list[tuple[str, CopyRun]] = [("plain loop", self._plain)]
        runs += [
            (
                "pipeline" if n == 0 else f"pipeline, staging {compression}",
                functools.partial(self._pipeline, staging_compression=compression),
            )
            for n, compression in enumerate(self.staging_compressions)
        ]
        runs += [
            (f"pipeline, {workers} workers", functools.partial(self._pipeline, workers=workers))
            for workers in self.workers
            if workers > 1
        ]
        runs += [
            ("MM2 at-least-once", functools.partial(self._mm2, exactly_once=False)),
            ("MM2 exactly-once", functools.partial(self._mm2, exactly_once=True)),
        ]
        return runs

    def _plain(self, topic: str, tail: SourceTail, tag: str) -> tuple[str, RunTiming]:
        destination = f"{topic}-baseline-{tag}"
        launched = time.monotonic()
        child = ChildRun(plain_loop, self.source, self.target, topic, tail.total, destination)
        try:
            timing = self._await(destination, tail, [(destination, PARTITIONS)], launched,
                                 lambda: [child.pid], child.check_alive)  # fmt: skip
            # The loop exits once it has flushed, often before the last check here: its own
            # CPU count (from assignment to flush) instead of /proc.
            _seconds, timing.cpu_role = child.result(120)  # type: ignore[misc]  # (s, cpu s)
        finally:
            child.kill()
        return destination, timing

    def _pipeline(
        self,
        topic: str,
        tail: SourceTail,
        tag: str,
        *,
        staging_compression: str = "lz4",
        workers: int = 1,
    ) -> tuple[str, RunTiming]:
        flow = f"bench-{topic}-{staging_compression}-{workers}-{tag}"
        rename = f"pipeline-{staging_compression}-{workers}-{tag}.{{topic}}"
        destination = rename.format(topic=topic)
        launched = time.monotonic()
        env = {
            "REPLICATION_STAGING_COMPRESSION": staging_compression,
            "REPLICATION_DESTINATION_TOPIC": rename,
            "REPLICATION_WORKERS": str(workers),
        }
        with self._roles(flow, topic, env) as (replicator, deduplicator):
            timing = self._await(
                destination,
                tail,
                [(FlowNames(flow).staging, PARTITIONS), (destination, PARTITIONS)],
                launched,
                lambda: [replicator.pid, deduplicator.pid],
                lambda: check_roles(replicator, deduplicator),
            )
            timing.notes.append(
                "peak RSS: "
                + ", ".join(
                    f"{r.name} {_peak_rss_mib(r.pid):.0f} MiB" for r in (replicator, deduplicator)
                )
            )
            for role in (replicator, deduplicator):  # stage 1 first: nothing new for stage 2
                if role.terminate(60) != 0:
                    timing.notes.append(f"{role.name} exited with {role.returncode}")
        # The clock starts at stage 1's first staging record; stage 2 is still starting then
        # (it waits for the staging topic stage 1 creates): that start-up is in the time.
        timing.notes.append(
            f"first destination record {timing.destination_first - timing.first_output:.1f} s "
            "after the first staging record"
        )
        stage1, stage2 = (cpu / tail.total * 1e6 for cpu in timing.cpu_each)
        timing.notes.append(f"cpu s/M: replicator {stage1:.2f}, deduplicator {stage2:.2f}")
        staging_mb = _disk_mb(self.data_dirs[1], FlowNames(flow).staging)
        timing.notes.append(
            f"on disk: staging {staging_mb:.0f} MB, destination "
            f"{_disk_mb(self.data_dirs[1], destination):.0f} MB"
        )
        return destination, timing

    def _mm2(
        self, topic: str, tail: SourceTail, tag: str, *, exactly_once: bool
    ) -> tuple[str, RunTiming]:
        alias = f"mm2{'eos' if exactly_once else 'alo'}{topic.rsplit('-', 1)[-1]}{tag}"
        with self._mirrormaker(alias, topic, exactly_once=exactly_once) as mm2:
            timing = self._await(
                mm2.destination_topic,
                tail,
                [(mm2.destination_topic, PARTITIONS)],
                mm2.launched,
                lambda: [mm2.pid],
                lambda: check_mm2(mm2),
            )
            support, producers = mm2.exactly_once_evidence()
            timing.notes.append(
                f"log: exactly.once.source.support={support}, {producers} transactional producers"
            )
            if exactly_once and (support != "enabled" or producers < PARTITIONS):
                timing.notes.append("EXACTLY-ONCE NOT CONFIRMED BY THE LOG")
            mm2.stop()
        return mm2.destination_topic, timing

    def _await(
        self,
        destination: str,
        tail: SourceTail,
        first_output: list[tuple[str, int]],
        launched: float,
        role_pids: Callable[[], list[int | None]],
        check_alive: Callable[[], None],
    ) -> RunTiming:
        return self._await_all({destination: tail}, first_output, launched, role_pids, check_alive)

    def _await_all(
        self,
        copies: dict[str, SourceTail],
        first_output: list[tuple[str, int]],
        launched: float,
        role_pids: Callable[[], list[int | None]],
        check_alive: Callable[[], None],
    ) -> RunTiming:
        """await_copies of ``copies`` (destination -> its source's tail) on the bench's target."""
        return await_copies(
            self.target,
            copies,
            first_output_topics=first_output,
            launched=launched,
            role_pids=role_pids,
            broker_pids=self.broker_pids,
            check_alive=check_alive,
            timeout_s=COPY_TIMEOUT_S,
        )

    def _verify(self, destination: str, tail: SourceTail, timing: RunTiming) -> None:
        """Count every record a read_committed consumer sees, per partition, up to the last."""
        reader = Consumer(
            {
                "bootstrap.servers": self.target,
                "group.id": "bench-verify",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        reader.assign([TopicPartition(destination, p, 0) for p in range(PARTITIONS)])
        counts = dict.fromkeys(range(PARTITIONS), 0)
        open_partitions = {p for p, n in tail.counts.items() if n}
        deadline = time.monotonic() + 300
        while open_partitions and time.monotonic() < deadline:
            for message in reader.consume(10000, 0.5):
                p = message.partition()
                if message.error() or p not in open_partitions:
                    continue
                counts[p] += 1
                if message.key() == tail.last_keys[p]:
                    open_partitions.discard(p)
        reader.close()
        wrong = {p: (counts[p], n) for p, n in tail.counts.items() if counts[p] != n}
        timing.notes.append(
            "verified: per-partition counts equal the source's"
            if not wrong
            else f"VERIFY FAILED (got, want): {wrong}"
        )


def _peak_rss_mib(pid: int | None) -> float:
    """The most resident memory one process of ``pid``'s tree has had so far (VmHWM)."""
    return float("nan") if pid is None else peak_rss_mib(pid)


def _disk_mb(data_dir: Path, topic: str) -> float:
    """What a topic's log segments hold on a broker's disk (compressed batches as written)."""
    return sum(f.stat().st_size for f in data_dir.glob(f"{topic}-*/*.log")) / 1e6
