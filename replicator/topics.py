"""Topics stage 1 reads and creates: the matching source topics, the staging topic with its
recorded lane mapping, and the destination topics stage 2 will write.

Destination topics get the source's partition count (records keep their partition number) and
the configs that decide what survives on the destination: retention and compaction first, or
replicated history disappears (docs/design.md §9: old timestamps vanish under a default retention).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicCollection,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from replicator.errors import StagingMismatchError, TopicSetupError
from replicator.flowrecords import FlowRecords
from replicator.lanes import LANE_FUNCTION
from runtime import ExactlyError, Settings, get_logger, kafka_error_of, raise_if_refused
from runtime.errors import AuthenticationError, DestinationCollisionError, NotAuthorizedError
from runtime.settings import destination_names
from runtime.topics import (
    admin_result,
    call_once_known,
    cluster_metadata,
    create_together,
    ensure_topic,
    require_operations,
    topic_id_bytes,
)

log = get_logger(__name__)

MIRRORED_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "message.timestamp.type",
    "min.compaction.lag.ms",
)
# Room for the largest source record plus its envelope; a larger record stops its partition.
STAGING_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# The least max.message.bytes a destination topic is given, whatever its source's. The broker
# holds a whole record batch to that limit, compressed as it arrives: the source's limit bounded
# its producers' batches, and stage 2 writes the same records uncompressed (by default) in
# batches of its own, up to librdkafka's batch.size (1 MB). A destination that kept a smaller
# limit would refuse a batch of records that each fit, or a record its source took compressed,
# and librdkafka never splits a refused batch: the same transaction would fail for ever (stage 2
# exited, and again after every restart). Whatever staging carries at its default limit
# therefore fits (an operator who raises staging's limit raises the destinations' with it:
# docs/operations.md). Only topics created from here on: an existing destination's
# configuration is not changed.
DESTINATION_MIN_MAX_MESSAGE_BYTES = STAGING_MAX_MESSAGE_BYTES
# A destination takes every timestamp its source took. The broker judges a CreateTime record's
# timestamp against its own clock as the record arrives (KIP-937): its source judged it when it
# was written, the destination judges it again when it is copied, later, and Kafka 4.0 bounds
# the future at 1 hour where earlier versions did not. A record a 3.x source took stamped two
# hours ahead was refused by a 4.x destination for ever (stage 2 aborted the same transaction
# twice a second without end); a target bounding the past (before.max.ms) would refuse a
# backlog or a history. Unbounded both ways, as every source before 4.0 is. Only topics created
# from here on (docs/operations.md says how to change one created before).
# A target before 3.6 knows neither setting and refuses a topic that names one: there it is left
# out, and that target's defaults, unbounded both ways, hold.
UNBOUNDED_MS = str(2**63 - 1)  # Kafka's Long.MAX_VALUE
DESTINATION_TIMESTAMP_BOUNDS = {
    "message.timestamp.after.max.ms": UNBOUNDED_MS,
    "message.timestamp.before.max.ms": UNBOUNDED_MS,
}
_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SourceTopic:
    name: str
    destination: str
    partitions: int
    topic_id: bytes
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class StagingTopic:
    name: str
    partitions: int
    max_message_bytes: int
    # What every destination topic is created with besides its source's configs, as far as
    # the target knows the settings (read from staging's own configs).
    destination_defaults: Mapping[str, str]


def describe_source_topics(
    admin: AdminClient,
    settings: Settings,
    *,
    established: Collection[str] = (),
    left_out: Callable[[str, DestinationCollisionError], None] | None = None,
) -> dict[str, SourceTopic]:
    """Every source topic that the settings replicate, with partitions, id and configs.

    DestinationCollisionError when two of them (or one and a topic of the flow) would share a
    destination: raised before anything of them is created, subscribed or copied; with
    ``left_out``, a colliding topic that is not ``established`` is left out instead
    (``destination_names``).
    """
    metadata = admin.list_topics(timeout=_TIMEOUT_S)
    wanted = destination_names(
        settings,
        sorted(metadata.topics),
        invalid=_not_replicated,
        established=established,
        left_out=left_out,
    )
    if not wanted:
        return {}
    descriptions = admin.describe_topics(TopicCollection(sorted(wanted)))
    configs = {
        resource.name: future
        for resource, future in admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, name) for name in sorted(wanted)]
        ).items()
    }
    found = {}
    for name, future in descriptions.items():
        try:
            description = admin_result(future, _TIMEOUT_S)
        except KafkaException as exc:
            raise_if_refused(exc, "source", {"TOPIC": ("DESCRIBE", name)})
            if kafka_error_of(exc).code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                # A broker dead or slow (a timeout): the round fails and keeps its last answer.
                # Taken for a deleted topic it would unsubscribe every partition of it.
                raise
            # Deleted between list and describe: it is simply not there this round.
            log.warning("source topic vanished while described", topic=name, error=str(exc))
            continue
        try:
            # By name: a search of the answers per topic grew with the square of the topics
            # (2.7 ms a round at 500 topics; issue 34).
            entries = admin_result(configs[name], _TIMEOUT_S)
        except KafkaException as exc:
            # Discovery retries what fails every few seconds: a missing ACL stops it instead.
            raise_if_refused(exc, "source", {"TOPIC": ("DESCRIBE_CONFIGS", name)})
            raise
        found[name] = SourceTopic(
            name=name,
            destination=wanted[name],
            partitions=len(description.partitions),
            topic_id=topic_id_bytes(description.topic_id),
            configs={k: entries[k].value for k in MIRRORED_CONFIGS if k in entries},
        )
    return found


def _not_replicated(topic: str, error: ValueError) -> None:
    # The rename or REPLICATION_DESTINATION_TOPIC made an illegal name of this one: say it
    # each round.
    log.error(
        "source topic not replicated: no valid destination name", topic=topic, error=str(error)
    )


def ensure_destinations(
    admin: AdminClient, topics: Collection[SourceTopic], defaults: Mapping[str, str]
) -> dict[str, Exception]:
    """ensure_destination of each topic, the missing ones created together (create_together):
    one metadata request, one CreateTopics request and one wait for every leader, however many
    topics start at once. A topic the batch did not make ready, or whose destination exists
    with other partitions than its source, goes through ensure_destination alone. Returns the
    topics (by source name) still not ready, with why; a refused ACL or credentials raise."""
    if not topics:
        return {}
    try:
        existing = admin.list_topics(timeout=_TIMEOUT_S).topics
        missing = [
            topic
            for topic in topics
            if (found := existing.get(topic.destination)) is None or found.error is not None
        ]
        made = create_together(admin, [_new_destination(topic, defaults) for topic in missing])
    except KafkaException as exc:  # the target out of reach: the next round tries them all
        return {topic.name: exc for topic in topics}
    for topic in missing:
        if topic.destination in made:
            log.info(
                "destination topic created",
                topic=topic.destination,
                partitions=topic.partitions,
                source=topic.name,
            )
    failures: dict[str, Exception] = {}
    for topic in topics:
        found = existing.get(topic.destination)
        if topic.destination in made or (
            found is not None and found.error is None and len(found.partitions) == topic.partitions
        ):
            continue
        try:
            ensure_destination(admin, topic, defaults)
        except (NotAuthorizedError, AuthenticationError):
            raise  # no later round mends a missing ACL or refused credentials
        except (KafkaException, ExactlyError) as exc:
            failures[topic.name] = exc
    return failures


def _new_destination(topic: SourceTopic, defaults: Mapping[str, str]) -> NewTopic:
    config = {**defaults, **{k: v for k, v in topic.configs.items() if v is not None}}
    config["max.message.bytes"] = str(
        max(int(config.get("max.message.bytes", 0)), DESTINATION_MIN_MAX_MESSAGE_BYTES)
    )
    return NewTopic(
        topic.destination,
        num_partitions=topic.partitions,
        replication_factor=-1,
        config=config,
    )


def ensure_destination(admin: AdminClient, topic: SourceTopic, defaults: Mapping[str, str]) -> None:
    """Create the destination topic like its source (and with ``defaults``), or grow it to the
    source's partitions."""
    existing = admin.list_topics(topic.destination, timeout=_TIMEOUT_S).topics.get(
        topic.destination
    )
    if existing is None or existing.error is not None:
        ensure_topic(admin, _new_destination(topic, defaults))
        log.info(
            "destination topic created",
            topic=topic.destination,
            partitions=topic.partitions,
            source=topic.name,
        )
        return
    have = len(existing.partitions)
    if have < topic.partitions:
        _await(
            admin.create_partitions([NewPartitions(topic.destination, topic.partitions)]),
            f"grow destination topic {topic.destination} to {topic.partitions} partitions",
            ("ALTER", topic.destination),
        )
        log.info(
            "destination topic grown",
            topic=topic.destination,
            partitions=topic.partitions,
            was=have,
        )
    elif have > topic.partitions:
        log.warning(
            "destination has more partitions than its source",
            topic=topic.destination,
            destination_partitions=have,
            source_partitions=topic.partitions,
        )


def ensure_staging(admin: AdminClient, settings: Settings, records: FlowRecords) -> StagingTopic:
    """Create the staging topic and record its lane mapping, or check it against the record.

    Invariant 1 rests on this: a staging topic whose partition count changed would move
    source partitions to other lanes, so start-up stops instead.
    """
    name = settings.names.staging
    records.load(admin, lambda topic: ensure_topic(admin, topic))
    recorded = records.lanes
    staging = cluster_metadata(admin).topics.get(name)
    if staging is None:
        partitions = recorded["partitions"] if recorded else settings.staging_partitions
        ensure_topic(
            admin,
            NewTopic(
                name,
                partitions,
                -1,
                config={
                    "cleanup.policy": "delete",
                    "retention.ms": str(settings.staging_retention_ms),
                    # Not the broker's log.retention.bytes: a size bound would delete envelopes
                    # stage 2 has not read (stage 1 has committed their source offsets).
                    "retention.bytes": "-1",
                    "max.message.bytes": str(STAGING_MAX_MESSAGE_BYTES),
                },
            ),
        )
        log.info("staging topic created", topic=name, partitions=partitions)
    else:
        partitions = len(staging.partitions)
    if recorded is None:
        records.record_lanes(partitions, LANE_FUNCTION)
    elif recorded["partitions"] != partitions or recorded["function"] != LANE_FUNCTION:
        raise StagingMismatchError(
            f"staging topic {name} has {partitions} partitions but its lane mapping was recorded "
            f"with {recorded['partitions']} ({recorded['function']}) in {records.topic}; "
            "source partitions would change lanes: restore the partition count or use a new "
            "REPLICATION_FLOW"
        )
    if records.started_at_ms is None:
        # Kept for the flow's life: a partition or topic that appears later is measured against
        # it, not against the moment stage 1 first meets it (invariant 3).
        records.record_started(int(time.time() * 1000))
    require_operations(admin, "target", name, ("WRITE",))
    entries = _configs(admin, name)
    return StagingTopic(
        name,
        partitions,
        int(entries["max.message.bytes"].value),
        {k: v for k, v in DESTINATION_TIMESTAMP_BOUNDS.items() if k in entries},
    )


def _configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def describe() -> Any:
        return admin_result(next(iter(admin.describe_configs([resource]).values())), _TIMEOUT_S)

    # Staging may have been created a moment ago: a broker not told yet is waited out.
    return dict(call_once_known(describe, topic))


def _await(futures: dict[Any, Any], what: str, needs: tuple[str, str]) -> None:
    """Wait for admin futures (by name); ``needs`` (operation, topic on the target) names the
    ACL a refusal is about."""
    for future in futures.values():
        try:
            admin_result(future, _TIMEOUT_S)
        except KafkaException as exc:
            raise_if_refused(exc, "target", {"TOPIC": needs})
            raise TopicSetupError(f"could not {what}: {exc}") from exc
