"""Offset sync's Prometheus metrics, in a registry of its own (one per process)."""

from __future__ import annotations

import json
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Seconds from a source commit seen to its translation committed on the target: one cycle when
# healthy (the interval, 5 s by default), more while replication catches up.
_LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 30, 60, 120, 300)
_CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

GROUP_STATES = (
    "synced",
    "waiting",
    "active_on_target",
    "behind_retention",
    "target_unknown",
    "unavailable",
    "commit_refused",
)


class OffsetSyncMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.groups = Gauge(
            "exactly_offsetsync_groups",
            "Selected source groups by state after the last cycle: synced (every translated "
            "offset is on the target), waiting (a partition waits for replication), "
            "active_on_target (members there: not moved, checkpointed), behind_retention (a "
            "partition's committed offset is below the source's log start), target_unknown "
            "(the target did not tell where the group is on a partition: not moved), "
            "unavailable (a source or destination partition could not be read: left for the "
            "next cycle), commit_refused (the target refused or did not answer a commit of it "
            "for a reason other than members there: not moved, the next cycle tries again).",
            ["state"],
            registry=r,
        )
        self.offsets_committed = Counter(
            "exactly_offsetsync_offsets_committed",
            "Partition offsets moved forward on the target.",
            registry=r,
        )
        self.lag = Histogram(
            "exactly_offsetsync_lag_seconds",
            "A source commit first seen to its translation committed on the target.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.checkpoints = Counter(
            "exactly_offsetsync_checkpoints",
            "Checkpoint records written, by whether the offset was committed on the target.",
            ["committed"],
            registry=r,
        )
        self.checkpoint_failures = Counter(
            "exactly_offsetsync_checkpoint_failures",
            "Checkpoint records the target did not acknowledge.",
            registry=r,
        )
        self.offsets_recommitted = Counter(
            "exactly_offsetsync_offsets_recommitted",
            "Partition offsets committed again unchanged: gone from the target (deleted, or "
            "expired by its offsets.retention.minutes) or renewed before they expire there.",
            ["reason"],
            registry=r,
        )
        self.not_moved_back = Counter(
            "exactly_offsetsync_not_moved_back",
            "Partition offsets left as they are because the target's is already further.",
            registry=r,
        )
        self.passed_back = Counter(
            "exactly_offsetsync_passed_back",
            "Group partitions whose source offset an offset sync committed (a flow into the "
            "source, active-active): never translated back, so opposite flows never fight.",
            registry=r,
        )
        self.target_unknown = Counter(
            "exactly_offsetsync_target_unknown",
            "Partition offsets not committed in a cycle because the target did not tell where "
            "the group is there (not listed and not answered, a transaction holding its offsets "
            "open): never committed over an offset we do not know.",
            registry=r,
        )
        self.unavailable = Counter(
            "exactly_offsetsync_partitions_unavailable",
            "Group partition offsets not translated in a cycle because their source or "
            "destination partition could not be read (no leader, or a retriable error of its "
            "own): left for the next cycle, the other partitions translated.",
            ["cluster"],
            registry=r,
        )
        self.topics_left_out = Gauge(
            "exactly_offsetsync_topics_left_out",
            "Source topics whose groups' offsets are not translated because stage 1 left them "
            "out (their destination name collides with another topic's): the destination "
            "holds the other topic's copies.",
            registry=r,
        )
        self.topics_not_taken_in = Gauge(
            "exactly_offsetsync_topics_not_taken_in",
            "Source topics a selected group has offsets on that stage 1 has not taken in (no "
            "topic id in the flow's meta topic): their groups' offsets are not translated until "
            "it has. Lasting: stage 1 not running, or offset sync not granted the meta topic.",
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "exactly_offsetsync_cycle_seconds",
            "Time of one sync cycle: list, translate, commit.",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.cycle_failures = Counter(
            "exactly_offsetsync_cycle_failures",
            "Cycles that ended in a retriable error (nothing committed; the next one retries).",
            registry=r,
        )
        self.reconnects = Counter(
            "exactly_offsetsync_reconnects",
            "Times the Kafka clients were made anew after failed cycles in a row.",
            registry=r,
        )
        self.requests = Counter(
            "exactly_offsetsync_requests",
            "Requests sent to each cluster by this process's Kafka clients (librdkafka "
            "statistics, every second).",
            ["cluster"],
            registry=r,
        )
        for state in GROUP_STATES:
            self.groups.labels(state)
        for cluster in ("source", "target"):
            self.requests.labels(cluster)
            self.unavailable.labels(cluster)

    def request_counter(self, cluster: str) -> Callable[[str], None]:
        """A librdkafka ``stats_cb`` for one client: adds the requests it sent since its last
        statistics (their ``tx`` totals are per client, since it started) to ``cluster``'s."""
        counter = self.requests.labels(cluster)
        sent = 0

        def on_stats(stats_json: str) -> None:
            nonlocal sent
            brokers = json.loads(stats_json).get("brokers", {})
            total = sum(broker.get("tx", 0) for broker in brokers.values())
            if total < sent:
                sent = 0  # a new client behind the same callback (ClusterReader replaced one)
            if total > sent:
                counter.inc(total - sent)
                sent = total

        return on_stats
