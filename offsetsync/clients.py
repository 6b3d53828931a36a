"""The Kafka clients one sync cycle uses, made together so that they can be made anew.

After a broker restart, librdkafka's admin client can go on timing out every consumer-group
request to that cluster for as long as it lives, while a new client answers at once (seen here
on Kafka 4.3.1; librdkafka #4605 reports the same, with this workaround). The sync loop
therefore replaces all of them after a run of failed cycles.

The groups of each cluster are asked through admin clients of their own, which ClusterGroups
replaces by itself whenever a request to a group's coordinator goes unanswered (librdkafka
#4605: offsetsync.admin_session), and their offsets are fetched by a process of their own, which
a moving coordinator may crash (librdkafka #5040: offsetsync.offset_fetch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from offsetsync.admin_session import GROUP_CONNECTIONS
from offsetsync.groups import ClusterGroups
from offsetsync.metrics import OffsetSyncMetrics
from offsetsync.offset_fetch import LogSetup, OffsetFetchProcess
from offsetsync.reading import ClusterReader
from runtime import ClusterSettings, Settings, admin_client


@dataclass(frozen=True, slots=True)
class SyncClients:
    source_admin: AdminClient
    target_admin: AdminClient
    source_groups: ClusterGroups
    target_groups: ClusterGroups
    source_reader: ClusterReader
    destination_reader: ClusterReader

    def serve_callbacks(self) -> None:
        # Every client's statistics (the requests metric) are queued until served; unserved for
        # days they would grow without bound.
        self.source_admin.poll(0)
        self.target_admin.poll(0)
        self.source_groups.serve_callbacks()
        self.target_groups.serve_callbacks()
        self.source_reader.serve_callbacks()
        self.destination_reader.serve_callbacks()

    def close(self) -> None:
        self.source_reader.close()
        self.destination_reader.close()
        self.source_groups.close()
        self.target_groups.close()


def connect(settings: Settings, metrics: OffsetSyncMetrics) -> SyncClients:
    logs = LogSetup(settings.log_level, "offsetsync", json=settings.log_format == "json")
    source_admin, target_admin = (
        admin_client(
            cluster,
            **{"statistics.interval.ms": 1000, "stats_cb": metrics.request_counter(name)},
        )
        for name, cluster in (("source", settings.source), ("target", settings.destination))
    )
    return SyncClients(
        source_admin,
        target_admin,
        _groups(settings.source, lambda: metrics.request_counter("source"), logs),
        _groups(settings.destination, lambda: metrics.request_counter("target"), logs),
        ClusterReader(
            settings.source.client_config(),
            source_admin,
            cluster="source",
            stats_cb=metrics.request_counter("source"),
        ),
        ClusterReader(
            settings.destination.client_config(),
            target_admin,
            cluster="target",
            stats_cb=metrics.request_counter("target"),
        ),
    )


def _groups(
    cluster: ClusterSettings, new_counter: Callable[[], Callable[[str], None]], logs: LogSetup
) -> ClusterGroups:
    # The fetching process's requests are not in the requests metric: its statistics stay in
    # that process.
    fetch = OffsetFetchProcess(cluster.client_config(), logs)
    return ClusterGroups(
        _admin_maker(cluster, new_counter),
        cluster.client_config(),
        fetch,
        connections=GROUP_CONNECTIONS,
    )


def _admin_maker(
    cluster: ClusterSettings, new_counter: Callable[[], Callable[[str], None]]
) -> Callable[[], AdminClient]:
    """Makes admin clients of ``cluster``, each counted by a ``stats_cb`` of its own
    (``new_counter``): their statistics' totals are each client's, and several live at once."""
    return lambda: admin_client(
        cluster, **{"statistics.interval.ms": 1000, "stats_cb": new_counter()}
    )
