"""Latency as a user measures it from outside: each candidate at its defaults on two fresh
one-broker clusters, p50/p99/max per round beside MirrorMaker 2 exactly-once in the same run.

    python -m bench.latency_outside [--rates 1000,20000] [--rounds 3] [--pipeline-env N=V ...]

The method (issue 35's): a 12-partition source topic; one Python producer in its own process
(idempotent, linger.ms 1, round-robin over the partitions, 100-byte values each different) paced
at the rate; probe records until every destination partition shows one (issue 35 waited for the
first only, but MirrorMaker 2 copies each partition in a task of its own, so one partition
copying says nothing of the rest); then the paced records, 20 s unmeasured, 30 s measured; a
read_committed consumer of the destination (fetch.wait.max.ms 10) takes each record's latency as
its arrival wall clock minus its CreateTime. A round whose latency grew by more than
UNSTEADY_GROWTH_MS through the window is reported as behind the rate (or as catching up, when it
fell as much), and the ratios of its round are marked. Nothing is tuned for either candidate:
the pipeline's two stages run as processes with every default, MirrorMaker 2 (Kafka's own,
dedicated mode) with exactly-once source support and 12 tasks, every other setting its default.
Rounds rotate which candidate runs first. Every process shares the machine's two cores, as a
user's would share theirs.

bench/pipeline_vs_mirrormaker.py's latency phase differs on purpose: warm clusters after the
throughput phase, MirrorMaker 2 tuned like our stages, a 3 s warm-up and a 20 s window; it
compares the two under equal settings, this bench under what each ships.
"""

from __future__ import annotations

import argparse
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from bench.clusters import bench_clusters
from bench.common import interrupt, percentile
from bench.mirrormaker import MirrorMaker2, ensure_mirrormaker
from bench.pacing import Arrival, PacedProducer, collect_arrivals, probe_until_visible
from bench.pipeline_candidates import (
    CandidateFailedError,
    add_pipeline_env,
    check_mm2,
    check_roles,
)
from bench.replicator_throughput import PARTITIONS, create_topic
from localkafka import RoleProcess

TOPIC = "latency"
START_TIMEOUT_S = 240.0
UNMEASURED_S = 20.0
MEASURED_S = 30.0
COLLECT_TIMEOUT_S = 180.0
CANDIDATES = ("pipeline", "MM2 exactly-once")
# A candidate that keeps up with the rate has a latency that does not grow through the window; one
# that does not has a backlog that grows (or, catching up, one that drains), and its percentiles
# measure the backlog, not a copy's latency: a ratio against them would flatter whichever
# candidate kept up. The growth is the median latency of the records produced in the window's last
# fifth less its first fifth's, 24 s apart: 1 s of growth is a candidate copying about 4 % slower
# than the records come.
UNSTEADY_GROWTH_MS = 1000.0
# What MirrorMaker 2 does without being told: Kafka's consumer and producer defaults.
KAFKA_MAX_POLL_RECORDS = 500
KAFKA_MAX_PARTITION_FETCH_BYTES = 1024 * 1024


def pipeline_settings(base: Path, source: str, target: str, env: dict[str, str]) -> dict[str, str]:
    """Both stages' settings as a user gives them: the clusters, the topic, and nothing else."""
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
        "REPLICATION_TOPICS_INCLUDE": re.escape(TOPIC),
        "REPLICATION_DESTINATION_TOPIC": "copy.{topic}",
        "STATE_DIR": str(base / "state"),
        "METRICS_PORT": "0",  # two roles on one host: no port to share
        **env,
    }


@contextmanager
def _pipeline(
    base: Path, source: str, target: str, env: dict[str, str]
) -> Iterator[tuple[str, Callable[[], None]]]:
    """Both stages as a user starts them."""
    settings = pipeline_settings(base, source, target, env)
    with (
        RoleProcess("replicator", settings, base / "roles") as replicator,
        RoleProcess("deduplicator", settings, base / "roles") as deduplicator,
    ):
        yield f"copy.{TOPIC}", lambda: check_roles(replicator, deduplicator)


@contextmanager
def _mirrormaker(base: Path, source: str, target: str) -> Iterator[tuple[str, Callable[[], None]]]:
    mm2 = MirrorMaker2(
        ensure_mirrormaker(),
        base / "mirrormaker",
        "src",
        source,
        target,
        TOPIC,
        exactly_once=True,
        tasks=PARTITIONS,
        producer={},
        consume_batch=KAFKA_MAX_POLL_RECORDS,
        fetch_partition_bytes=KAFKA_MAX_PARTITION_FETCH_BYTES,
    )
    with mm2:
        yield mm2.destination_topic, lambda: check_mm2(mm2)


class Figures(NamedTuple):
    """A round's p50, p99 and max latency, and the latency's growth through the window, in ms."""

    p50: float
    p99: float
    peak: float
    growth: float


# A round of one candidate: its rate, round number, name, and its figures or why it has none
# (CandidateFailedError's message).
Row = tuple[float, int, str, Figures | str]


def measure(candidate: str, rate: float, env: dict[str, str]) -> list[Arrival]:
    """One round of one candidate on fresh clusters: the measured records, with their
    latencies."""
    with bench_clusters("bench-latency-") as (base, clusters):
        source, target = (c.bootstrap_servers for c in clusters)
        create_topic(source, TOPIC)
        if candidate == "pipeline":
            start = _pipeline(base, source, target, env)
        else:
            start = _mirrormaker(base, source, target)
        with start as (destination, check_alive):
            probe_until_visible(source, target, TOPIC, destination, PARTITIONS, START_TIMEOUT_S)
            with PacedProducer(source, TOPIC, PARTITIONS, rate, 100) as producer:
                begin = time.time() + UNMEASURED_S
                window = (begin, begin + MEASURED_S)

                def alive() -> None:
                    producer.check_alive()
                    check_alive()

                return collect_arrivals(
                    target, destination, PARTITIONS, window, alive, COLLECT_TIMEOUT_S
                )


def summary(arrivals: list[Arrival]) -> Figures:
    """p50, p99 and max in ms, and how much the latency grew through the window."""
    if not arrivals:
        raise RuntimeError("no record of the measured window was seen")
    latencies = [arrival.latency_ms for arrival in arrivals]
    return Figures(
        percentile(latencies, 50),
        percentile(latencies, 99),
        max(latencies),
        latency_growth_ms(arrivals),
    )


def latency_growth_ms(arrivals: list[Arrival]) -> float:
    """The median latency of the records produced in the last fifth of the span the arrivals
    cover, less that of the first fifth (0 with too few records to say)."""
    first_ms = min(arrival.produced_ms for arrival in arrivals)
    fifth_ms = (max(arrival.produced_ms for arrival in arrivals) - first_ms) / 5
    early = [a.latency_ms for a in arrivals if a.produced_ms < first_ms + fifth_ms]
    late = [a.latency_ms for a in arrivals if a.produced_ms >= first_ms + 4 * fifth_ms]
    if not early or not late:
        return 0.0
    return percentile(late, 50) - percentile(early, 50)


def unsteady(figures: Figures | str | None) -> str:
    """How a round's latency moved through the window when it moved as a backlog's does:
    "behind" (it grew), "catching up" (it fell), or "" (steady, or no figures)."""
    if not isinstance(figures, Figures) or abs(figures.growth) <= UNSTEADY_GROWTH_MS:
        return ""
    return "behind" if figures.growth > 0 else "catching up"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,20000", help="comma-separated records/s")
    parser.add_argument("--rounds", type=int, default=3)
    add_pipeline_env(parser)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    signal.signal(signal.SIGTERM, interrupt)
    env = dict(item.split("=", 1) for item in args.pipeline_env)
    started = time.monotonic()
    rows: list[Row] = []
    for rate in (float(r) for r in args.rates.split(",")):
        for n in range(args.rounds):
            # Each round starts with the other candidate: neither always meets a colder machine.
            for candidate in CANDIDATES[n % 2 :] + CANDIDATES[: n % 2]:
                print(f"== {candidate} at {rate:,.0f} records/s, round {n + 1}", flush=True)
                try:
                    figures: Figures | str = summary(measure(candidate, rate, env))
                except CandidateFailedError as exc:
                    # Its own failure is the round's result for it: said, and the bench goes on
                    # (a MirrorMaker 2 task that died once took the whole bench down with it).
                    figures = str(exc).splitlines()[0]
                    print(f"   no result: {exc}", flush=True)
                else:
                    print(
                        "   p50 {:.0f} ms, p99 {:.0f} ms, max {:.0f} ms, growth {:+.0f} ms".format(
                            *figures
                        )
                        + (f" ({unsteady(figures)})" if unsteady(figures) else "")
                    )
                rows.append((rate, n + 1, candidate, figures))
    report(rows, env)
    print(f"\nbench took {time.monotonic() - started:.0f} s")


def report(rows: list[Row], env: dict) -> None:
    print(
        f"\nlatency from outside: production (CreateTime) to visibility under read_committed, "
        f"100 B records, {MEASURED_S:.0f} s measured after {UNMEASURED_S:.0f} s, fresh clusters "
        f"per round; both candidates at their defaults"
        + (f" (the pipeline with {env})" if env else "")
    )
    print(
        f"{'records/s':>9} {'round':>5}  {'candidate':<17} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'growth ms':>9}"
    )
    for rate, n, candidate, figures in rows:
        if isinstance(figures, str):
            print(f"{rate:>9,.0f} {n:>5}  {candidate:<17} no result: {figures}")
            continue
        p50, p99, peak, growth = figures
        print(
            f"{rate:>9,.0f} {n:>5}  {candidate:<17} {p50:>7.0f} {p99:>7.0f} {peak:>7.0f} "
            f"{growth:>+9.0f}  {unsteady(figures)}".rstrip()
        )
    unsteady_round = False
    for rate in sorted({row[0] for row in rows}):
        ratios = []
        for n in sorted({row[1] for row in rows if row[0] == rate}):
            figures_of = {c: f for r, m, c, f in rows if r == rate and m == n}
            ours, theirs = figures_of.get("pipeline"), figures_of.get("MM2 exactly-once")
            if isinstance(ours, Figures) and isinstance(theirs, Figures):
                mark = "*" if unsteady(ours) or unsteady(theirs) else ""
                unsteady_round = unsteady_round or bool(mark)
                ratios.append(f"{ours.p99 / theirs.p99:.2f}x{mark}")
            else:
                ratios.append("none (a candidate gave no result)")
        print(
            f"at {rate:,.0f} records/s, p99 pipeline / MM2 exactly-once per round: "
            + ", ".join(ratios)
        )
    if unsteady_round:
        print(
            f"* a candidate's latency moved more than {UNSTEADY_GROWTH_MS:.0f} ms through the "
            f"window in that round (behind: a backlog growing; catching up: one draining): its "
            f"percentiles measure the backlog, and the ratio compares against it"
        )


if __name__ == "__main__":
    main()
