"""`exactly deduplicator` / `python -m deduplicator`: stage 2 as a process, configured by the
environment only. Exit status: 0 after a drain (SIGTERM), 2 for bad configuration, 1 for a
fatal error such as being fenced (the orchestrator restarts it)."""

from __future__ import annotations

import socket
import sys
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from deduplicator.errors import DeduplicatorError
from deduplicator.loop import Deduplicator
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

log = get_logger("deduplicator")

LOOP_SILENCE_S = 120.0
EXIT_FATAL = 1
EXIT_CONFIG = 2
_STAGING_WAIT_S = 600.0
_TIMEOUT_S = 30.0


def main() -> None:
    sys.exit(run())


def run() -> int:
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"exactly deduplicator: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, "deduplicator")
    health = Health()
    server = None
    try:
        server = serve_http(settings.metrics_port, registry=CollectorRegistry(), health=health)
        with GracefulShutdown() as shutdown:
            admin = AdminClient(settings.destination.client_config())
            partitions = _await_staging(admin, settings.staging_topic_name, shutdown)
            if partitions is None:
                return 0
            changelog = f"__exactly.{settings.flow}.changelog"
            deadletter = f"__exactly.{settings.flow}.deadletter"
            _ensure(
                admin, NewTopic(changelog, partitions, -1, config={"cleanup.policy": "compact"})
            )
            _ensure(admin, NewTopic(deadletter, 1, -1))
            heartbeat = Heartbeat(health, LOOP_SILENCE_S)
            deduplicator = Deduplicator(
                settings,
                settings.instance_id or socket.gethostname(),
                changelog,
                deadletter,
                lambda: shutdown.requested,
                heartbeat.beat,
            )
            health.set_ready(True)
            log.info(
                "deduplicator started", flow=settings.flow, staging=settings.staging_topic_name
            )
            with heartbeat:
                deduplicator.run()
            log.info("deduplicator counts", **deduplicator.counts)
    except (DeduplicatorError, KafkaException, HttpServerError) as exc:
        log.error("deduplicator stopped by a fatal error", error=str(exc))
        return EXIT_FATAL
    finally:
        if server is not None:
            server.close()
    log.info("deduplicator stopped cleanly")
    return 0


def _await_staging(admin: AdminClient, staging: str, shutdown: GracefulShutdown) -> int | None:
    """The staging topic's partition count, once stage 1 has created it."""
    deadline = time.monotonic() + _STAGING_WAIT_S
    said = False
    while not shutdown.requested:
        topic = admin.list_topics(timeout=_TIMEOUT_S).topics.get(staging)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        if not said:
            log.info("waiting for the staging topic (stage 1 creates it)", topic=staging)
            said = True
        if time.monotonic() > deadline:
            raise DeduplicatorError(
                f"staging topic {staging} did not appear in {_STAGING_WAIT_S} s"
            )
        shutdown.wait(1.0)
    return None


def _ensure(admin: AdminClient, topic: NewTopic) -> None:
    try:
        admin.create_topics([topic])[topic.topic].result(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + _TIMEOUT_S
    while time.monotonic() < deadline:
        found = admin.list_topics(topic.topic, timeout=_TIMEOUT_S).topics.get(topic.topic)
        if found and found.partitions and all(p.leader >= 0 for p in found.partitions.values()):
            return
        time.sleep(0.1)
    raise DeduplicatorError(f"topic {topic.topic} has no leader for every partition")
