"""Where each stage's time goes: stage 1, then stage 2, each alone under py-spy.

    python -m bench.profile_stages [--records N] [--size BYTES] [--partitions N] [--out DIR]

On its own two local clusters: fills a source topic of --partitions (12) partitions
(bench/payloads.py's values, round-robin),
runs `python -m replicator` until its committed source offsets reach the end, then
`python -m deduplicator` until its committed staging offsets do, each sampled by py-spy
(`--native --idle`: C frames of librdkafka and msgpack, and the time spent waiting). Writes each
stage's main-thread stacks as folded text (`<stage>.folded`, one line per stack) and, where
`inferno-flamegraph` is on the PATH (`cargo install inferno`), a flame graph (`<stage>.svg`);
prints the functions that take the largest share of the main thread's time, the CPU seconds
per million records, and the threads that used them. A profile slows what it samples a little:
read the shares, not the speed.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.clusters import bench_clusters
from bench.common import committed_total, thread_cpu_seconds
from bench.replicator_throughput import PARTITIONS, create_topic, fill_spread
from runtime import ErrorClass, classify, kafka_error_of
from runtime.names import FlowNames
from runtime.settings import Settings

_LOOPS = {"replicator": "Replicator.run ", "deduplicator": "Deduplicator.run "}
_FRAME = re.compile(r"(.*) \((?:.*/)?([^/:]*?)(?::\d+)?\)$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes of each record")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="of the source topic")
    parser.add_argument("--out", type=Path, default=Path("profiles"))
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("py-spy is not installed: pip install py-spy")
    args.out.mkdir(parents=True, exist_ok=True)
    with bench_clusters("bench-profile-") as (base, clusters):
        source, target = (c.bootstrap_servers for c in clusters)
        topic = f"profile-{args.size}"
        create_topic(source, topic, args.partitions)
        fill_spread(source, [(topic, p) for p in range(args.partitions)], args.size, args.records)
        flow = FlowNames("profile")
        env = {
            **os.environ,
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
            "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
            "REPLICATION_FLOW": "profile",
            "REPLICATION_DESTINATION_TOPIC": "copy.{topic}",
            "STATE_DIR": str(base / "state"),
            "METRICS_PORT": "0",
        }
        stage1_done = _reached(source, flow.replicator_group, topic, args.partitions, args.records)
        _profile("replicator", env, stage1_done, spy, args.out, args.records)
        lanes = Settings.model_fields["staging_partitions"].default  # stage 1 creates staging
        staged = _end_offsets(target, flow.staging, lanes)
        stage2_done = _reached(target, flow.deduplicator_group, flow.staging, lanes, staged)
        _profile("deduplicator", env, stage2_done, spy, args.out, args.records)


def _profile(
    role: str, env: dict[str, str], done: Callable[[], bool], spy: str, out: Path, records: int
) -> None:
    raw = out / f"{role}.raw"
    with (out / f"{role}.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", role], env=env, stdout=log, stderr=log)
    sampler = subprocess.Popen(
        [spy, "record", "--pid", str(process.pid), "--native", "--idle", "--rate", "100",
         "--format", "raw", "--output", str(raw)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    started = time.monotonic()
    try:
        while not done():
            if process.poll() is not None:
                sys.exit(f"{role} exited with {process.returncode}; see {out / f'{role}.log'}")
            time.sleep(0.1)
        seconds = time.monotonic() - started
        threads = sorted(thread_cpu_seconds(process.pid), reverse=True)
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        sampler.wait(60)
    finally:
        # Never left behind, whatever failed: a stage outliving its clusters holds its instance
        # id on this host, and the next run's stage would stop at start-up on it.
        for child in (sampler, process):
            if child.poll() is None:
                child.kill()
                child.wait(60)
    folded = _main_loop(raw, _LOOPS[role])
    (out / f"{role}.folded").write_text("".join(f"{s} {n}\n" for s, n in folded.items()))
    flamegraph = shutil.which("inferno-flamegraph")
    if flamegraph:
        with (out / f"{role}.svg").open("wb") as svg:
            subprocess.run(
                [flamegraph, "--title", f"{role}: main thread (py-spy --native --idle)",
                 str(out / f"{role}.folded")],
                stdout=svg,
                check=True,
            )  # fmt: skip
    cpu = sum(seconds for seconds, _name in threads)
    print(
        f"\n== {role}: {records:,} records in {seconds:.1f} s (start-up included), "
        f"{cpu / records * 1e6:.2f} CPU s per million; threads: "
        + ", ".join(f"{name} {seconds:.1f} s" for seconds, name in threads[:4])
    )
    _print_shares(folded)


def _main_loop(raw: Path, loop: str) -> dict[str, int]:
    """The stacks through the role's loop, each from the loop down (start-up left out)."""
    stacks: dict[str, int] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if loop in stack:
            stacks[stack[stack.index(loop) :]] += int(count)
    return stacks


def _print_shares(stacks: dict[str, int], top: int = 25) -> None:
    total = sum(stacks.values()) or 1
    inclusive: collections.Counter[str] = collections.Counter()
    for stack, count in stacks.items():
        for name in {_name(frame) for frame in stack.split(";")}:
            inclusive[name] += count
    print(f"   share of the main loop's {total} samples, by function and what it calls:")
    for name, count in inclusive.most_common(top):
        print(f"   {count / total * 100:5.1f} %  {name}")


def _name(frame: str) -> str:
    match = _FRAME.match(frame)
    return f"{match.group(1)} ({match.group(2)})" if match else frame


def _reached(
    bootstrap: str, group: str, topic: str, partitions_of_topic: int, count: int
) -> Callable[[], bool]:
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    partitions = [TopicPartition(topic, p) for p in range(partitions_of_topic)]

    def done() -> bool:
        try:
            return committed_total(watcher, partitions) >= count
        except KafkaException as exc:
            # The first group of a fresh cluster: its coordinator is still loading the offsets
            # topic (NOT_COORDINATOR) while the stage starts. Not yet, not a failure.
            if classify(kafka_error_of(exc)) is ErrorClass.RETRIABLE:
                return False
            raise

    return done


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-profile"})
    try:
        return sum(
            reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        reader.close()


if __name__ == "__main__":
    main()
