"""`exactly offsetsync` / `python -m offsetsync`: consumer-group offsets source -> target as a
process, configured by the environment only. Exit status: 0 after SIGTERM (the cycle in
progress finishes), 2 for bad configuration, 1 for a fatal error (credentials, ACLs)."""

from __future__ import annotations

import sys

from confluent_kafka.admin import AdminClient

from offsetsync.checkpoints import CheckpointWriter, checkpoints_topic
from offsetsync.errors import OffsetSyncError
from offsetsync.groups import ClusterGroups
from offsetsync.loop import OffsetSync
from offsetsync.metrics import OffsetSyncMetrics
from offsetsync.reading import ClusterReader
from runtime import ConfigError, GracefulShutdown, Health, Settings, call_retrying, get_logger
from runtime.liveness import Heartbeat
from runtime.role import run_role
from runtime.settings import variable_name

log = get_logger("offsetsync")

_START_DEADLINE_S = 60.0
_TIMEOUT_S = 30.0


def main() -> None:
    sys.exit(run())


def run() -> int:
    metrics = OffsetSyncMetrics()

    def work(
        settings: Settings, health: Health, shutdown: GracefulShutdown, heartbeat: Heartbeat
    ) -> None:
        _require_selection(settings)
        source_admin, target_admin = (
            AdminClient(
                {
                    **cluster.client_config(),
                    "statistics.interval.ms": 1000,
                    "stats_cb": metrics.request_counter(name),
                }
            )
            for name, cluster in (("source", settings.source), ("target", settings.destination))
        )
        # The provenance header names the source by its cluster id: a copy from another cluster
        # (an aggregated topic) is never taken for this one's.
        source_cluster_id = call_retrying(
            lambda: source_admin.describe_cluster(request_timeout=_TIMEOUT_S).result().cluster_id,
            deadline_s=_START_DEADLINE_S,
        )
        checkpoints = CheckpointWriter(
            settings.destination.client_config(),
            target_admin,
            checkpoints_topic(settings.flow),
            lambda error: _checkpoint_failed(metrics, error),
            stats_cb=metrics.request_counter("target"),
        )
        source_reader = ClusterReader(
            settings.source.client_config(),
            source_admin,
            stats_cb=metrics.request_counter("source"),
        )
        destination_reader = ClusterReader(
            settings.destination.client_config(),
            target_admin,
            stats_cb=metrics.request_counter("target"),
        )
        sync = OffsetSync(
            settings,
            metrics,
            source=(ClusterGroups(source_admin), source_reader),
            target=(ClusterGroups(target_admin), destination_reader),
            checkpoints=checkpoints,
            source_cluster_id=source_cluster_id,
            serve_callbacks=lambda: _serve_callbacks(
                source_admin, target_admin, source_reader, destination_reader, checkpoints
            ),
        )
        health.set_ready(True)
        log.info(
            "offsetsync started",
            flow=settings.flow,
            interval_ms=settings.sync_interval_ms,
            checkpoints=checkpoints_topic(settings.flow),
        )
        try:
            with heartbeat:
                sync.run(lambda: shutdown.requested, shutdown.wait, heartbeat.beat)
        finally:
            source_reader.close()
            destination_reader.close()
            checkpoints.close()

    return run_role("offsetsync", work, registry=metrics.registry, fatal=(OffsetSyncError,))


def _require_selection(settings: Settings) -> None:
    """Offset sync with no group or no topic selected would run and never do anything."""
    if not settings.groups_include:
        raise ConfigError(
            variable_name(("groups_include",)),
            "is required by offsetsync: the consumer groups whose offsets it syncs",
        )
    if settings.source.topic is None and not settings.topics_include:
        raise ConfigError(
            variable_name(("topics_include",)),
            f"(or {variable_name(('source', 'topic'))}) is required by offsetsync: the "
            "replicated topics whose offsets it translates",
        )


def _serve_callbacks(
    source_admin: AdminClient,
    target_admin: AdminClient,
    *served: ClusterReader | CheckpointWriter,
) -> None:
    # Every client's statistics (the requests metric) are queued until served; unserved for
    # days they would grow without bound.
    source_admin.poll(0)
    target_admin.poll(0)
    for client in served:
        client.serve_callbacks()


def _checkpoint_failed(metrics: OffsetSyncMetrics, error: object) -> None:
    metrics.checkpoint_failures.inc()
    log.warning("checkpoint record not written", error=str(error))
