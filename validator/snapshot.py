"""What one audit checks, fixed before Spark reads anything: the topic pairs and, per partition,
the offset range on each side (docs/design.md §6).

The range is the end offsets of both sides when the run starts: the destination's first, then the
source's. In that order every record the destination holds in its range was produced on the
source before the source's end was taken, so a record of the source range that the destination
lacks is either missing or still in flight, and never one produced after the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    ListOffsetsResultInfo,
    OffsetSpec,
    ResourceType,
)

from runtime import ConfigError, kafka_error_of
from runtime.settings import ClusterSettings, Settings, destination_names
from validator.errors import InputError

_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition; ``log_start`` is where retention has cut the log."""

    start: int
    end: int
    log_start: int

    @property
    def size(self) -> int:
        """Upper bound of the records in range: markers and aborted records take offsets too."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class TopicPair:
    source_topic: str
    destination_topic: str
    source: Mapping[int, OffsetRange]
    destination: Mapping[int, OffsetRange]
    # A compacted source topic has offsets without records: a destination record from such an
    # offset was compacted away on the source, not invented.
    source_compacted: bool
    # A compacted destination topic loses records too: one whose key has a later record copied
    # there was removed by the destination's cleaner, not lost by the pipeline.
    destination_compacted: bool = False

    @property
    def partitions(self) -> tuple[int, ...]:
        """Every partition number of either side: one missing on a side is a discrepancy."""
        return tuple(sorted(set(self.source) | set(self.destination)))


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    bootstrap_servers: str
    cluster_id: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    source: ClusterInfo
    destination: ClusterInfo
    pairs: tuple[TopicPair, ...]

    @property
    def partition_count(self) -> int:
        return sum(len(pair.partitions) for pair in self.pairs)


@dataclass(frozen=True, slots=True)
class TimeRange:
    """Milliseconds since the epoch, [since, until); None is unbounded (until: the snapshot).

    Applied to both sides with ListOffsets by timestamp: the first offset whose timestamp is at
    or after the bound. Timestamps are copied with the records, so both sides cut at the same
    record.
    """

    since: int | None = None
    until: int | None = None


def take_snapshot(
    settings: Settings, topics: Iterable[str] = (), times: TimeRange = TimeRange()
) -> Snapshot:
    """The pairs the settings replicate (or ``topics``, source names) and their ranges now.

    InputError, one line, for a cluster out of reach, an unknown topic, a missing destination
    topic, a selection that matches nothing, or a range without a single offset.
    """
    source_admin = _admin(settings.source)
    destination_admin = _admin(settings.destination)
    source_metadata = _metadata(source_admin, "source", settings.source)
    destination_metadata = _metadata(destination_admin, "destination", settings.destination)
    names = _pick_topics(settings, tuple(topics), source_metadata.topics)
    pairs = []
    for source_topic, destination_topic in names:
        if destination_topic not in destination_metadata.topics:
            raise InputError(
                f"topic {destination_topic} (the destination of {source_topic}) does not exist on "
                f"the destination cluster at {_servers(settings.destination)}"
            )
        pairs.append((source_topic, destination_topic))
    destination_partitions = {d: tuple(destination_metadata.topics[d].partitions) for _, d in pairs}
    source_partitions = {s: tuple(source_metadata.topics[s].partitions) for s, _ in pairs}
    # Destination first: see the module's docstring.
    destination_ranges = _ranges(destination_admin, destination_partitions, "destination", times)
    source_ranges = _ranges(source_admin, source_partitions, "source", times)
    compacted = _compacted(source_admin, [s for s, _ in pairs], "source")
    destination_compacted = _compacted(destination_admin, [d for _, d in pairs], "destination")
    snapshot = Snapshot(
        source=ClusterInfo(_servers(settings.source), source_metadata.cluster_id or ""),
        destination=ClusterInfo(
            _servers(settings.destination), destination_metadata.cluster_id or ""
        ),
        pairs=tuple(
            TopicPair(
                s,
                d,
                source_ranges[s],
                destination_ranges[d],
                compacted[s],
                destination_compacted[d],
            )
            for s, d in pairs
        ),
    )
    if not any(
        r.size
        for pair in snapshot.pairs
        for r in (*pair.source.values(), *pair.destination.values())
    ):
        shown = ", ".join(pair.source_topic for pair in snapshot.pairs)
        where = " in the time range" if times != TimeRange() else ""
        raise InputError(
            f"nothing to check: every partition of {shown} is empty on both clusters{where}"
        )
    return snapshot


def with_current_log_starts(snapshot: Snapshot, settings: Settings) -> Snapshot:
    """``snapshot`` with each log start moved to where retention has cut the log since.

    Spark reads with failOnDataLoss=false, so records deleted while it read are simply absent;
    taken after the read, the log starts say which absences are retention's, not losses.
    """
    # One request per cluster for every partition of every pair, as take_snapshot does.
    sources = _moved_log_starts(
        _admin(settings.source),
        [(pair.source_topic, pair.source) for pair in snapshot.pairs],
        "source",
    )
    destinations = _moved_log_starts(
        _admin(settings.destination),
        [(pair.destination_topic, pair.destination) for pair in snapshot.pairs],
        "destination",
    )
    pairs = tuple(
        replace(pair, source=s, destination=d)
        for pair, s, d in zip(snapshot.pairs, sources, destinations, strict=True)
    )
    return replace(snapshot, pairs=pairs)


def _moved_log_starts(
    admin: AdminClient, topics: list[tuple[str, Mapping[int, OffsetRange]]], side: str
) -> list[dict[int, OffsetRange]]:
    tps = [TopicPartition(topic, p) for topic, ranges in topics for p in ranges]
    now = _list_offsets(admin, tps, OffsetSpec.earliest(), side)
    return [
        {p: replace(r, log_start=max(r.log_start, now[(topic, p)])) for p, r in ranges.items()}
        for topic, ranges in topics
    ]


def _servers(cluster: ClusterSettings) -> str:
    return ",".join(cluster.bootstrap_servers)


def _admin(cluster: ClusterSettings) -> AdminClient:
    config = cluster.client_config()
    # One failed connection is enough to say "out of reach"; the default retries for minutes.
    config.setdefault("socket.connection.setup.timeout.ms", str(int(_TIMEOUT_S * 1000)))
    # librdkafka would print every failed connection attempt to stderr; a cluster out of reach
    # is reported once, as the InputError naming it.
    config.setdefault("log_level", "0")
    return AdminClient(config)


def _metadata(admin: AdminClient, side: str, cluster: ClusterSettings) -> ClusterMetadata:
    try:
        return admin.list_topics(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise InputError(
            f"cannot reach the {side} cluster at {_servers(cluster)} within {_TIMEOUT_S:g} s: "
            f"{kafka_error_of(exc).str()}"
        ) from None


def _pick_topics(
    settings: Settings, asked: tuple[str, ...], existing: Mapping[str, object]
) -> list[tuple[str, str]]:
    if settings.source.topic is not None:
        asked = (*asked, settings.source.topic)
    for topic in asked:
        if topic not in existing:
            raise InputError(
                f"unknown topic {topic} on the source cluster at {_servers(settings.source)}"
            )
    candidates = asked or tuple(sorted(existing))
    try:
        # The check stage 1 makes: one source per destination topic, none of the flow's own.
        names = destination_names(settings, candidates)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    for topic in asked:
        if topic not in names:
            raise InputError(
                f"topic {topic} is not replicated by this flow's settings "
                "(REPLICATION_TOPICS_EXCLUDE or the include list leaves it out)"
            )
    if not names:
        raise InputError(
            "no topic to check: no source topic matches REPLICATION_TOPICS_INCLUDE "
            "(or set KAFKA_CLUSTERS_SOURCE_TOPIC, or pass --topic)"
        )
    return list(names.items())


def _ranges(
    admin: AdminClient,
    partitions: Mapping[str, tuple[int, ...]],
    side: str,
    times: TimeRange,
) -> dict[str, dict[int, OffsetRange]]:
    """Earliest and read_committed end (the last stable offset) of every partition, cut to
    ``times``."""
    tps = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
    earliest = _list_offsets(admin, tps, OffsetSpec.earliest(), side)
    latest = _list_offsets(admin, tps, OffsetSpec.latest(), side)
    since = until = {}
    if times.since is not None:
        since = _list_offsets(admin, tps, OffsetSpec.for_timestamp(times.since), side)
    if times.until is not None:
        until = _list_offsets(admin, tps, OffsetSpec.for_timestamp(times.until), side)
    ranges: dict[str, dict[int, OffsetRange]] = {t: {} for t in partitions}
    for tp in tps:
        key = (tp.topic, tp.partition)
        log_start, end = earliest[key], latest[key]
        # -1: no record at or after the timestamp, so the bound is the end.
        start = since.get(key, log_start)
        start = end if start < 0 else max(start, log_start)
        cut = until.get(key, end)
        end = end if cut < 0 else min(cut, end)
        ranges[tp.topic][tp.partition] = OffsetRange(
            start=min(start, end), end=end, log_start=log_start
        )
    return ranges


def _list_offsets(
    admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec, side: str
) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    futures = admin.list_offsets(
        {tp: spec for tp in tps},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=_TIMEOUT_S,
    )
    offsets = {}
    for tp, future in futures.items():
        try:
            info: ListOffsetsResultInfo = future.result()
        except KafkaException as exc:
            raise InputError(
                f"cannot list the offsets of {tp.topic}[{tp.partition}] on the {side} cluster: "
                f"{kafka_error_of(exc).str()}"
            ) from None
        offsets[(tp.topic, tp.partition)] = info.offset
    return offsets


def _compacted(admin: AdminClient, topics: list[str], side: str) -> dict[str, bool]:
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
    compacted = {}
    for resource, future in admin.describe_configs(resources, request_timeout=_TIMEOUT_S).items():
        try:
            policy = future.result()["cleanup.policy"].value or ""
        except KafkaException as exc:
            raise InputError(
                f"cannot read the configuration of topic {resource.name} on the {side} cluster: "
                f"{kafka_error_of(exc).str()}"
            ) from None
        compacted[resource.name] = "compact" in policy
    return compacted
