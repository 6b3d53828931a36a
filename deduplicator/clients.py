"""Stage 2's two Kafka clients on the target, configured for its invariants (docs/design.md §4),
and how their errors are reported."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError

from deduplicator.limits import TRANSACTION_TIMEOUT_MS
from deduplicator.metrics import DeduplicatorMetrics
from runtime import LIBRDKAFKA_LOG, PREFETCH_DEFAULTS, Settings, get_logger, log_client_error
from runtime.role import on_consumer_group_protocol, static_membership

# The loop's logger: these lines kept the name they had when the loop configured its clients.
log = get_logger("deduplicator.loop")

ErrorCallback = Callable[[KafkaError], None]

MAX_RECORD_BYTES = 64 * 1024 * 1024

# A commit's AddOffsetsToTxn, and the next transaction's first AddPartitionsToTxn, often reach
# the coordinator while it still writes the previous commit's markers: CONCURRENT_TRANSACTIONS,
# retried by librdkafka after retry.backoff.ms, doubled on each retry up to retry.backoff.max.ms.
# Its 100 ms .. 1 s put a 100-120 ms wait into many commits at 20,000 records/s, and when the
# coordinator is slow for long, 100+200+400+800 ms waits: the commit's wait grows past the
# coordinator's own. Java's producer retries this error after 20 ms (KAFKA-5477). Measured
# (issue 35's outside method, docs/performance.md): p50 at 20,000 records/s 151/158/214 ms with
# librdkafka's values, 116/106/137 ms with these. The user's values win.
TRANSACTION_RETRY_DEFAULTS: dict[str, object] = {
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 100,
}


def consumer_config(settings: Settings, on_error: ErrorCallback) -> dict[str, object]:
    """Stage 2's staging consumer."""
    return {
        **PREFETCH_DEFAULTS,  # the user's values win
        **settings.destination.client_config(),
        "group.id": settings.names.deduplicator_group,
        "enable.auto.commit": False,
        # Invariant 6: only committed staging records; never an aborted one.
        "isolation.level": "read_committed",
        # Invariant 7: a position behind staging's retention stops its partition, never jumps
        # (deduplicator/stops.py); a partition never committed starts at offset 0 there.
        "auto.offset.reset": "error",
        "logger": LIBRDKAFKA_LOG,
        "error_cb": on_error,
        **static_membership(settings, "deduplicator"),
    }


def cooperative(config: dict[str, object]) -> bool:
    """Whether a consumer of ``config`` changes its assignment incrementally: the consumer group
    protocol (KIP-848), or a cooperative assignor a user configured; else eagerly (the default:
    every rebalance hands over the whole assignment)."""
    strategy = str(config.get("partition.assignment.strategy", ""))
    return on_consumer_group_protocol(config) or "cooperative" in strategy


def producer_config(
    settings: Settings, transactional_id: str, on_error: ErrorCallback
) -> dict[str, object]:
    """Stage 2's transactional producer (invariant 6: a stable id per instance)."""
    return {
        **TRANSACTION_RETRY_DEFAULTS,  # the user's values win
        "linger.ms": 5,
        **settings.destination.client_config(),
        "transactional.id": transactional_id,
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        # A destination record is as large as its source allowed (each destination topic's
        # max.message.bytes is its source's, or 16 MiB if larger: replicator/topics.py); the
        # broker, not this client, enforces each topic's limit.
        "message.max.bytes": MAX_RECORD_BYTES,
        "logger": LIBRDKAFKA_LOG,
        "error_cb": on_error,
    }


def report_client_error(metrics: DeduplicatorMetrics, error: KafkaError) -> None:
    """Every error counted; a broker out of reach logged once per broker with a count, not
    once per attempt (runtime.log_client_error)."""
    metrics.client_errors.labels(error.name()).inc()
    log_client_error(log, error)
