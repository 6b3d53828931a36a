"""`exactly replicator` / `python -m replicator`: stage 1 as a process, configured by the
environment only. Exit status: 0 after a drain (SIGTERM), 2 for bad configuration, 1 for a
fatal error (the orchestrator restarts it), 3 after a drain to start again with renewed
credential files (runtime/credential_files.py)."""

from __future__ import annotations

import sys

from replicator.flowrecords import FlowRecords
from replicator.loop import Replicator
from replicator.metrics import ReplicatorMetrics
from replicator.topics import ensure_staging
from runtime import GracefulShutdown, Health, Settings, admin_client, get_logger
from runtime.credential_files import DESTINATION, SOURCE
from runtime.liveness import Heartbeat
from runtime.role import freeze_startup_garbage, run_role

log = get_logger("replicator")


def main() -> None:
    sys.exit(run())


def run() -> int:
    metrics = ReplicatorMetrics()

    def work(
        settings: Settings, health: Health, shutdown: GracefulShutdown, heartbeat: Heartbeat
    ) -> None:
        records = FlowRecords(settings)
        staging = ensure_staging(admin_client(settings.destination), settings, records)
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
        freeze_startup_garbage()
        with heartbeat:
            replicator.run()

    return run_role(
        "replicator", work, registry=metrics.registry, member=True, clusters=(SOURCE, DESTINATION)
    )
