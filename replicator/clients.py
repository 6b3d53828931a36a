"""Stage 1's two Kafka clients, configured for its invariants (docs/design.md §4), and how their
errors are reported."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError

from replicator.metrics import ReplicatorMetrics
from replicator.topics import StagingTopic
from runtime import LIBRDKAFKA_LOG, PREFETCH_DEFAULTS, Settings, get_logger, log_client_error
from runtime.role import on_consumer_group_protocol, static_membership

log = get_logger(__name__)

ErrorCallback = Callable[[KafkaError], None]

# Bytes per source partition in one fetch: librdkafka's 1 MiB left stage 1 waiting for data
# 20-30 % of the time at full speed (py-spy); 8 MiB copied 100 B records about 10 % faster
# (bench/pipeline_vs_mirrormaker.py, which gives its baselines the same). PREFETCH_DEFAULTS
# (queued.max.messages.kbytes 32 MiB, which also caps fetch.max.bytes unless the user sets it)
# still bound what one consumer holds.
SOURCE_FETCH_PARTITION_BYTES = 8 * 1024 * 1024


def consumer_config(settings: Settings, on_error: ErrorCallback) -> dict[str, object]:
    properties = settings.source.client_config()
    # Incremental assignment either way (the loop assigns and revokes incrementally): the
    # cooperative assignor under the classic protocol; the consumer group protocol (KIP-848)
    # assigns on the broker and refuses a client-side assignor at the consumer's creation.
    assignor = (
        {}
        if on_consumer_group_protocol(properties)
        else {"partition.assignment.strategy": "cooperative-sticky"}
    )
    return {
        "max.partition.fetch.bytes": SOURCE_FETCH_PARTITION_BYTES,  # the user's value wins
        **PREFETCH_DEFAULTS,
        **properties,
        "group.id": settings.names.replicator_group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Aborted source records never reach staging.
        "isolation.level": "read_committed",
        # Invariant 3 / "say it, don't skip it": a committed offset that fell behind
        # retention surfaces as an error we handle by policy, never as a silent reset.
        # Partitions never committed start where REPLICATION_START_FROM says (on_assign).
        "auto.offset.reset": "error",
        **assignor,
        "error_cb": on_error,
        "logger": LIBRDKAFKA_LOG,
        **static_membership(settings, "replicator"),
    }


def producer_config(
    settings: Settings, staging: StagingTopic, on_error: ErrorCallback
) -> dict[str, object]:
    return {
        # Not an invariant's: the user's value wins, as for stage 2's producer. 20 ms instead
        # saved the target broker nothing at 20,000 records/s (docs/performance.md).
        "linger.ms": 5,
        **settings.destination.client_config(),
        # Invariant 2: an idempotent producer that treats any gap as fatal, and never gives up
        # on a message by itself (the stall watchdog decides instead).
        "enable.idempotence": True,
        "enable.gapless.guarantee": True,
        "acks": "all",
        "message.timeout.ms": 0,
        "max.in.flight.requests.per.connection": 5,
        "compression.type": settings.staging_compression,
        "message.max.bytes": staging.max_message_bytes,
        "error_cb": on_error,
        "logger": LIBRDKAFKA_LOG,
    }


def report_client_error(metrics: ReplicatorMetrics, cluster: str, error: KafkaError) -> None:
    """Every error counted; a broker out of reach logged once per broker with a count, not once
    per attempt (runtime.log_client_error)."""
    metrics.client_errors.labels(cluster, error.name()).inc()
    log_client_error(log, error, cluster=cluster, fatal=error.fatal())
