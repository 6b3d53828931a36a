"""Stage 2's Prometheus metrics, in a registry of its own (one per process), and what a commit
and a restore observe into them."""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from deduplicator.transaction import Tally

# Seconds: a commit or a restore takes milliseconds when healthy and up to the transaction
# timeout when a broker is away; the buckets resolve both ends.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# Source timestamp to commit on the target. Old CreateTimes (a backfill) land in +Inf, which is
# the truth: the record is that old.
_AGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class DeduplicatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records_written = Counter(
            "exactly_deduplicator_records_written",
            "Original records written to destination topics, counted when their transaction "
            "commits.",
            ["topic"],
            registry=r,
        )
        self.duplicates = Counter(
            "exactly_deduplicator_duplicates_dropped",
            "Staging records dropped because their source offset was already written.",
            registry=r,
        )
        self.orphans = Counter(
            "exactly_deduplicator_orphans",
            "Envelopes not written because they follow a stage-1 gap (healed by the resend).",
            registry=r,
        )
        self.stale = Counter(
            "exactly_deduplicator_stale_records",
            "Records of a deleted and recreated source topic's old incarnation, dropped.",
            registry=r,
        )
        self.dead_letters = Counter(
            "exactly_deduplicator_dead_letters",
            "Staging records copied to the dead-letter topic (not an envelope of this flow).",
            registry=r,
        )
        self.restamped = Counter(
            "exactly_deduplicator_records_restamped",
            "Records stamped 0 at the source, written with the time of writing instead: "
            "librdkafka takes a timestamp of 0 for now.",
            registry=r,
        )
        self.transactions = Counter(
            "exactly_deduplicator_transactions",
            "Transactions ended, by outcome (committed, aborted).",
            ["outcome"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            "exactly_deduplicator_commit_seconds",
            "Time of the commit protocol: changelog, offsets, flush, commit, RocksDB.",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.call_seconds = Histogram(
            "exactly_deduplicator_transaction_call_seconds",
            "Time of each transactional call, its retries included, by call "
            "(init_transactions, send_offsets_to_transaction, commit_transaction), and of a "
            "commit's flush (flush: every record of the transaction acknowledged).",
            ["call"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.restore_seconds = Histogram(
            "exactly_deduplicator_restore_seconds",
            "Time to bring one staging partition's state up to date from the changelog "
            "(a shared changelog: the one read for all the partitions of an assignment, "
            "observed once for each).",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.restored_records = Counter(
            "exactly_deduplicator_restored_changelog_records",
            "Changelog records read back into RocksDB on assignment.",
            registry=r,
        )
        self.record_age = Histogram(
            "exactly_deduplicator_record_age_seconds",
            "Source record timestamp to its commit on the destination (last record of each "
            "envelope).",
            buckets=_AGE_BUCKETS,
            registry=r,
        )
        self.backlog = Gauge(
            "exactly_deduplicator_backlog_records",
            "Staging records not committed by stage 2 yet (the partition's high watermark - "
            "its committed offset), by staging partition.",
            ["partition"],
            registry=r,
        )
        self.partitions_stopped = Gauge(
            "exactly_deduplicator_partitions_stopped",
            "1 for each staging partition this instance stopped by policy, by reason "
            "(data_loss: envelopes deleted before stage 2 read them, or its committed offset "
            "past the log's end; refused: the destination refuses a record of its envelopes "
            "for good); it reads nothing more of it until an operator acts.",
            ["partition", "reason"],
            registry=r,
        )
        self.staging_records_lost = Counter(
            "exactly_deduplicator_staging_records_lost",
            "Staging offsets deleted (retention, delete-records) before stage 2 read them, by "
            "staging partition, counted each time a stop finds them; not counted for a "
            "partition stage 2 has no commit on, where it cannot tell.",
            ["partition"],
            registry=r,
        )
        self.assigned_partitions = Gauge(
            "exactly_deduplicator_assigned_partitions",
            "Staging partitions this instance owns.",
            registry=r,
        )
        self.client_errors = Counter(
            "exactly_deduplicator_client_errors",
            "Errors reported by the Kafka clients, by code.",
            ["code"],
            registry=r,
        )

    def count_committed(self, tally: Tally) -> None:
        """A transaction committed what ``tally`` says it wrote and dropped. Called as soon as
        the commit returns: its records become readable only once the coordinator has written
        its markers, after that."""
        for topic, records in tally.written.items():
            self.records_written.labels(topic).inc(records)
        self.duplicates.inc(tally.duplicates)
        self.stale.inc(tally.stale)
        self.orphans.inc(tally.orphans)
        self.dead_letters.inc(tally.dead_letters)
        self.restamped.inc(tally.restamped)

    def observe_commit(
        self, started: float, committed_at: float, timestamps: Iterable[int]
    ) -> None:
        """A transaction committed: its commit protocol begun at ``started`` (time.monotonic()),
        committed at ``committed_at`` (time.time()); ``timestamps``: its records' source
        timestamps (ms)."""
        self.transactions.labels("committed").inc()
        self.commit_seconds.observe(time.monotonic() - started)
        now_ms = committed_at * 1000
        for timestamp in timestamps:
            self.record_age.observe(max(0.0, (now_ms - timestamp) / 1000))

    def observe_call(self, call: str, seconds: float) -> None:
        """One transactional call (or a commit's flush) succeeded after ``seconds``."""
        self.call_seconds.labels(call).observe(seconds)

    def observe_restore(self, seconds: float, records: int) -> None:
        """One staging partition's state brought up to date from the changelog (`seconds`: of
        the read that did it)."""
        self.restore_seconds.observe(seconds)
        self.restored_records.inc(records)
