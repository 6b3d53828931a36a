"""`exactly deduplicator` / `python -m deduplicator`: stage 2 as a process, configured by the
environment only. Exit status: 0 after a drain (SIGTERM), 2 for bad configuration, 1 for a
fatal error such as being fenced (the orchestrator restarts it), 3 after a drain to start again
with renewed credential files (runtime/credential_files.py)."""

from __future__ import annotations

import sys
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from deduplicator.errors import DeduplicatorError
from deduplicator.layout import SHARED_PARTITIONS, ChangelogLayout, changelog_layout
from deduplicator.loop import Deduplicator
from deduplicator.metrics import DeduplicatorMetrics
from runtime import GracefulShutdown, Health, Settings, admin_client, get_logger
from runtime.credential_files import DESTINATION
from runtime.liveness import Heartbeat
from runtime.role import freeze_startup_garbage, run_role
from runtime.topics import call_once_known, cluster_metadata, ensure_topic

log = get_logger("deduplicator")

_STAGING_WAIT_S = 600.0


def main() -> None:
    sys.exit(run())


def run() -> int:
    metrics = DeduplicatorMetrics()

    def work(
        settings: Settings, health: Health, shutdown: GracefulShutdown, heartbeat: Heartbeat
    ) -> None:
        admin = admin_client(settings.destination)
        partitions = _await_staging(admin, settings.names.staging, shutdown)
        if partitions is None:
            return
        changelog = _ensure_changelog(admin, settings, partitions)
        deadletter = settings.names.deadletter
        ensure_topic(admin, NewTopic(deadletter, 1, -1))
        del admin  # start-up only: unpolled, its error callbacks would queue for the whole run
        deduplicator = Deduplicator(
            settings,
            settings.identity,
            changelog,
            deadletter,
            metrics,
            lambda: shutdown.requested,
            heartbeat.beat,
            lambda: shutdown.exit_status,
        )
        health.set_ready(True)
        log.info("deduplicator started", flow=settings.flow, staging=settings.names.staging)
        freeze_startup_garbage()
        with heartbeat:
            deduplicator.run()
        log.info("deduplicator counts", **_totals(metrics))

    return run_role(
        "deduplicator", work, registry=metrics.registry, member=True, clusters=(DESTINATION,)
    )


def _totals(metrics: DeduplicatorMetrics) -> dict[str, Any]:  # log fields: counts
    """This process's lifetime counts, for its last log line."""
    totals: dict[str, int] = {}
    for family in metrics.registry.collect():
        if family.type == "counter" and family.name != "exactly_deduplicator_client_errors":
            name = family.name.removeprefix("exactly_deduplicator_")
            totals[name] = int(sum(s.value for s in family.samples if s.name.endswith("_total")))
    return totals


def _ensure_changelog(admin: AdminClient, settings: Settings, partitions: int) -> ChangelogLayout:
    """The flow's changelog, made with one partition if it does not exist; one that exists
    keeps its layout (deduplicator/layout.py)."""
    topic = settings.names.changelog
    ensure_topic(
        admin, NewTopic(topic, SHARED_PARTITIONS, -1, config={"cleanup.policy": "compact"})
    )

    def partition_count() -> int:
        found = cluster_metadata(admin, topic).topics.get(topic)
        if found is not None and found.partitions:  # the count, even with a leader moving
            return len(found.partitions)
        raise KafkaException(
            found.error
            if found is not None and found.error is not None
            else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        )

    # Asked until known, never guessed: state written in the wrong layout is lost to the
    # restores that read the other (records copied twice). A broker that has not learnt of the
    # topic just created is waited for (runtime.topics.call_once_known).
    count = call_once_known(partition_count, topic)
    return changelog_layout(topic, count, settings.names.staging, partitions)


def _await_staging(admin: AdminClient, staging: str, shutdown: GracefulShutdown) -> int | None:
    """The staging topic's partition count, once stage 1 has created it."""
    deadline = time.monotonic() + _STAGING_WAIT_S
    said = False
    while not shutdown.requested:
        topic = cluster_metadata(admin).topics.get(staging)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        if not said:
            log.info("waiting for the staging topic (stage 1 creates it)", topic=staging)
            said = True
        if time.monotonic() > deadline:
            raise DeduplicatorError(
                f"staging topic {staging} did not appear in {_STAGING_WAIT_S} s"
            )
        shutdown.wait(0.2)  # stage 1 creates it as it starts: records flow within a poll of it
    return None
