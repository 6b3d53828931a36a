"""`exactly replicator` / `python -m replicator`: stage 1 as a process, configured by the
environment only. Exit status: 0 after a drain (SIGTERM), 2 for bad configuration, 1 for a
fatal error (the orchestrator restarts it)."""

from __future__ import annotations

import logging
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from replicator.errors import ReplicatorError
from replicator.loop import Replicator
from replicator.metrics import ReplicatorMetrics
from replicator.topics import ensure_staging
from runtime import (
    ConfigError,
    load_settings,
)

log = logging.getLogger("replicator")

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
    from runtime.http import Health, serve_http
    from runtime.logs import configure_logging
    from runtime.shutdown import GracefulShutdown

    configure_logging(settings.log_level, "replicator")
    metrics = ReplicatorMetrics()
    health = Health()
    server = serve_http(settings.metrics_port, registry=metrics.registry, health=health)
    try:
        with GracefulShutdown() as shutdown:
            staging = ensure_staging(AdminClient(settings.destination.client_config()), settings)
            replicator = Replicator(settings, staging, metrics, lambda: shutdown.requested)
            health.set_ready(True)
            log.info(
                "replicator started flow=%s staging=%s lanes=%d",
                settings.flow,
                staging.name,
                staging.partitions,
            )
            replicator.run()
    except (ReplicatorError, KafkaException) as exc:
        # Fatal: say what, exit non-zero, and let the orchestrator restart us.
        log.error("replicator stopped by a fatal error: %s", exc)
        return EXIT_FATAL
    finally:
        if server is not None:
            server.close()
    log.info("replicator stopped cleanly")
    return 0
