"""`exactly deduplicator` / `python -m deduplicator`: stage 2 as a process, configured by the
environment only. Exit status: 0 after a drain (SIGTERM), 2 for bad configuration, 1 for a
fatal error such as being fenced (the orchestrator restarts it), 3 after a drain to start again
with renewed credential files (runtime/credential_files.py)."""

from __future__ import annotations

import sys
import time
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from deduplicator.errors import DeduplicatorError
from deduplicator.loop import Deduplicator
from deduplicator.metrics import DeduplicatorMetrics
from runtime import GracefulShutdown, Health, Settings, admin_client, get_logger
from runtime.credential_files import DESTINATION
from runtime.liveness import Heartbeat
from runtime.role import freeze_startup_garbage, run_role
from runtime.topics import cluster_metadata, ensure_topic

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
        changelog = settings.names.changelog
        deadletter = settings.names.deadletter
        ensure_topic(
            admin, NewTopic(changelog, partitions, -1, config={"cleanup.policy": "compact"})
        )
        _require_co_partitioned(admin, changelog, settings.names.staging, partitions)
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


def _require_co_partitioned(
    admin: AdminClient, changelog: str, staging: str, partitions: int
) -> None:
    """Staging partition p keeps its state in changelog partition p (docs/design.md §3.5). A
    changelog that exists with another partition count (made by hand, or left from a staging
    topic made anew) breaks that: with fewer, some staging partitions have no changelog
    partition to restore from or write to; with more, staging's partitions changed and a
    partition's state would be another's. Stop at start-up, naming both."""
    topic = cluster_metadata(admin).topics.get(changelog)
    found = len(topic.partitions) if topic is not None else partitions
    if found != partitions:
        raise DeduplicatorError(
            f"changelog topic {changelog} has {found} partitions and staging topic {staging} "
            f"{partitions}: stage 2 keeps each staging partition's state in the changelog "
            "partition of the same number. A changelog made before stage 2 made it: delete it "
            "while it holds nothing, or use a new REPLICATION_FLOW"
        )


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
