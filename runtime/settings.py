"""The configuration of every role, as a schema: one field per environment variable.

A field with an ``alias`` is an environment variable; a field of type ``ClusterSettings`` is
a group of them (``KAFKA_CLUSTERS_SOURCE`` + ``_`` + ``BOOTSTRAP_SERVERS``). Adding a
variable is one field here: the unknown-variable check, error messages, ``exactly config`` and
the reference table of docs/configuration.md all read the fields. A field's ``description``
(Markdown) is its row in that table, the only place its meaning is written; its default is the
default column unless ``json_schema_extra={"shown_default": ...}`` says it better
(runtime/settings_docs.py). The rest lives beside it and is imported from here: the
cross-field checks (runtime/settings_checks.py), topic naming and collisions
(runtime/topic_naming.py), loading and printing (runtime/settings_environment.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from runtime.cluster_settings import ClusterSettings
from runtime.identity import host_identity
from runtime.names import FlowNames
from runtime.settings_checks import (
    check_commit_floor,
    check_one_way_to_pick_topics,
    check_rename_is_whole,
    check_room_for_workers,
)
from runtime.settings_environment import (
    APPLICATION_NAME,
    DEFAULT_MARK,
    PREFIXES,
    load_from,
    render_config,
    role_environment,
)
from runtime.settings_types import (
    LogFormat,
    LogLevel,
    Pattern,
    Patterns,
    TopicName,
    non_empty,
)
from runtime.settings_variables import variable_of
from runtime.topic_naming import destination_names, destination_topic
from runtime.values import (
    check_flow_name,
    check_topic_template,
    matches_any,
)

__all__ = [
    "APPLICATION_NAME",
    "DEFAULT_MARK",
    "DESTINATION_PREFIX",
    "PREFIXES",
    "SOURCE_PREFIX",
    "ClusterSettings",
    "Settings",
    "destination_names",
    "load_settings",
    "render_config",
    "role_environment",
    "variable_name",
]


# The variable prefix of each cluster: <prefix>_BOOTSTRAP_SERVERS, <prefix>_PROPERTIES_...
SOURCE_PREFIX = "KAFKA_CLUSTERS_SOURCE"
DESTINATION_PREFIX = "KAFKA_CLUSTERS_DESTINATION"


class Settings(BaseSettings):
    """Every role's configuration. Build it with ``load_settings``; it is immutable."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    source: ClusterSettings = Field(alias="KAFKA_CLUSTERS_SOURCE")  # SOURCE_PREFIX
    destination: ClusterSettings = Field(alias="KAFKA_CLUSTERS_DESTINATION")  # DESTINATION_PREFIX
    topics_include: Patterns = Field(
        (),
        alias="REPLICATION_TOPICS_INCLUDE",
        description="Comma-separated regular expressions, full match: source topics to replicate "
        "(not with `KAFKA_CLUSTERS_SOURCE_TOPIC`). Topics starting with `__` (Kafka's own) never "
        "match. A comma inside an expression is written `\\x2c`.",
    )
    topics_exclude: Patterns = Field(
        (),
        alias="REPLICATION_TOPICS_EXCLUDE",
        description="Comma-separated regular expressions, full match: source topics never "
        "replicated; wins over the include list and over `KAFKA_CLUSTERS_SOURCE_TOPIC`.",
    )
    rename_pattern: Pattern | None = Field(
        None,
        alias="REPLICATION_TOPICS_RENAME_PATTERN",
        description="A regular expression, full match against the name of each source topic the "
        "include list picks: a topic it matches is renamed by "
        "`REPLICATION_TOPICS_RENAME_REPLACEMENT`, one it does not match keeps its name; "
        "`REPLICATION_DESTINATION_TOPIC` then applies to the result (`{topic}` is the new name). "
        "Set both or neither; not with `KAFKA_CLUSTERS_SOURCE_TOPIC`.",
    )
    rename_replacement: Annotated[str, BeforeValidator(non_empty)] | None = Field(
        None,
        alias="REPLICATION_TOPICS_RENAME_REPLACEMENT",
        description="The new name of a topic `REPLICATION_TOPICS_RENAME_PATTERN` matches, `\\1` "
        "or `\\g<name>` standing for the pattern's groups: pattern `(.*)\\.orders`, replacement "
        "`\\1.sales` copies `eu.orders` to `eu.sales`. Two replicated topics given one "
        "destination name, or one given the name of a topic of the flow or starting with `__`, "
        "stop stage 1 at start-up (exit 2, one line naming them); a topic created later under a "
        "clashing name is left out instead (see [Renaming "
        "topics](topologies.md#renaming-topics)).",
    )
    topic_template: Annotated[str, AfterValidator(check_topic_template)] = Field(
        "{topic}",
        alias="REPLICATION_DESTINATION_TOPIC",
        description="Destination name of each topic the include list picks, `{topic}` standing "
        "for the source name, or for its new name when `REPLICATION_TOPICS_RENAME_PATTERN` "
        "renames it: `dr.{topic}`.",
    )
    flow: Annotated[str, AfterValidator(check_flow_name)] = Field(
        "default",
        alias="REPLICATION_FLOW",
        description="Names the flow; staging topic, changelog topic and transactional ids derive "
        "from it (`[a-zA-Z0-9._-]`, at most 100 characters).",
    )
    instance_id: Annotated[str, AfterValidator(check_flow_name)] | None = Field(
        None,
        alias="REPLICATION_INSTANCE_ID",
        description="A stable name per instance of a stage, unique within its flow (the host "
        "name is a StatefulSet pod's name): its static group membership, so a restarted instance "
        "takes its partitions back at once instead of after the group's session timeout; and "
        "stage 2's `transactional.id`. See [Identity and "
        "restarts](roles.md#identity-and-restarts-both-stages).",
        json_schema_extra={"shown_default": "the host name"},
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        alias="REPLICATION_WORKERS",
        description="Processes of each stage in one container (`exactly replicator`, `exactly "
        "deduplicator`, `exactly run`), for a machine with more cores than one Python process "
        "uses: each a member of the stage's group with its own identity (`<identity>-<n>`), "
        "state directory (`STATE_DIR/worker-<n>`) and metrics port (`METRICS_PORT` + n); see "
        "[Workers](roles.md#workers-replication_workers).",
    )
    staging_topic: TopicName | None = Field(
        None,
        alias="REPLICATION_STAGING_TOPIC",
        description="The staging topic on the target.",
        json_schema_extra={"shown_default": "`__exactly.<flow>.staging`"},
    )
    staging_partitions: int = Field(
        12,
        ge=1,
        le=10000,
        alias="REPLICATION_STAGING_PARTITIONS",
        description="Partitions (lanes) of the staging topic when stage 1 creates it; recorded "
        "then in `<staging>.meta` (key `lanes`), and a staging topic whose count changed stops "
        "start-up.",
    )
    staging_retention_ms: int = Field(
        7 * 24 * 3600 * 1000,
        ge=3600 * 1000,
        alias="REPLICATION_STAGING_RETENTION_MS",
        description="`retention.ms` of the staging topic when created: longer than the worst "
        "stage-2 outage.",
        json_schema_extra={"shown_default": "`604800000` (7 days)"},
    )
    staging_compression: Literal["none", "lz4", "zstd", "snappy", "gzip"] = Field(
        "lz4",
        alias="REPLICATION_STAGING_COMPRESSION",
        description="`compression.type` of the envelopes stage 1 writes to staging, each a batch "
        "of records of one source partition (`none`, `lz4`, `zstd`, `snappy`, `gzip`). The "
        "destination's is stage 2's producer's, "
        "`KAFKA_CLUSTERS_DESTINATION_PROPERTIES_COMPRESSION_TYPE` (librdkafka's default: none).",
    )
    envelope_max_records: int = Field(
        500,
        ge=1,
        le=100000,
        alias="REPLICATION_ENVELOPE_MAX_RECORDS",
        description="At most this many source records per envelope.",
    )
    envelope_max_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        alias="REPLICATION_ENVELOPE_MAX_BYTES",
        description="Envelope size budget; a single larger record travels alone, one too large "
        "for staging stops its partition.",
    )
    start_from: Literal["earliest", "latest"] = Field(
        "earliest",
        alias="REPLICATION_START_FROM",
        description="Where stage 1 starts in a source partition it has never committed: "
        "`earliest` (all history) or `latest`: the records the source took after the flow first "
        "started (its time is recorded once in `<staging>.meta`, key `started`, and looked up by "
        "record timestamp), so a partition or topic that appears later is copied whole. Logged "
        "for every such partition.",
    )
    on_data_loss: Literal["stop"] = Field(
        "stop",
        alias="REPLICATION_ON_DATA_LOSS",
        description="When a source partition's committed offset fell behind its retention: stop "
        "that partition, logged and counted with the number of records lost. The only policy so "
        "far; to go on, reset the group's offset for that partition deliberately (e.g. with "
        "`kafka-consumer-groups --reset-offsets`).",
    )
    on_topic_recreated: Literal["stop", "replicate"] = Field(
        "stop",
        alias="REPLICATION_ON_TOPIC_RECREATED",
        description="A source topic deleted and recreated under the same name (its id changed; "
        "ids are recorded in `<staging>.meta`): `stop` its partitions, or `replicate` the new "
        "topic from `REPLICATION_START_FROM` into the same destination. Logged either way.",
    )
    stall_timeout_ms: int = Field(
        30000,
        ge=1000,
        alias="REPLICATION_STALL_TIMEOUT_MS",
        description="An envelope unacknowledged for this long ends the stage-1 session (new "
        "producer, rewind).",
    )
    provenance_header: bool = Field(
        True,
        alias="REPLICATION_PROVENANCE_HEADER",
        description="Stage 2 adds the `exactly.origin` header (`<source cluster "
        "id>/<partition>/<offset>`) to every destination record; `false` writes the records "
        "exactly as they were.",
    )
    commit_interval_ms: int = Field(
        100,
        ge=10,
        # A transaction must end within its timeout (60 s), retries of its calls included.
        le=20_000,
        alias="REPLICATION_COMMIT_INTERVAL_MS",
        description="Stage 2 commits its transaction at least this often while records flow (and "
        "at once whenever staging has nothing more at hand); at most 20000, so that a "
        "transaction ends well within its 60 s timeout.",
    )
    commit_max_records: int = Field(
        100_000,
        ge=1,
        alias="REPLICATION_COMMIT_MAX_RECORDS",
        description="... or after this many destination records, whichever comes first.",
    )
    commit_max_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        alias="REPLICATION_COMMIT_MAX_BYTES",
        description="... or after this many bytes of staging envelopes read.",
    )
    commit_min_interval_ms: int = Field(
        0,
        ge=0,
        le=20_000,
        alias="REPLICATION_COMMIT_MIN_INTERVAL_MS",
        description="Stage 2 commits no transaction younger than this (unless it reached "
        "the records or bytes limit), not even when staging has nothing more at hand (0: at "
        "once). At low rates it bounds stage 2's transactions to 1000/this a second, for up "
        "to this much more latency; at most REPLICATION_COMMIT_INTERVAL_MS.",
    )
    on_bad_envelope: Literal["deadletter", "stop"] = Field(
        "deadletter",
        alias="REPLICATION_ON_BAD_ENVELOPE",
        description="A staging record that is not a valid envelope of this flow: copy it to "
        "`__exactly.<flow>.deadletter` with the reason in its headers (`deadletter`), or `stop`.",
    )
    groups_include: Patterns = Field(
        (),
        alias="OFFSETSYNC_GROUPS_INCLUDE",
        description="Comma-separated regular expressions, full match, like the topics': consumer "
        "groups whose offsets are synced. Opt-in (none by default), as syncing commits offsets "
        "on the target.",
        json_schema_extra={"shown_default": "empty (no group)"},
    )
    groups_exclude: Patterns = Field(
        (),
        alias="OFFSETSYNC_GROUPS_EXCLUDE",
        description="Consumer groups never synced; wins over the include list.",
    )
    sync_interval_ms: int = Field(
        5000,
        ge=100,
        le=3_600_000,
        alias="OFFSETSYNC_INTERVAL_MS",
        description="How often offset sync reads the source groups' offsets and commits their "
        "translations on the target; a source commit reaches the target about one interval "
        "later.",
    )
    sync_waiting_warn_ms: int = Field(
        30_000,
        ge=0,
        le=86_400_000,
        alias="OFFSETSYNC_WAITING_WARN_MS",
        description="A group whose next record's copy is not committed on the destination for "
        "this long is logged at WARNING (once, and again at INFO when it is): offset sync waits "
        "for replication rather than guess, so a stopped or lagging stage 2 would otherwise "
        'leave it silent. Metric `exactly_offsetsync_groups{state="waiting"}` counts such '
        "groups at every cycle. A source topic stage 1 has not taken in for this long (no "
        "topic id in the flow's meta topic: its groups are not translated) is warned about "
        "once too.",
    )
    state_dir: Annotated[Path, BeforeValidator(non_empty)] = Field(
        Path("state"),
        alias="STATE_DIR",
        description="Where the deduplicator keeps its RocksDB state.",
        json_schema_extra={"shown_default": "`./state`"},
    )
    metrics_port: int = Field(
        9464,
        ge=0,
        le=65535,
        alias="METRICS_PORT",
        description="HTTP port for Prometheus metrics and health; `0` turns it off. 9464 is the "
        "Prometheus exporter default; give each role its own when several share a host. Every "
        "role also exports the standard process metrics (`process_resident_memory_bytes`, "
        "`process_cpu_seconds_total`, open files).",
    )
    metrics_host: Annotated[str, BeforeValidator(non_empty)] = Field(
        "0.0.0.0",
        alias="METRICS_HOST",
        description="The address `METRICS_PORT` binds to: `0.0.0.0` (every IPv4 address, what a "
        "container's probes need), `127.0.0.1` to keep it on the host, `::` for IPv6.",
    )
    credentials_check_ms: int = Field(
        10_000,
        ge=0,
        le=3_600_000,
        alias="EXACTLY_CREDENTIALS_CHECK_MS",
        description="How often a role looks at the files its clients' credentials come from "
        "(every `ssl.*.location` and `..._PROPERTIES_<PROPERTY>_FILE`): librdkafka reads them "
        "only when a client is made, so when they change (a renewed certificate) and librdkafka "
        "accepts the new ones, the role drains and exits 3 to start again with them; `0` turns "
        "the watch off.",
    )
    log_level: LogLevel = Field(
        "INFO", alias="EXACTLY_LOG_LEVEL", description="`DEBUG`, `INFO`, `WARNING` or `ERROR`."
    )
    spark_jars: Annotated[str, BeforeValidator(non_empty)] | None = Field(
        None,
        alias="EXACTLY_SPARK_JARS",
        description="`exactly validate`: Spark's Kafka connector as local jar files "
        "(comma-separated, globs allowed: `/opt/spark-jars/*.jar`) instead of resolving it from "
        "the local Maven repository (`~/.m2`) when Spark starts; the validator image sets it.",
    )
    log_format: LogFormat = Field(
        "text",
        alias="EXACTLY_LOG_FORMAT",
        description="`text`: one `key=value` line per event; `json`: one JSON object per line, "
        "for log shippers.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_settings reads the environment (and only the environment, never a .env file)
        # and hands it over as init values; pydantic-settings reads nothing by itself.
        return (init_settings,)

    @model_validator(mode="after")
    def _one_way_to_pick_topics(self) -> Settings:
        check_one_way_to_pick_topics(self)
        return self

    @model_validator(mode="after")
    def _rename_is_whole(self) -> Settings:
        check_rename_is_whole(self)
        return self

    @model_validator(mode="after")
    def _commit_floor_below_interval(self) -> Settings:
        check_commit_floor(self)
        return self

    @model_validator(mode="after")
    def _room_for_workers(self) -> Settings:
        check_room_for_workers(self)
        return self

    def destination_topic(self, source_topic: str) -> str | None:
        """The destination name of ``source_topic``, or None when it is not replicated
        (runtime/topic_naming.py)."""
        return destination_topic(self, source_topic)

    @property
    def identity(self) -> str:
        """This instance's stable name to Kafka (runtime/identity.py)."""
        return self.instance_id or host_identity()

    @property
    def names(self) -> FlowNames:
        """The flow's topics and client identities (runtime/names.py)."""
        return FlowNames(self.flow, self.staging_topic)

    def syncs_group(self, group_id: str) -> bool:
        """Whether offset sync translates ``group_id``'s offsets (exclude wins; none by default)."""
        return matches_any(self.groups_include, group_id) and not matches_any(
            self.groups_exclude, group_id
        )


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``environ`` (default: ``os.environ``); ConfigError if anything is wrong."""
    return load_from(Settings, environ)


def variable_name(path: tuple[str, ...]) -> str:
    """The variable of a field path: ``("source", "topic")`` -> KAFKA_CLUSTERS_SOURCE_TOPIC."""
    return variable_of(Settings, path)
