"""`exactly replicator` / `python -m replicator`: stage 1 as a process, configured by the
environment only. Exit status: 0 after a drain (SIGTERM), 2 for bad configuration, 1 for a
fatal error (the orchestrator restarts it)."""

from __future__ import annotations

import gc
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from replicator.errors import ReplicatorError
from replicator.flowrecords import FlowRecords
from replicator.loop import Replicator
from replicator.metrics import ReplicatorMetrics
from replicator.topics import ensure_staging
from runtime import (
    ConfigError,
    GracefulShutdown,
    Health,
    HttpServerError,
    configure_logging,
    get_logger,
    load_settings,
    serve_http,
)
from runtime.liveness import Heartbeat

log = get_logger("replicator")

# Longer than anything the loop may legitimately wait for (admin calls, rebalance flushes).
LOOP_SILENCE_S = 120.0
EXIT_FATAL = 1
EXIT_CONFIG = 2


def main() -> None:
    sys.exit(run())


def run() -> int:
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"exactly replicator: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, "replicator")
    metrics = ReplicatorMetrics()
    health = Health()
    server = None
    try:
        server = serve_http(settings.metrics_port, registry=metrics.registry, health=health)
        with GracefulShutdown() as shutdown:
            records = FlowRecords(settings)
            admin = AdminClient(settings.destination.client_config())
            staging = ensure_staging(admin, settings, records)
            heartbeat = Heartbeat(health, LOOP_SILENCE_S)
            replicator = Replicator(
                settings, staging, records, metrics, lambda: shutdown.requested, heartbeat.beat
            )
            health.set_ready(True)
            log.info(
                "replicator started",
                flow=settings.flow,
                staging=staging.name,
                lanes=staging.partitions,
            )
            # DESIGN.md §10: keep the collector out of the hot loop. Everything made during
            # start-up is long-lived; freezing it spares every collection from scanning it, and
            # the loop's own garbage (message rows, envelopes) is freed by reference counting.
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 50, 100)
            with heartbeat:
                replicator.run()
    except (ReplicatorError, KafkaException, HttpServerError) as exc:
        # Fatal: say what, exit non-zero, and let the orchestrator restart us.
        log.error("replicator stopped by a fatal error", error=str(exc))
        return EXIT_FATAL
    finally:
        if server is not None:
            server.close()
    log.info("replicator stopped cleanly")
    return 0
