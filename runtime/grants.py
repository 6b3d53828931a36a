"""The grants a flow's roles need, as one table: for each role and cluster, a resource type,
which name (a kind: each source topic, staging, the deduplicator group, ...), the operations,
literal or prefixed, and why. `exactly acls` expands it with a flow's names (exactly/acls.py);
a role reads it for what to name when a broker refuses it (``needs``).

Derived from the calls each role makes (runtime/names.py names every resource):

    replicator    source: reads and describes the source topics, its group commits
                  target: writes staging and <staging>.meta, creates both and the destination
                          topics (and adds partitions to them), describes configs
    deduplicator  target: reads staging as its group, writes the destination topics, the
                          changelog and dead letters in transactions under its id prefix
    offsetsync    source: describes the groups it moves and reads their topics' offsets
                  target: reads the destination topics and <staging>.meta, commits the
                          groups' offsets there, writes its checkpoints
    validator     source and target: reads both sides of every pair

CREATE is granted on the internal topics even when they exist: a role asks to create them at
every start and takes "already exists" for the answer, which a broker gives only to a principal
allowed to create them (without CREATE it answers "not authorized").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from runtime.names import FlowNames

SOURCE = "source"
TARGET = "target"
BOTH = "both"  # a row granted alike on the source and on the target, in that order
ROLES = ("replicator", "deduplicator", "offsetsync", "validator")

# Which name a grant is on. One per copied topic (a source topic and its destination) or per
# group offset sync moves:
SOURCE_TOPIC = "each source topic"
DESTINATION_TOPIC = "each destination topic"
GROUP_MOVED = "each group moved"
# One per flow (runtime/names.py):
REPLICATOR_GROUP = "the replicator group"
STAGING = "staging"
META = "<staging>.meta"
META_READER_GROUP = "the meta reader group"
CHANGELOG = "the changelog"
DEADLETTER = "the dead letter topic"
DEDUPLICATOR_GROUP = "the deduplicator group"
CHANGELOG_READER_GROUP = "the changelog reader group"
TRANSACTIONAL_ID_PREFIX = "transactional id prefix"
CHECKPOINTS = "the checkpoints topic"
# The same for every flow:
OFFSETSYNC_READER_GROUP = "the offset sync reader group"
VALIDATOR_SAMPLE_GROUP = "the validator sample group"
SPARK_GROUP_PREFIX = "Spark's group prefix"

# The series a kind's names come in: consecutive rows of one series are expanded together,
# item by item (a copied topic's grants side by side). Kinds not here have one name.
COPIED = "copied topics"
MOVED = "groups moved"
SERIES = {SOURCE_TOPIC: COPIED, DESTINATION_TOPIC: COPIED, GROUP_MOVED: MOVED}

_FLOW_NAMES: dict[str, Callable[[FlowNames], str]] = {
    REPLICATOR_GROUP: lambda names: names.replicator_group,
    STAGING: lambda names: names.staging,
    META: lambda names: names.meta,
    META_READER_GROUP: lambda names: names.meta_reader_group,
    CHANGELOG: lambda names: names.changelog,
    DEADLETTER: lambda names: names.deadletter,
    DEDUPLICATOR_GROUP: lambda names: names.deduplicator_group,
    CHANGELOG_READER_GROUP: lambda names: names.changelog_reader_group,
    TRANSACTIONAL_ID_PREFIX: lambda names: names.deduplicator_transactional_id(""),
    CHECKPOINTS: lambda names: names.checkpoints,
}
_FIXED_NAMES = {
    # Consumers that only assign() and never commit; their group id is still looked up.
    OFFSETSYNC_READER_GROUP: "exactly-offsetsync-reader",  # offsetsync/reading.py
    VALIDATOR_SAMPLE_GROUP: "exactly-validate-sample",  # validator/sample.py
    # Spark's Kafka source names its consumers' groups spark-kafka-relation-<uuid>-...
    SPARK_GROUP_PREFIX: "spark-kafka-relation-",
}

# What a refusal of a role's reads and writes names: WRITE where the row grants it, else READ,
# else the row's first operation. Its other calls (CREATE, DESCRIBE, ... at start-up) name
# what they need themselves.
_DATA_OPERATIONS = ("WRITE", "READ")


@dataclass(frozen=True, slots=True)
class GrantRow:
    """ALLOW ``operations`` on the resource ``kind`` names to a role's principal, on one
    cluster."""

    role: str
    cluster: str  # SOURCE | TARGET | BOTH
    resource: str  # TOPIC | GROUP | TRANSACTIONAL_ID
    kind: str  # SOURCE_TOPIC, STAGING, ...
    operations: tuple[str, ...]
    why: str
    prefixed: bool = False  # the name is a prefix (Kafka's PREFIXED pattern type)

    @property
    def clusters(self) -> tuple[str, ...]:
        return (SOURCE, TARGET) if self.cluster == BOTH else (self.cluster,)


def _row(
    role: str, cluster: str, resource: str, kind: str, ops: str, why: str, prefixed: bool = False
) -> GrantRow:
    return GrantRow(role, cluster, resource, kind, tuple(ops.split()), why, prefixed)


# Every grant of a flow, in the order `exactly acls` prints them.
GRANTS: tuple[GrantRow, ...] = (
    _row(
        "replicator",
        SOURCE,
        "TOPIC",
        SOURCE_TOPIC,
        "READ DESCRIBE DESCRIBE_CONFIGS",
        "a source topic: read, and its partitions and configs copied",
    ),
    _row(
        "replicator",
        TARGET,
        "TOPIC",
        DESTINATION_TOPIC,
        "CREATE ALTER DESCRIBE",
        "a destination topic: created like its source, partitions added",
    ),
    _row(
        "deduplicator",
        TARGET,
        "TOPIC",
        DESTINATION_TOPIC,
        "WRITE DESCRIBE",
        "a destination topic: the records, in transactions",
    ),
    _row(
        "offsetsync",
        SOURCE,
        "TOPIC",
        SOURCE_TOPIC,
        "READ DESCRIBE",
        "a source topic: the groups' offsets and the records' timestamps there",
    ),
    _row(
        "offsetsync",
        TARGET,
        "TOPIC",
        DESTINATION_TOPIC,
        "READ DESCRIBE",
        "a destination topic: offsets committed for the groups, copies read",
    ),
    _row(
        "validator",
        SOURCE,
        "TOPIC",
        SOURCE_TOPIC,
        "READ DESCRIBE DESCRIBE_CONFIGS",
        "audited (its cleanup policy: compacted or not)",
    ),
    _row(
        "validator",
        TARGET,
        "TOPIC",
        DESTINATION_TOPIC,
        "READ DESCRIBE DESCRIBE_CONFIGS",
        "audited (its cleanup policy: compacted or not)",
    ),
    _row(
        "replicator",
        SOURCE,
        "GROUP",
        REPLICATOR_GROUP,
        "READ",
        "stage 1's consumer group: joins and commits",
    ),
    _row(
        "replicator",
        TARGET,
        "TOPIC",
        STAGING,
        "CREATE WRITE DESCRIBE DESCRIBE_CONFIGS",
        "the staging topic: envelopes",
    ),
    _row(
        "replicator",
        TARGET,
        "TOPIC",
        META,
        "CREATE READ WRITE DESCRIBE",
        "the flow's records: lane mapping, topic generations",
    ),
    _row(
        "replicator",
        TARGET,
        "GROUP",
        META_READER_GROUP,
        "DESCRIBE",
        "reads <staging>.meta at start-up (assign only)",
    ),
    _row("deduplicator", TARGET, "TOPIC", STAGING, "READ DESCRIBE", "the staging topic: envelopes"),
    _row(
        "deduplicator",
        TARGET,
        "TOPIC",
        CHANGELOG,
        "CREATE READ WRITE DESCRIBE",
        "deduplication state: written in each transaction, read to restore",
    ),
    _row(
        "deduplicator",
        TARGET,
        "TOPIC",
        DEADLETTER,
        "CREATE WRITE DESCRIBE",
        "staging records stage 2 could not read",
    ),
    _row(
        "deduplicator",
        TARGET,
        "GROUP",
        DEDUPLICATOR_GROUP,
        "READ",
        "stage 2's consumer group: joins, offsets sent in transactions",
    ),
    _row(
        "deduplicator",
        TARGET,
        "GROUP",
        CHANGELOG_READER_GROUP,
        "DESCRIBE",
        "restores the state (assign only)",
    ),
    _row(
        "deduplicator",
        TARGET,
        "TRANSACTIONAL_ID",
        TRANSACTIONAL_ID_PREFIX,
        "WRITE DESCRIBE",
        "stage 2's transactional ids, one per instance",
        prefixed=True,
    ),
    _row("offsetsync", SOURCE, "GROUP", GROUP_MOVED, "DESCRIBE", "a group moved: its offsets read"),
    _row(
        "offsetsync",
        TARGET,
        "GROUP",
        GROUP_MOVED,
        "READ DESCRIBE",
        "a group moved: its offsets committed",
    ),
    _row(
        "offsetsync",
        BOTH,
        "GROUP",
        OFFSETSYNC_READER_GROUP,
        "DESCRIBE",
        "reads records to translate offsets (assign only)",
    ),
    _row(
        "offsetsync",
        TARGET,
        "TOPIC",
        META,
        "READ DESCRIBE",
        "the source topics stage 1 took in: only their offsets are translated",
    ),
    _row(
        "offsetsync",
        TARGET,
        "TOPIC",
        CHECKPOINTS,
        "CREATE WRITE DESCRIBE",
        "the translations, one record per group and partition",
    ),
    _row(
        "validator",
        TARGET,
        "TOPIC",
        META,
        "READ DESCRIBE",
        "where a flow from latest starts: audited from there",
    ),
    _row(
        "validator",
        TARGET,
        "GROUP",
        VALIDATOR_SAMPLE_GROUP,
        "DESCRIBE",
        "reads the first records of the destination and the flow's start (assign only)",
    ),
    _row(
        "validator",
        BOTH,
        "GROUP",
        SPARK_GROUP_PREFIX,
        "DESCRIBE READ",
        "Spark's Kafka source reads with groups of this prefix",
        prefixed=True,
    ),
)


def name_of(kind: str, names: FlowNames) -> str:
    """The one name of ``kind`` in the flow ``names`` names; KeyError for a kind of a series
    (SERIES), whose names the flow's topics and groups give."""
    fixed = _FIXED_NAMES.get(kind)
    return fixed if fixed is not None else _FLOW_NAMES[kind](names)


def needs(
    role: str, cluster: str, known: Mapping[str, str | Iterable[str]]
) -> dict[str, tuple[str, str]]:
    """What ``role`` needs granted on ``cluster`` for its reads and writes of the resources
    ``known`` names, by resource type: (operation, name), as ``refusal``'s ``wanted`` takes it
    (runtime/kafka_errors.py), in ``known``'s order.

    ``known`` maps each kind the calls use (STAGING, DESTINATION_TOPIC, ...) to its name, or
    names, at run time. A broker's refusal names no resource, only its type: the names of one
    type are given together, sorted, joined by " or ". KeyError when ``role`` is granted
    nothing of a kind on ``cluster``; ValueError when two kinds of one type would name two
    operations."""
    wanted: dict[str, tuple[str, set[str]]] = {}
    for kind, named in known.items():
        row = _row_of(role, cluster, kind)
        operation = next((op for op in _DATA_OPERATIONS if op in row.operations), row.operations[0])
        names = {named} if isinstance(named, str) else set(named)
        before, so_far = wanted.get(row.resource, (operation, set()))
        if before != operation:
            raise ValueError(f"{role} on the {cluster}: {before} and {operation} on {row.resource}")
        wanted[row.resource] = (operation, so_far | names)
    return {
        resource: (operation, " or ".join(sorted(names)))
        for resource, (operation, names) in wanted.items()
    }


def _row_of(role: str, cluster: str, kind: str) -> GrantRow:
    for row in GRANTS:
        if row.role == role and cluster in row.clusters and row.kind == kind:
            return row
    raise KeyError(f"no grant of {kind} to the {role} on the {cluster} (runtime/grants.py)")
