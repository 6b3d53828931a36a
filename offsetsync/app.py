"""`exactly offsetsync` / `python -m offsetsync`: consumer-group offsets source -> target as a
process, configured by the environment only. Exit status: 0 after SIGTERM (the cycle in
progress finishes), 2 for bad configuration, 1 for a fatal error (credentials, ACLs), 3 after
the cycle in progress when renewed credential files are to be loaded
(runtime/credential_files.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from offsetsync.checkpoints import CheckpointWriter
from offsetsync.clients import SyncClients, connect
from offsetsync.loop import GROUPS_PER_STEP, RECOMMIT_AFTER_S, RECONFIRM_AFTER_S, OffsetSync
from offsetsync.metrics import OffsetSyncMetrics
from runtime import ConfigError, GracefulShutdown, Health, Settings, call_retrying, get_logger
from runtime.credential_files import DESTINATION, SOURCE
from runtime.liveness import Heartbeat
from runtime.role import run_role
from runtime.settings import variable_name
from runtime.topics import admin_result, waiting_on

log = get_logger("offsetsync")

_START_DEADLINE_S = 60.0
_TIMEOUT_S = 30.0
_ATTEMPT_S = 10.0  # one start-up request; a refusal of the credentials is looked for each second


def main() -> None:
    sys.exit(run())


def run() -> int:
    metrics = OffsetSyncMetrics()

    def work(
        settings: Settings, health: Health, shutdown: GracefulShutdown, heartbeat: Heartbeat
    ) -> None:
        _require_selection(settings)
        sync, checkpoints = assemble(
            settings,
            metrics,
            lambda: connect(settings, metrics),
            should_stop=lambda: shutdown.requested,
            wait=shutdown.wait,
            beat=heartbeat.beat,
        )
        health.set_ready(True)
        log.info(
            "offsetsync started",
            flow=settings.flow,
            interval_ms=settings.sync_interval_ms,
            checkpoints=settings.names.checkpoints,
        )
        try:
            with heartbeat:
                sync.run()
        finally:
            sync.close()
            checkpoints.close()

    return run_role("offsetsync", work, registry=metrics.registry, clusters=(SOURCE, DESTINATION))


def assemble(
    settings: Settings,
    metrics: OffsetSyncMetrics,
    connect_clients: Callable[[], SyncClients],
    *,
    should_stop: Callable[[], bool],
    wait: Callable[[float], object],
    beat: Callable[[], None] = lambda: None,
    groups_per_step: int = GROUPS_PER_STEP,
    reconfirm_after_s: float = RECONFIRM_AFTER_S,
    recommit_after_s: float = RECOMMIT_AFTER_S,
) -> tuple[OffsetSync, CheckpointWriter]:
    """Offset sync's loop over clients from ``connect_clients`` (which also makes them anew
    after failed cycles), with its checkpoint writer; both to be closed by the caller."""
    clients = connect_clients()
    # The provenance header names the source by its cluster id: a copy from another cluster
    # (an aggregated topic) is never taken for this one's.
    source_cluster_id = call_retrying(
        lambda: (
            admin_result(
                clients.source_admin.describe_cluster(request_timeout=_ATTEMPT_S),
                _ATTEMPT_S + 2,
                clients.source_admin,  # a refused password named in a second, not after 12
            ).cluster_id
        ),
        deadline_s=_START_DEADLINE_S,
        on_retry=waiting_on(clients.source_admin),
    )
    checkpoints = CheckpointWriter(
        settings.destination.client_config(),
        clients.target_admin,
        settings.names.checkpoints,
        lambda error: _checkpoint_failed(metrics, error),
        stats_cb=metrics.request_counter("target"),
    )
    sync = OffsetSync(
        settings,
        metrics,
        clients=clients,
        reconnect=connect_clients,
        checkpoints=checkpoints,
        source_cluster_id=source_cluster_id,
        should_stop=should_stop,
        wait=wait,
        beat=beat,
        groups_per_step=groups_per_step,
        reconfirm_after_s=reconfirm_after_s,
        recommit_after_s=recommit_after_s,
    )
    return sync, checkpoints


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


def _checkpoint_failed(metrics: OffsetSyncMetrics, error: object) -> None:
    metrics.checkpoint_failures.inc()
    log.warning("checkpoint record not written", error=str(error))
