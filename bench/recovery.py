"""Recovery after a kill, measured from outside: produced and visible totals sampled every tick,
when records produced after the kill are first visible, and what the samples show (the longest
stall, the dip, full speed again, caught up)."""

from __future__ import annotations

import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from bench.flowmeter import TICK_S, EndOffsets


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    # Each source partition's high watermark and each destination partition's last stable
    # offset, in partition order: what one partition's reader waits for, and sees.
    produced_by_partition: tuple[int, ...]
    visible_by_partition: tuple[int, ...]

    @property
    def produced(self) -> int:
        """Source records appended (high watermarks)."""
        return sum(self.produced_by_partition)

    @property
    def visible(self) -> int:
        """Destination offsets readable under read_committed (last stable offsets)."""
        return sum(self.visible_by_partition)


@dataclass(frozen=True)
class Recovery:
    victim: str
    produce_rate: float  # records/s, measured over the 5 s before the kill
    lag_before: float  # median records produced but not yet visible, 5 s before the kill
    stalled_s: float  # longest stretch without any destination progress after the kill
    dipped: bool  # the destination fell below half the produce rate (1 s windows)
    full_speed_s: float | None  # kill -> start of the first 1 s at >= 90 % of the produce rate
    caught_up_s: float | None  # kill -> after the peak, lag <= 2 x lag_before + 0.1 s of production
    max_lag: int
    flowing_again_s: float | None = None  # kill -> first record produced after it visible


def longest_stall(samples: Sequence[Sample], since: float, until: float) -> float:
    """The longest stretch in [since, until] in which nothing new became visible."""
    return _longest_flat([(s.at, s.visible) for s in samples], since, until)


def longest_partition_stall(samples: Sequence[Sample], since: float, until: float) -> float:
    """The longest wait in [since, until] of one destination partition, over its partitions:
    from the first sample whose source partition holds a record produced after the
    destination partition last showed something new, to the next sample in which it does (or
    the window's last sample). A stretch in which the source partition itself took nothing (its
    own leader moving under the bench's producer) is no wait of the copy's; so a partition's
    wait starts up to a sample later than ``longest_stall``'s stretch, which may be the longer
    by that much. A writer with a transaction per task (MirrorMaker 2) may keep some partition
    moving through a stall that holds others: the whole destination's stall does not show that
    one partition waited."""
    inside = [s for s in samples if since <= s.at <= until]
    if len(inside) < 2:
        return 0.0  # as longest_stall: no stretch seen
    partitions = len(inside[0].visible_by_partition)
    shapes = {(len(s.produced_by_partition), len(s.visible_by_partition)) for s in inside}
    if shapes != {(partitions, partitions)}:
        raise ValueError(f"samples of different partition counts: {sorted(shapes)}")
    longest = 0.0
    for p in range(partitions):
        shown = inside[0]  # the sample at which the destination partition last moved
        waiting_since: float | None = None
        for sample in inside[1:]:
            if sample.visible_by_partition[p] != shown.visible_by_partition[p]:
                if waiting_since is not None:
                    longest = max(longest, sample.at - waiting_since)
                shown, waiting_since = sample, None
            elif (
                waiting_since is None
                and sample.produced_by_partition[p] > shown.produced_by_partition[p]
            ):
                waiting_since = sample.at
        if waiting_since is not None:
            longest = max(longest, inside[-1].at - waiting_since)
    return longest


def _longest_flat(points: Sequence[tuple[float, int]], since: float, until: float) -> float:
    inside = [(at, value) for at, value in points if since <= at <= until]
    stalled = longest = 0.0
    for (was_at, was), (at, value) in itertools.pairwise(inside):
        stalled = stalled + (at - was_at) if value == was else 0
        longest = max(longest, stalled)
    return longest


def analyse_recovery(
    samples: Sequence[Sample],
    killed_at: float,
    victim: str,
    flowing_again_s: float | None = None,
) -> Recovery:
    before = [s for s in samples if killed_at - 5 <= s.at <= killed_at]
    after = [s for s in samples if s.at >= killed_at]
    rate = (before[-1].produced - before[0].produced) / (before[-1].at - before[0].at)
    lag_before = statistics.median(s.produced - s.visible for s in before)
    longest = longest_stall(samples, killed_at, math.inf)
    # Rates over the next second from each sample; a kill first brings a dip (below half the
    # produce rate), full speed is the first second after the dip at >= 90 %.
    full_speed = caught_up = None
    dipped = False
    for i, sample in enumerate(after):
        ahead = next((s for s in after[i:] if s.at >= sample.at + 1.0), None)
        if ahead is None:
            break
        speed = (ahead.visible - sample.visible) / (ahead.at - sample.at)
        if not dipped:
            dipped = speed < 0.5 * rate
            if not dipped and sample.at - killed_at > 10:
                full_speed = 0.0  # no dip at this resolution: never slowed down
                break
            continue
        if speed >= 0.9 * rate:
            full_speed = sample.at - killed_at
            break
    # Caught up: after the largest lag the kill caused, back within the lag before it.
    peak = max(after, key=lambda s: s.produced - s.visible)
    threshold = 2 * lag_before + 0.1 * rate
    if full_speed is None:
        pass  # still slow, or too early to tell that it never slowed down
    elif peak.produced - peak.visible <= threshold:
        caught_up = 0.0  # never fell behind by more than that
    else:
        caught_up = next(
            (
                s.at - killed_at
                for s in after
                if s.at >= peak.at and s.produced - s.visible <= threshold
            ),
            None,
        )
    return Recovery(
        victim=victim,
        produce_rate=rate,
        lag_before=lag_before,
        stalled_s=longest,
        dipped=dipped,
        full_speed_s=full_speed,
        caught_up_s=caught_up,
        max_lag=peak.produced - peak.visible,
        flowing_again_s=flowing_again_s,
    )


class FreshRecords:
    """When records produced after a moment first become visible on the destination, seen by a
    read_committed reader of the destination's tail in a thread of its own.

    docs/design.md §10's "flowing again": the first record produced after the kill (its CreateTime,
    stamped by the paced producer) that a read_committed reader sees. Not offsets moving, which
    an abort moves too, and not the backlog a reader behind the kill still reads: a record
    produced before the kill counts for nothing, however late it arrives.
    """

    def __init__(self, target: str, destination: str, partitions: int) -> None:
        self._reader = Consumer(
            {
                "bootstrap.servers": target,
                "group.id": "bench-fresh-records",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        self._reader.assign([TopicPartition(destination, p, OFFSET_END) for p in range(partitions)])
        self._first_seen: dict[int, float | None] = {}  # moment (ms) -> time.monotonic() seen
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def mark(self) -> int:
        """Now, as the moment to watch for (epoch milliseconds, as record timestamps are)."""
        moment = int(time.time() * 1000)
        with self._lock:
            self._first_seen[moment] = None
        return moment

    def first_seen(self, moment: int) -> float | None:
        """time.monotonic() when the first record produced at or after `moment` was seen."""
        with self._lock:
            return self._first_seen[moment]

    def _read(self) -> None:
        while not self._stop.is_set():
            messages = self._reader.consume(2000, 0.05)
            seen = time.monotonic()
            if not messages:
                continue
            newest = max((m.timestamp()[1] for m in messages if not m.error()), default=-1)
            with self._lock:
                for moment, first in self._first_seen.items():
                    if first is None and newest >= moment:
                        self._first_seen[moment] = seen

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._reader.close()


def _in_order(ends: dict[tuple[str, int], int]) -> tuple[int, ...]:
    return tuple(ends[key] for key in sorted(ends))


class Sampler:
    """Samples produced and visible totals every tick, in the caller's loop."""

    def __init__(self, source: str, topic: str, target: str, destination: str, partitions: int):
        self._produced = EndOffsets(source, [(topic, partitions)], committed=False)
        self._visible = EndOffsets(target, [(destination, partitions)], committed=True)
        self.samples: list[Sample] = []

    def run_for(self, seconds: float, check_alive: Callable[[], None]) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            check_alive()
            self.sample()
            time.sleep(TICK_S)

    def sample(self) -> Sample:
        produced = _in_order(self._produced.fetch())
        visible = _in_order(self._visible.fetch())
        sample = Sample(time.monotonic(), produced, visible)
        self.samples.append(sample)
        return sample

    def run_until_recovered(
        self, killed_at: float, victim: str, check_alive: Callable[[], None], timeout_s: float
    ) -> None:
        """Sample until the destination caught up after the kill (and 5 s more), or timeout."""
        until = killed_at + timeout_s
        while time.monotonic() < until:
            self.run_for(1.0, check_alive)
            if analyse_recovery(self.samples, killed_at, victim).caught_up_s is not None:
                self.run_for(5.0, check_alive)  # steady again before anything next
                return
