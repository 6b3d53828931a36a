"""The least a flow's roles need granted on each cluster: every ACL, and why.

Derived from the calls each role makes (runtime/names.py names every resource):

    replicator    source: reads and describes the source topics, its group commits
                  target: writes staging and <staging>.meta, creates both and the destination
                          topics (and adds partitions to them), describes configs
    deduplicator  target: reads staging as its group, writes the destination topics, the
                          changelog and dead letters in transactions under its id prefix
    offsetsync    source: describes the groups it moves and reads their topics' offsets
                  target: reads the destination topics, commits the groups' offsets there,
                          writes its checkpoints
    validator     source and target: reads both sides of every pair

CREATE is granted on the internal topics even when they exist: a role asks to create them at
every start and takes "already exists" for the answer, which a broker gives only to a principal
allowed to create them (without CREATE it answers "not authorized").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from runtime.settings import Settings, destination_names

SOURCE = "source"
TARGET = "target"
ROLES = ("replicator", "deduplicator", "offsetsync", "validator")

# Consumers that only assign() and never commit; their group id is still looked up.
_OFFSETSYNC_READER_GROUP = "exactly-offsetsync-reader"  # offsetsync/reading.py
_VALIDATOR_SAMPLE_GROUP = "exactly-validate-sample"  # validator/sample.py
# Spark's Kafka source names its consumers' groups spark-kafka-relation-<uuid>-...
_SPARK_GROUP_PREFIX = "spark-kafka-relation-"
_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Grant:
    """ALLOW ``operations`` on one resource to a role's principal, on one cluster."""

    role: str
    cluster: str  # SOURCE | TARGET
    resource: str  # TOPIC | GROUP | TRANSACTIONAL_ID
    name: str
    operations: tuple[str, ...]
    why: str
    prefixed: bool = False  # the name is a prefix (Kafka's PREFIXED pattern type)


def flow_grants(
    settings: Settings, source_topics: Sequence[str], groups: Sequence[str] = ()
) -> list[Grant]:
    """Every grant the flow's roles need: ``source_topics`` are the topics the flow copies,
    ``groups`` the consumer groups offset sync moves. DestinationCollisionError when two of
    them would be copied to one topic, as stage 1 would stop."""
    names = settings.names
    copied = destination_names(settings, source_topics).items()
    grants: list[Grant] = []

    def grant(
        role: str, cluster: str, resource: str, name: str, ops: str, why: str, **kw: bool
    ) -> None:
        grants.append(Grant(role, cluster, resource, name, tuple(ops.split()), why, **kw))

    for source_topic, destination_topic in copied:
        grant(
            "replicator",
            SOURCE,
            "TOPIC",
            source_topic,
            "READ DESCRIBE DESCRIBE_CONFIGS",
            "a source topic: read, and its partitions and configs copied",
        )
        grant(
            "replicator",
            TARGET,
            "TOPIC",
            destination_topic,
            "CREATE ALTER DESCRIBE",
            "a destination topic: created like its source, partitions added",
        )
        grant(
            "deduplicator",
            TARGET,
            "TOPIC",
            destination_topic,
            "WRITE DESCRIBE",
            "a destination topic: the records, in transactions",
        )
        grant(
            "offsetsync",
            SOURCE,
            "TOPIC",
            source_topic,
            "READ DESCRIBE",
            "a source topic: the groups' offsets and the records' timestamps there",
        )
        grant(
            "offsetsync",
            TARGET,
            "TOPIC",
            destination_topic,
            "READ DESCRIBE",
            "a destination topic: offsets committed for the groups, copies read",
        )
        grant(
            "validator",
            SOURCE,
            "TOPIC",
            source_topic,
            "READ DESCRIBE DESCRIBE_CONFIGS",
            "audited (its cleanup policy: compacted or not)",
        )
        grant(
            "validator",
            TARGET,
            "TOPIC",
            destination_topic,
            "READ DESCRIBE DESCRIBE_CONFIGS",
            "audited (its cleanup policy: compacted or not)",
        )
    grant(
        "replicator",
        SOURCE,
        "GROUP",
        names.replicator_group,
        "READ",
        "stage 1's consumer group: joins and commits",
    )
    grant(
        "replicator",
        TARGET,
        "TOPIC",
        names.staging,
        "CREATE WRITE DESCRIBE DESCRIBE_CONFIGS",
        "the staging topic: envelopes",
    )
    grant(
        "replicator",
        TARGET,
        "TOPIC",
        names.meta,
        "CREATE READ WRITE DESCRIBE",
        "the flow's records: lane mapping, topic generations",
    )
    grant(
        "replicator",
        TARGET,
        "GROUP",
        names.meta_reader_group,
        "DESCRIBE",
        "reads <staging>.meta at start-up (assign only)",
    )
    grant(
        "deduplicator",
        TARGET,
        "TOPIC",
        names.staging,
        "READ DESCRIBE",
        "the staging topic: envelopes",
    )
    grant(
        "deduplicator",
        TARGET,
        "TOPIC",
        names.changelog,
        "CREATE READ WRITE DESCRIBE",
        "deduplication state: written in each transaction, read to restore",
    )
    grant(
        "deduplicator",
        TARGET,
        "TOPIC",
        names.deadletter,
        "CREATE WRITE DESCRIBE",
        "staging records stage 2 could not read",
    )
    grant(
        "deduplicator",
        TARGET,
        "GROUP",
        names.deduplicator_group,
        "READ",
        "stage 2's consumer group: joins, offsets sent in transactions",
    )
    grant(
        "deduplicator",
        TARGET,
        "GROUP",
        names.changelog_reader_group,
        "DESCRIBE",
        "restores the state (assign only)",
    )
    grant(
        "deduplicator",
        TARGET,
        "TRANSACTIONAL_ID",
        names.deduplicator_transactional_id(""),
        "WRITE DESCRIBE",
        "stage 2's transactional ids, one per instance",
        prefixed=True,
    )
    for group in groups:
        grant("offsetsync", SOURCE, "GROUP", group, "DESCRIBE", "a group moved: its offsets read")
        grant(
            "offsetsync",
            TARGET,
            "GROUP",
            group,
            "READ DESCRIBE",
            "a group moved: its offsets committed",
        )
    for cluster in (SOURCE, TARGET):
        grant(
            "offsetsync",
            cluster,
            "GROUP",
            _OFFSETSYNC_READER_GROUP,
            "DESCRIBE",
            "reads records to translate offsets (assign only)",
        )
    grant(
        "offsetsync",
        TARGET,
        "TOPIC",
        names.checkpoints,
        "CREATE WRITE DESCRIBE",
        "the translations, one record per group and partition",
    )
    grant(
        "validator",
        TARGET,
        "GROUP",
        _VALIDATOR_SAMPLE_GROUP,
        "DESCRIBE",
        "reads the first records of the destination (assign only)",
    )
    for cluster in (SOURCE, TARGET):
        grant(
            "validator",
            cluster,
            "GROUP",
            _SPARK_GROUP_PREFIX,
            "DESCRIBE READ",
            "Spark's Kafka source reads with groups of this prefix",
            prefixed=True,
        )
    return grants


def apply_flow_grants(
    source_bootstrap_servers: str, target_bootstrap_servers: str, grants: Sequence[Grant]
) -> None:
    """``apply_grants`` of each cluster's share of ``grants``, through the bootstrap servers
    given for it."""
    for cluster, bootstrap_servers in (
        (SOURCE, source_bootstrap_servers),
        (TARGET, target_bootstrap_servers),
    ):
        apply_grants(bootstrap_servers, [g for g in grants if g.cluster == cluster])


def apply_grants(
    bootstrap_servers: str,
    grants: Sequence[Grant],
    principal: Callable[[str], str] = lambda role: f"User:{role}",
) -> None:
    """Create the grants' ACLs through ``bootstrap_servers`` (an admin's client, PLAINTEXT
    here: configure others with ``kafka-acls.sh``) and wait until the broker enforces them: it
    learns them from the metadata log a moment after the controller commits them."""
    bindings = [
        AclBinding(
            ResourceType[grant.resource],
            grant.name,
            ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
            principal(grant.role),
            "*",
            AclOperation[operation],
            AclPermissionType.ALLOW,
        )
        for grant in grants
        for operation in grant.operations
    ]
    if not bindings:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_acls(bindings).values():
        future.result(timeout=_TIMEOUT_S)
    wanted = {_key(binding) for binding in bindings}
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        present = {_key(b) for b in allowed_acls(admin)}
        if wanted <= present:
            return
        if time.monotonic() > deadline:
            missing = len(wanted - present)
            raise TimeoutError(f"{missing} ACLs not enforced by the broker {_TIMEOUT_S:.0f} s on")
        time.sleep(0.1)


def allowed_acls(admin: AdminClient) -> list[AclBinding]:
    """Every ALLOW binding the broker enforces, as it answers DescribeAcls."""
    every_allow = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ALLOW,
    )
    bindings: list[AclBinding] = admin.describe_acls(every_allow).result(timeout=_TIMEOUT_S)
    return bindings


def _key(binding: AclBinding) -> tuple[object, ...]:
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.operation,
    )
