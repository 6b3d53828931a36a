"""What several benches share: progress lines, percentiles, a process's CPU seconds, the
committed offsets of a group and waiting for them, a function run in a child process tied to
the bench, a record copied the way stage 2 writes one, a table's rows printed, and SIGTERM taken
as Ctrl-C."""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from confluent_kafka import (
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from envelope import HEADER_PROVENANCE, encode_provenance
from localkafka import RoleProcess, die_with_parent
from offsetsync.source_ids import source_topic_ids
from replicator.flowrecords import FlowRecords
from runtime import load_settings, produce_when_room

CLK_TCK = os.sysconf("SC_CLK_TCK")
# How long a bench waits for one copy to finish before it calls the candidate stuck.
COPY_TIMEOUT_S = 900.0


def say(line: str) -> None:
    """A progress line, on stderr: stdout holds the results."""
    print(line, file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """``q`` in percent, the value at the rounded rank (no value: an IndexError)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """``q`` as a fraction, nearest rank; None for no value."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def process_cpu_seconds(pid: int | None) -> float:
    """utime + stime of one process, from /proc (FileNotFoundError once it is gone)."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def process_group_cpu_seconds(pgid: int) -> float:
    """The CPU of the process group ``pgid``: a role started in a session of its own with the
    helper processes it runs (offset sync's two offset fetch processes, replaced when one is
    lost). Each live member's utime + stime, and its cutime + cstime: a helper that ended and was
    waited for counts through its parent, so one that ends between two readings moves from its
    own line to its parent's instead of leaving the sum. Only a helper that ended and was not
    yet waited for is missed; the figure may read low, never high."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended between the listing and the read
        # pgrp is proc(5)'s field 5; utime, stime, cutime, cstime its fields 14-17.
        fields = _stat_fields(stat)
        if int(fields[2]) == pgid:
            total += sum(int(field) for field in fields[11:15]) / CLK_TCK
    return total


def thread_cpu_seconds(pid: int) -> list[tuple[float, str]]:
    """Each live thread of ``pid``: its utime + stime and its name as the kernel keeps it (cut to
    15 characters). A thread that ends while they are read is left out; a process that is gone
    raises FileNotFoundError."""
    return [(seconds, name) for _tid, seconds, name in _threads(pid)]


_Key = TypeVar("_Key")
# The JVM's JIT compiler threads ("C2 CompilerThread0", cut to 15 characters by the kernel).
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def jit_thread_seconds(pid: int) -> dict[int, float]:
    """utime + stime of each live JIT compiler thread of a JVM, by thread id. A broker started for
    a bench is still compiling minutes later, and that CPU lands on whichever candidate copies
    meanwhile (docs/performance.md, record sizes). HotSpot starts and stops compiler threads as
    its queue grows and shrinks: two readings are compared thread by thread
    (``jit_seconds_between``), for a thread that ended takes its whole count out of a sum (a
    negative difference, seen with the brokers on C1 only)."""
    return {tid: seconds for tid, seconds, name in _threads(pid) if name in _JIT_THREADS}


def jit_seconds_between(before: Mapping[_Key, float], after: Mapping[_Key, float]) -> float:
    """The JIT CPU spent between two readings: each thread's growth, a new one's whole count. A
    thread that ended in between is left out, its share with it: the figure may read low, never
    below 0."""
    return sum(seconds - before.get(key, 0.0) for key, seconds in after.items())


def _threads(pid: int) -> list[tuple[int, float, str]]:
    """Each live thread of ``pid``: its id, utime + stime and name (thread_cpu_seconds)."""
    threads = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between the listing and the read
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        threads.append((int(task.name), _stat_cpu_seconds(stat), name))
    return threads


def _stat_cpu_seconds(stat: str) -> float:
    # utime and stime, stat's fields 14 and 15 (proc(5)).
    fields = _stat_fields(stat)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _stat_fields(stat: str) -> list[str]:
    """A /proc stat line's fields after the name: proc(5)'s field N at N - 3. The name, in
    parentheses, may hold spaces; fields are counted after its closing one."""
    return stat.rsplit(")", 1)[1].split()


def committed_total(watcher: Consumer, partitions: list[TopicPartition]) -> int:
    """The offsets the watcher's group has committed on ``partitions``, summed (none: 0)."""
    return sum(max(tp.offset, 0) for tp in watcher.committed(partitions, timeout=10))


def await_committed(
    watcher: Consumer,
    partitions: list[TopicPartition],
    end: int,
    role: RoleProcess,
    timeout_s: float,
) -> None:
    """Until the watcher's group has committed ``end`` offsets over ``partitions`` in all. A
    role that exits or a deadline that passes fails the bench, with the role's log: a bench
    that waits for ever measures nothing and holds the machine."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done = committed_total(watcher, partitions)
        except KafkaException:
            done = 0  # the group's coordinator is not ready yet
        if done >= end:
            return
        if not role.is_running():
            raise RuntimeError(
                f"{role.name} exited with {role.returncode} after committing {done:,} of "
                f"{end:,} offsets\n{role.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{role.name} committed {done:,} of {end:,} offsets in {timeout_s:.0f} s\n"
                f"{role.log_tail()}"
            )
        time.sleep(0.05)


def print_rows(rows: list[tuple[str, str]]) -> None:
    """Labels left, padded to the longest, then their values."""
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")


def interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler raising as Ctrl-C does: the finally blocks stop every process the
    bench started."""
    raise KeyboardInterrupt(f"signal {signum}")


def tie_to_parent() -> None:
    """In a child process of the bench: the kernel SIGKILLs it when the bench dies."""
    tie = die_with_parent()
    if tie is not None:
        tie()


def _child(queue, function, args) -> None:
    tie_to_parent()
    queue.put(function(*args))


class ChildRun:
    """`function(*args)` in a spawned process (its own GIL, measured like the other candidates)."""

    def __init__(self, function: Callable[..., object], *args: object) -> None:
        context = multiprocessing.get_context("spawn")
        self._queue = context.Queue()
        self._process = context.Process(target=_child, args=(self._queue, function, args))
        self._process.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def check_alive(self) -> None:
        code = self._process.exitcode
        if code not in (None, 0):
            raise RuntimeError(f"child process {self.pid} failed with exit code {code}")

    def result(self, timeout_s: float) -> object:
        value = self._queue.get(timeout=timeout_s)
        self._process.join(timeout_s)
        return value

    def kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(10)


def copy_as_stage_2(producer: Producer, topic: str, message: Message, cluster_id: str) -> None:
    """Produce a copy of ``message`` the way stage 2 writes one: same partition, key, value,
    headers and timestamp, plus the provenance header naming its source record."""
    partition, offset = message.partition(), message.offset()
    headers = message.headers() or []
    headers.append((HEADER_PROVENANCE, encode_provenance(cluster_id, partition, offset)))
    produce_when_room(
        producer,
        topic,
        value=message.value(),
        key=message.key(),
        partition=partition,
        headers=headers,
        timestamp=message.timestamp()[1],
    )


def record_as_stage_1(source: str, target: str, settings: Mapping[str, str], topics: list[str]):
    """What stage 1 records in the flow's meta topic before it copies a source topic (its topic
    id), written by stage 1's own code (replicator/flowrecords.py), for a bench that copies as
    stage 2 without stage 1: offset sync translates only a topic so recorded."""
    # Held while the answers come: a client collected at once fails them (_DESTROY).
    source_admin = AdminClient({"bootstrap.servers": source})
    ids = source_topic_ids(source_admin, topics)  # the ids as offset sync reads them
    if ids.keys() != set(topics):
        raise SystemExit(f"not on the source: {sorted(set(topics) - ids.keys())}")
    admin = AdminClient({"bootstrap.servers": target})
    records = FlowRecords(load_settings(settings))
    records.load(admin, lambda new: admin.create_topics([new])[new.topic].result(30))
    records.record_topic_ids(ids)
