"""The numbers of bench/offsetsync_lag.py, from the bench's own notes (each commit's
acknowledgement), the checkpoints written and offset sync's /metrics at the window's two ends;
what they show to be broken; and how they are printed."""

from __future__ import annotations

import argparse
import math
import os

from prometheus_client.parser import text_string_to_metric_families

from bench.common import nearest_rank, print_rows
from bench.offsetsync_load import Committer
from localkafka.scrape import sample
from offsetsync.checkpoints import Checkpoint

LAG = "exactly_offsetsync_lag_seconds"
CYCLE = "exactly_offsetsync_cycle_seconds"
REQUESTS = "exactly_offsetsync_requests_total"
CLUSTERS = ("source", "target")
GROUP_STATES = ("synced", "waiting", "active_on_target", "behind_retention")


def broken_translations(numbers: dict) -> list[str]:
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
        "staleness_ms_p50": nearest_rank(lags, 0.5),
        "staleness_ms_p99": nearest_rank(lags, 0.99),
        "staleness_ms_max": max(lags, default=None),
    }


def numbers(
    args: argparse.Namespace,
    window: list[float],
    seconds: float,
    first: str,
    last: str,
    committer: Committer,
    traffic: dict,
    checkpoints: list[Checkpoint],
    cpu_seconds: float,
) -> dict:
    """Everything the bench reports, in the order of its --json file. ``cpu_seconds``: offset
    sync's and its two offset fetch processes', over the window."""
    copy_lag = [n for t, n in committer.copy_lag if window[0] <= t <= window[1]]
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
        **_group_commits(committer, window, seconds, args.partitions),
        **_checkpoints(committer, checkpoints, window, args.interval_ms),
        **_offsetsync(first, last, seconds, cpu_seconds, args.groups),
        "load_average_at_end": round(os.getloadavg()[0], 2),
    }


def _group_commits(
    committer: Committer, window: list[float], seconds: float, partitions: int
) -> dict:
    commits = [a for a in committer.acks if window[0] <= a[0] <= window[1]]
    return {
        "group_commits_per_second": round(len(commits) / seconds, 1),
        "partition_offsets_committed_per_second": round(len(commits) * partitions / seconds, 1),
        "group_commit_round_trip_ms_p50": _ms(nearest_rank([rt for _, rt in commits], 0.5)),
        "group_commit_round_trip_ms_p99": _ms(nearest_rank([rt for _, rt in commits], 0.99)),
        "group_commit_failures_in_window": sum(
            window[0] <= t <= window[1] for t, _ in committer.failures
        ),
        "group_commit_failures_before": sum(t < window[0] for t, _ in committer.failures),
        "group_commit_failure_examples": sorted({e for _, e in committer.failures})[:5],
        "end_offset_retries": len(committer.retried),
    }


def _checkpoints(
    committer: Committer, checkpoints: list[Checkpoint], window: list[float], interval_ms: int
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
    return {
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
        "sync_lag_ms_p50": nearest_rank(lags, 0.5),
        "sync_lag_ms_p99": nearest_rank(lags, 0.99),
        "sync_lag_ms_max": max(lags, default=None),
        **_staleness(committer, checkpoints, start_ms, end_ms, interval_ms),
        "commit_to_seen_ms_p50": nearest_rank(to_seen, 0.5),
        "seen_to_written_ms_p50": nearest_rank(to_written, 0.5),
        "seen_to_written_ms_p99": nearest_rank(to_written, 0.99),
    }


def _offsetsync(first: str, last: str, seconds: float, cpu_seconds: float, groups: int) -> dict:
    """From offset sync's /metrics: the window's growth, and its groups' states at the end; with
    its CPU over the window, in cores and per group a cycle went through."""
    requests = {
        cluster: _delta(first, last, REQUESTS, cluster=cluster) / seconds for cluster in CLUSTERS
    }
    cycles = _delta(first, last, f"{CYCLE}_count")
    return {
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
        "offsetsync_cpu_cores": round(cpu_seconds / seconds, 3),
        "offsetsync_cpu_ms_per_group_per_cycle": (
            round(cpu_seconds * 1000 / (groups * cycles), 3) if cycles else None
        ),
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


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _v(value, unit: str = "") -> str:
    return "-" if value is None else f"{value:,}{unit}"


def report(n: dict) -> None:
    print_rows(_load_rows(n) + _sync_rows(n))
    print(
        "One run on a 2-core machine shared by two brokers, the traffic, the groups and offset "
        f"sync (load average {n['load_average_at_end']:.1f} at the end): the timings are noisy."
    )


def _load_rows(n: dict) -> list[tuple[str, str]]:
    """The load: what was produced, copied and committed on the source."""
    return [
        (
            "load",
            f"{n['groups']} groups x {n['partitions']} partitions, interval "
            f"{n['interval_ms']} ms, measured {n['duration_seconds']:g} s",
        ),
        (
            "traffic",
            f"{_v(n['records_produced'])} produced, {_v(n['records_copied'])} copied in "
            f"{_v(n['traffic_seconds'])} s (wanted {n['records_per_second_wanted']:,}/s); copier "
            f"behind {_v(n['copier_behind_records_mean'])} records on average, "
            f"{_v(n['copier_behind_records_max'])} at most",
        ),
        (
            "group commits on the source",
            f"{n['group_commits_per_second']}/s ({n['partition_offsets_committed_per_second']} "
            f"partition offsets/s), round trip p50 {_v(n['group_commit_round_trip_ms_p50'])} ms "
            f"p99 {_v(n['group_commit_round_trip_ms_p99'])} ms, "
            f"{n['group_commit_failures_in_window']} failed "
            f"({n['group_commit_failures_before']} before the window)",
        ),
    ]


def _sync_rows(n: dict) -> list[tuple[str, str]]:
    """What offset sync did with it: checkpoints, lags, cycles and requests."""
    states = ", ".join(f"{s} {c}" for s, c in n["offsetsync_groups_at_end"].items() if c)
    return [
        (
            "checkpoints in the window",
            f"{n['checkpoints_committed_in_window']:,} committed, "
            f"{n['checkpoints_not_committed_in_window']} not; {n['checkpoints_unmatched']} "
            f"unmatched, {n['translations_wrong']} wrong",
        ),
        (
            "sync lag, commit ack -> written",
            f"p50 {_v(n['sync_lag_ms_p50'])} ms  p99 {_v(n['sync_lag_ms_p99'])} ms  "
            f"max {_v(n['sync_lag_ms_max'])} ms  (n={n['sync_lag_count']:,})",
        ),
        (
            "  of which: ack -> seen",
            f"p50 {_v(n['commit_to_seen_ms_p50'])} ms; seen -> written p50 "
            f"{_v(n['seen_to_written_ms_p50'])} ms, p99 {_v(n['seen_to_written_ms_p99'])} ms",
        ),
        (
            "every source commit -> target",
            f"p50 {_v(n['staleness_ms_p50'])} ms  p99 {_v(n['staleness_ms_p99'])} ms  "
            f"max {_v(n['staleness_ms_max'])} ms  (n={n['staleness_count']:,}, "
            f"{n['staleness_never_reached']} never reached)",
        ),
        (
            "offsetsync's lag histogram",
            f"p50 ~{_v(n['offsetsync_lag_seconds_p50_estimate'])} s  p99 "
            f"~{_v(n['offsetsync_lag_seconds_p99_estimate'])} s (seen -> committed, "
            f"n={n['offsetsync_lag_observations']:,}, bucket estimates)",
        ),
        (
            "cycles",
            f"{n['offsetsync_cycles']}, mean {_v(n['offsetsync_cycle_seconds_mean'])} s, "
            f"{n['offsetsync_cycle_failures']} failed; groups at the end: {states or '-'}",
        ),
        (
            "offsetsync CPU",
            f"{n['offsetsync_cpu_cores']} cores (with its offset fetch processes), "
            f"{_v(n['offsetsync_cpu_ms_per_group_per_cycle'])} ms per group per cycle",
        ),
        (
            "offsetsync requests/s",
            f"source {n['requests_per_second_source']}  target {n['requests_per_second_target']}",
        ),
    ]
