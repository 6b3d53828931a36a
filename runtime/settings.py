"""The configuration of every role: environment variables, the same names everywhere.

A field with an ``alias`` is an environment variable; a field of type ``ClusterSettings`` is
a group of them (``KAFKA_CLUSTERS_SOURCE`` + ``_`` + ``BOOTSTRAP_SERVERS``). Adding a
variable is one field here: the unknown-variable check, error messages and ``exactly config``
all read the fields.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from runtime.errors import ConfigError, DestinationCollisionError
from runtime.identity import host_identity
from runtime.names import FlowNames
from runtime.properties import (
    MASK,
    PROPERTIES_INFIX,
    is_property_variable,
    read_client_properties,
)
from runtime.values import (
    FLOW_NAME_MAX,
    TOPIC_PLACEHOLDER,
    check_flow_name,
    check_topic_name,
    check_topic_template,
    matches_any,
    parse_bootstrap_servers,
    parse_pattern,
    parse_patterns,
)

# An environment variable under one of these prefixes must be one we know, or start-up stops.
# STATE_DIR, METRICS_PORT and METRICS_HOST are known by their exact names only.
PREFIXES = ("KAFKA_CLUSTERS_", "REPLICATION_", "OFFSETSYNC_", "EXACTLY_")
# kafka-reo's manifests (the seed) name the application with APPLICATION_NAME: here it names the
# flow, as REPLICATION_FLOW does, rather than being ignored without a word.
APPLICATION_NAME = "APPLICATION_NAME"
DEFAULT_MARK = "  # default"
_BOOTSTRAP_ALIAS = "BOOTSTRAP_SERVERS"


def _from_text(parse: Callable[[str], object]) -> BeforeValidator:
    """Apply ``parse`` to text from the environment; values given in Python pass as they are."""
    return BeforeValidator(lambda value: parse(value) if isinstance(value, str) else value)


def _non_empty(value: object) -> object:
    if value == "":
        raise ValueError("is empty")
    return value


Servers = Annotated[tuple[str, ...], _from_text(parse_bootstrap_servers)]
TopicName = Annotated[str, AfterValidator(check_topic_name)]
Patterns = Annotated[tuple[re.Pattern[str], ...], _from_text(parse_patterns)]
Pattern = Annotated[re.Pattern[str], _from_text(parse_pattern)]
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR"], _from_text(lambda text: text.strip().upper())
]
LogFormat = Annotated[Literal["text", "json"], _from_text(lambda text: text.strip().lower())]


class ClusterSettings(BaseModel):
    """One Kafka cluster: where it is, the seed's one topic, and librdkafka passthrough."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    # mypy checks Field like a dataclass field, whose alias must be a literal; pydantic's is not.
    bootstrap_servers: Servers = Field(  # type: ignore[literal-required]
        alias=_BOOTSTRAP_ALIAS,
        description="Required. Comma-separated host:port list; IPv6 in brackets ([::1]:9092).",
    )
    topic: TopicName | None = Field(
        None,
        alias="TOPIC",
        description="The seed's one-topic form: the source topic, and its name on the "
        "destination (default: the same name).",
    )
    # Not variables themselves: filled from <cluster>_PROPERTIES_* (runtime.properties).
    properties: dict[str, str] = Field(default_factory=dict)
    secret_properties: dict[str, SecretStr] = Field(default_factory=dict)

    def client_config(self) -> dict[str, str]:
        """bootstrap.servers and the passthrough properties, ready for confluent_kafka."""
        config = {
            "bootstrap.servers": ",".join(self.bootstrap_servers),
            # Never create a topic by asking for it. Brokers create one on any metadata request
            # that names it (auto.create.topics.enable, on by default), and librdkafka's producers
            # and admin clients ask that way: stage 1's check for a destination topic created it
            # with the broker's num.partitions (1) a moment before its own create (6), which then
            # answered "already exists", and stage 2 could not write the source's partition 3.
            # Every topic of a flow is created by the role that owns it, as its source has it.
            "allow.auto.create.topics": "false",
        }
        config.update(self.properties)
        config.update(
            {name: value.get_secret_value() for name, value in self.secret_properties.items()}
        )
        return config


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
        description="Comma-separated regular expressions, full match: source topics to "
        "replicate (not with KAFKA_CLUSTERS_SOURCE_TOPIC). Topics starting with __ "
        "(Kafka's internal ones) never match.",
    )
    topics_exclude: Patterns = Field(
        (),
        alias="REPLICATION_TOPICS_EXCLUDE",
        description="Comma-separated regular expressions, full match: source topics never "
        "replicated; wins over the include list and over KAFKA_CLUSTERS_SOURCE_TOPIC.",
    )
    rename_pattern: Pattern | None = Field(
        None,
        alias="REPLICATION_TOPICS_RENAME_PATTERN",
        description="A regular expression, full match against the name of each source topic "
        "the include list picks: a topic it matches is renamed by "
        "REPLICATION_TOPICS_RENAME_REPLACEMENT, one it does not match keeps its name; then "
        "REPLICATION_DESTINATION_TOPIC applies to the result. Set both or neither; not with "
        "KAFKA_CLUSTERS_SOURCE_TOPIC.",
    )
    rename_replacement: Annotated[str, BeforeValidator(_non_empty)] | None = Field(
        None,
        alias="REPLICATION_TOPICS_RENAME_REPLACEMENT",
        description="The new name of a topic REPLICATION_TOPICS_RENAME_PATTERN matches, "
        "\\1 or \\g<name> standing for the pattern's groups (pattern (.*)\\.orders, "
        "replacement \\1.sales: eu.orders -> eu.sales). Two replicated topics given one "
        "destination name, or one given a name of the flow's own topics or starting with __, "
        "stop stage 1.",
    )
    topic_template: Annotated[str, AfterValidator(check_topic_template)] = Field(
        "{topic}",
        alias="REPLICATION_DESTINATION_TOPIC",
        description="Destination name of each topic picked by REPLICATION_TOPICS_INCLUDE: "
        "{topic} is the source name, or its new name when REPLICATION_TOPICS_RENAME_PATTERN "
        "renames it (default: the same name; e.g. dr.{topic}).",
    )
    flow: Annotated[str, AfterValidator(check_flow_name)] = Field(
        "default",
        alias="REPLICATION_FLOW",
        description="Names the flow; staging, changelog and transactional ids derive from it.",
    )
    instance_id: Annotated[str, AfterValidator(check_flow_name)] | None = Field(
        None,
        alias="REPLICATION_INSTANCE_ID",
        description="A stable name for this instance, unique per instance of a flow (default: "
        "the host name, which is a StatefulSet pod's name): static group membership, so a "
        "restarted instance takes its partitions back at once instead of after the group's "
        "session timeout; and stage 2's transactional.id.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        alias="REPLICATION_WORKERS",
        description="Processes of a stage in one container (`exactly replicator`, `exactly "
        "deduplicator`, `exactly run`): each a member of the stage's group with an identity "
        "of its own (<identity>-<n>) and state directory (STATE_DIR/worker-<n>), for a "
        "machine with more cores than one Python process uses.",
    )
    staging_topic: TopicName | None = Field(
        None,
        alias="REPLICATION_STAGING_TOPIC",
        description="The staging topic on the target (default: __exactly.<flow>.staging).",
    )
    staging_partitions: int = Field(
        12,
        ge=1,
        le=10000,
        alias="REPLICATION_STAGING_PARTITIONS",
        description="Partitions (lanes) of the staging topic when stage 1 creates it; recorded "
        "then, and a staging topic that no longer has them stops start-up.",
    )
    staging_retention_ms: int = Field(
        7 * 24 * 3600 * 1000,
        ge=3600 * 1000,
        alias="REPLICATION_STAGING_RETENTION_MS",
        description="retention.ms of the staging topic when created: longer than the worst "
        "stage-2 outage.",
    )
    staging_compression: Literal["none", "lz4", "zstd", "snappy", "gzip"] = Field(
        "lz4",
        alias="REPLICATION_STAGING_COMPRESSION",
        description="compression.type of stage 1's envelopes (each a batch of records of one "
        "source partition). The destination's comes from "
        "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_COMPRESSION_TYPE (default none).",
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
        description="Envelope size budget; a single larger record travels alone.",
    )
    start_from: Literal["earliest", "latest"] = Field(
        "earliest",
        alias="REPLICATION_START_FROM",
        description="Where stage 1 starts in a source partition it has never committed: "
        "earliest (all history) or latest. Logged for every such partition.",
    )
    on_data_loss: Literal["stop"] = Field(
        "stop",
        alias="REPLICATION_ON_DATA_LOSS",
        description="When a source partition's committed offset fell behind its retention: stop "
        "that partition, logged and counted with the number of records lost (the only policy "
        "so far; to go on, reset the group's offset for it deliberately).",
    )
    on_topic_recreated: Literal["stop", "replicate"] = Field(
        "stop",
        alias="REPLICATION_ON_TOPIC_RECREATED",
        description="A source topic deleted and recreated under the same name (its id changed): "
        "stop its partitions (default), or replicate the new topic from REPLICATION_START_FROM "
        "into the same destination. Logged either way.",
    )
    stall_timeout_ms: int = Field(
        30000,
        ge=1000,
        alias="REPLICATION_STALL_TIMEOUT_MS",
        description="An envelope unacknowledged for this long ends the stage-1 session.",
    )
    provenance_header: bool = Field(
        True,
        alias="REPLICATION_PROVENANCE_HEADER",
        description="Stage 2 adds the exactly.origin header (source cluster, partition, offset) "
        "to every destination record; false writes the records exactly as they were.",
    )
    commit_interval_ms: int = Field(
        100,
        ge=10,
        alias="REPLICATION_COMMIT_INTERVAL_MS",
        description="Stage 2 commits its transaction at least this often while records flow "
        "(and at once whenever staging has nothing more at hand).",
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
    on_bad_envelope: Literal["deadletter", "stop"] = Field(
        "deadletter",
        alias="REPLICATION_ON_BAD_ENVELOPE",
        description="A staging record that is not a valid envelope of this flow: copy it to "
        "__exactly.<flow>.deadletter with the reason in headers (default), or stop.",
    )
    groups_include: Patterns = Field(
        (),
        alias="OFFSETSYNC_GROUPS_INCLUDE",
        description="Comma-separated regular expressions, full match: consumer groups whose "
        "offsets are synced. Default: none (committing offsets on the target is opt-in).",
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
    state_dir: Annotated[Path, BeforeValidator(_non_empty)] = Field(
        Path("state"), alias="STATE_DIR", description="Where the deduplicator keeps RocksDB."
    )
    metrics_port: int = Field(
        9464,
        ge=0,
        le=65535,
        alias="METRICS_PORT",
        description="HTTP port for metrics and health; 0 turns it off. 9464 is the "
        "Prometheus exporter default; give each role its own when several share a host.",
    )
    metrics_host: Annotated[str, BeforeValidator(_non_empty)] = Field(
        "0.0.0.0",
        alias="METRICS_HOST",
        description="The address METRICS_PORT binds to: 0.0.0.0 (every IPv4 address, what a "
        "container's probes need), 127.0.0.1 to keep it on the host, :: for IPv6.",
    )
    log_level: LogLevel = Field(
        "INFO", alias="EXACTLY_LOG_LEVEL", description="DEBUG, INFO, WARNING or ERROR."
    )
    spark_jars: Annotated[str, BeforeValidator(_non_empty)] | None = Field(
        None,
        alias="EXACTLY_SPARK_JARS",
        description="exactly validate: Spark's Kafka connector as local jar files "
        "(comma-separated, globs allowed) instead of resolving it from the local Maven "
        "repository when Spark starts; the validator image sets it.",
    )
    log_format: LogFormat = Field(
        "text",
        alias="EXACTLY_LOG_FORMAT",
        description="text (one key=value line per event) or json (one JSON object per line, "
        "for log shippers).",
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
        source_topic, destination_topic, include = (
            variable_name(path)
            for path in (("source", "topic"), ("destination", "topic"), ("topics_include",))
        )
        if self.destination.topic is not None and self.source.topic is None:
            raise ConfigError(
                destination_topic,
                f"is set but {source_topic} is not: it names the copy of that one topic",
                self.destination.topic,
            )
        if self.source.topic is not None and self.topics_include:
            raise ConfigError(
                include,
                f"cannot be combined with {source_topic}: use {source_topic} (and "
                f"{destination_topic}) for one topic, or {include} for many",
                _render(self.topics_include),
            )
        return self

    @model_validator(mode="after")
    def _rename_is_whole(self) -> Settings:
        pattern, replacement, source_topic, destination_topic = (
            variable_name(path)
            for path in (
                ("rename_pattern",),
                ("rename_replacement",),
                ("source", "topic"),
                ("destination", "topic"),
            )
        )
        if self.rename_pattern is None:
            if self.rename_replacement is not None:
                raise ConfigError(
                    replacement,
                    f"is set but {pattern} is not: the two make the rename together",
                    self.rename_replacement,
                )
            return self
        if self.rename_replacement is None:
            raise ConfigError(
                pattern,
                f"is set but {replacement} is not: the two make the rename together",
                self.rename_pattern.pattern,
            )
        if self.source.topic is not None:
            raise ConfigError(
                pattern,
                f"cannot be combined with {source_topic}: the one topic's destination name is "
                f"{destination_topic}",
                self.rename_pattern.pattern,
            )
        try:
            # Parses the replacement against the pattern's groups, even without a match.
            self.rename_pattern.sub(self.rename_replacement, "")
        except IndexError as exc:  # \g<name> of a group the pattern does not have
            raise ConfigError(
                replacement,
                f"refers to a group that {pattern} does not have: {exc}",
                self.rename_replacement,
            ) from None
        except re.error as exc:
            what = (
                f"refers to a group that {pattern} does not have"
                if "invalid group reference" in str(exc) or "unknown group name" in str(exc)
                else "is not a valid replacement"
            )
            raise ConfigError(replacement, f"{what}: {exc}", self.rename_replacement) from None
        return self

    @model_validator(mode="after")
    def _room_for_workers(self) -> Settings:
        # Each worker is named <identity>-<n>: checked here, where the user's variable can be
        # named, rather than in a child that would reject a name the user never wrote.
        if self.workers > 1 and self.instance_id is not None:
            longest = f"{self.instance_id}-{self.workers}"
            if len(longest) > FLOW_NAME_MAX:
                raise ConfigError(
                    "REPLICATION_INSTANCE_ID",
                    f"is too long for REPLICATION_WORKERS={self.workers}: its workers are "
                    f"named <id>-<n> ({longest[:20]}...), at most {FLOW_NAME_MAX} characters",
                    self.instance_id,
                )
        return self

    def destination_topic(self, source_topic: str) -> str | None:
        """The destination name of ``source_topic``, or None when it is not replicated.

        The exclude list wins; then the seed's one topic (renamed by
        KAFKA_CLUSTERS_DESTINATION_TOPIC) or the include list (renamed by
        REPLICATION_TOPICS_RENAME_PATTERN when it matches, then named by
        REPLICATION_DESTINATION_TOPIC; the same name by default). ValueError when that makes
        no valid topic name. Whether two topics' names collide: ``destination_names``.
        """
        if matches_any(self.topics_exclude, source_topic):
            return None
        if self.source.topic is not None:
            if source_topic != self.source.topic:
                return None
            return self.destination.topic or source_topic
        if source_topic.startswith("__") or not matches_any(self.topics_include, source_topic):
            return None
        renamed = self._renamed(source_topic)
        destination = self.topic_template.replace(TOPIC_PLACEHOLDER, renamed)
        # A long source name can make the templated one too long: say so, never truncate.
        return check_topic_name(destination)

    def _renamed(self, source_topic: str) -> str:
        """``source_topic`` renamed by REPLICATION_TOPICS_RENAME_PATTERN, or as it is."""
        if self.rename_pattern is None or self.rename_replacement is None:
            return source_topic
        match = self.rename_pattern.fullmatch(source_topic)
        if match is None:
            return source_topic
        renamed = match.expand(self.rename_replacement)
        try:
            return check_topic_name(renamed)
        except ValueError as exc:
            raise ValueError(
                f"{variable_name(('rename_pattern',))} renames {source_topic} to an invalid "
                f"name: {exc}"
            ) from None

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


def destination_names(
    settings: Settings,
    source_topics: Iterable[str],
    *,
    invalid: Callable[[str, ValueError], None] | None = None,
    established: Collection[str] = (),
    left_out: Callable[[str, DestinationCollisionError], None] | None = None,
) -> dict[str, str]:
    """The destination name of each of ``source_topics`` the settings replicate, by source
    name, in the order given.

    DestinationCollisionError (one line naming the source topics and the destination) when two
    of them get one destination name, or one gets a name of the flow's own topics
    (runtime/names.py) or one starting with __ (Kafka's internal topics): stage 2 would mix
    records of two topics in one, or write into what is not a copy. A name that is not a valid
    topic name raises ValueError, or goes to ``invalid`` (the topic left out) when given.

    With ``left_out`` (stage 1 at work), a colliding topic that is not ``established`` (already
    replicated) is left out and given to ``left_out`` instead: a topic created later under a
    clashing name cannot take the destination, nor stop the copying, of the one there first.
    Two newcomers that clash are both left out (neither has a claim); only a collision of two
    established topics (the naming settings changed under them) still raises.
    """
    names: dict[str, str] = {}
    for topic in dict.fromkeys(source_topics):
        try:
            destination = settings.destination_topic(topic)
        except ValueError as exc:
            if invalid is None:
                raise
            invalid(topic, exc)
            continue
        if destination is not None:
            names[topic] = destination
    kept = _without_collisions(settings, names, set(established), left_out)
    return {source: destination for source, destination in names.items() if source in kept}


def _without_collisions(
    settings: Settings,
    names: Mapping[str, str],
    established: set[str],
    left_out: Callable[[str, DestinationCollisionError], None] | None,
) -> set[str]:
    """The sources of ``names`` that keep their destination (``destination_names``)."""
    own = {name: what for what, name in settings.names.topics.items()}
    claimed: dict[str, str] = {}  # destination -> the source that has it
    kept: set[str] = set()
    # The established claim their names first, whatever the order of the names.
    for source in sorted(names, key=lambda source: source not in established):
        destination = names[source]
        error = _collision(settings, own, claimed.get(destination), source, destination)
        if error is None:
            claimed[destination] = source
            kept.add(source)
            continue
        if left_out is None or source in established:
            raise error
        left_out(source, error)
        other = claimed.get(destination)
        if other is not None and other not in established and other in kept:
            kept.discard(other)
            left_out(other, error)
    return kept


def _collision(
    settings: Settings, own: Mapping[str, str], other: str | None, source: str, destination: str
) -> DestinationCollisionError | None:
    """Why ``source`` may not be copied to ``destination`` (``other`` has it already), if so."""
    if destination in own:
        return DestinationCollisionError(
            _naming_variable(settings, [source], own[destination]),
            f"source topic {source} would be copied to {destination}, the flow's own "
            f"{own[destination]} topic: give it another destination name",
        )
    if destination.startswith("__"):
        return DestinationCollisionError(
            _naming_variable(settings, [source]),
            f"source topic {source} would be copied to {destination}: names starting with "
            "__ are Kafka's internal topics and the flows'",
        )
    if other is not None and other != source:
        first, second = sorted((other, source))
        return DestinationCollisionError(
            _naming_variable(settings, [first, second]),
            f"source topics {first} and {second} would both be copied to {destination}: "
            "one destination topic per source topic (rename them apart, or leave one out "
            f"with {variable_name(('topics_exclude',))})",
        )
    return None


def _naming_variable(settings: Settings, sources: list[str], flow_topic: str = "") -> str:
    """The variable that gave ``sources`` their destination name (``flow_topic``: the flow's
    topic it collides with)."""
    if settings.source.topic is not None:
        return variable_name(("destination", "topic"))
    pattern = settings.rename_pattern
    if pattern is not None and any(pattern.fullmatch(source) for source in sources):
        return variable_name(("rename_pattern",))
    if settings.topic_template != TOPIC_PLACEHOLDER:
        return variable_name(("topic_template",))
    if flow_topic in ("staging", "meta") and settings.staging_topic is not None:
        return variable_name(("staging_topic",))
    return variable_name(("topics_include",))


def role_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """The environment of a role started as a child process: this process's, without the
    product's own variables (a shell's exports for other clusters must not leak into it),
    with unbuffered output, plus `settings`."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(PREFIXES) and name != APPLICATION_NAME
    }
    return {**inherited, "PYTHONUNBUFFERED": "1", **settings}


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``environ`` (default: ``os.environ``); ConfigError if anything is wrong."""
    env = dict(os.environ if environ is None else environ)
    _reject_unknown(env)
    _flow_from_application_name(env)
    data: dict[str, Any] = {}
    for cluster in _clusters():
        properties = read_client_properties(
            cluster, env, bootstrap_variable=f"{cluster}_{_BOOTSTRAP_ALIAS}"
        )
        data[cluster] = {
            "properties": {p.name: p.value for p in properties if not p.secret},
            "secret_properties": {p.name: SecretStr(p.value) for p in properties if p.secret},
        }
    for variable in _variables():
        if variable.name in env:
            _put(data, variable.aliases, env[variable.name])
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise _config_error(exc, env) from None


def render_config(settings: Settings) -> str:
    """``NAME=value`` per effective variable, sorted; defaults marked, secrets as ``****``."""
    lines = []
    for variable in _variables():
        parent: BaseModel = settings
        for part in variable.path[:-1]:
            parent = getattr(parent, part)
        value = getattr(parent, variable.path[-1])
        mark = "" if variable.path[-1] in parent.model_fields_set else DEFAULT_MARK
        if variable.path == ("destination", "topic") and value is None and settings.source.topic:
            value = settings.source.topic
            mark = f"{DEFAULT_MARK}: same as {variable_name(('source', 'topic'))}"
        lines.append(f"{variable.name}={_render(value)}{mark}")
    for cluster, field_name in _clusters().items():
        cluster_settings: ClusterSettings = getattr(settings, field_name)
        shown = dict(cluster_settings.properties)
        shown.update(dict.fromkeys(cluster_settings.secret_properties, MASK))
        for prop, value in shown.items():
            lines.append(f"{cluster}_{PROPERTIES_INFIX}{prop.upper().replace('.', '_')}={value}")
    return "\n".join(sorted(lines)) + "\n"


def variable_name(path: tuple[str, ...]) -> str:
    """The variable of a field path: ``("source", "topic")`` -> KAFKA_CLUSTERS_SOURCE_TOPIC."""
    return next(variable.name for variable in _variables() if variable.path == path)


@dataclass(frozen=True)
class _Variable:
    name: str  # KAFKA_CLUSTERS_SOURCE_TOPIC
    path: tuple[str, ...]  # ("source", "topic"): the fields
    aliases: tuple[str, ...]  # ("KAFKA_CLUSTERS_SOURCE", "TOPIC"): what pydantic's loc says


def _is_group(info: FieldInfo) -> bool:
    return isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)


@functools.cache
def _variables() -> tuple[_Variable, ...]:
    """Every environment variable, in field order: a field with an alias is one."""
    found = []
    for name, info in Settings.model_fields.items():
        if info.alias is None:
            continue
        if not _is_group(info):
            found.append(_Variable(info.alias, (name,), (info.alias,)))
            continue
        group: type[BaseModel] = info.annotation  # type: ignore[assignment]
        for sub_name, sub in group.model_fields.items():
            if sub.alias is not None:
                found.append(
                    _Variable(
                        f"{info.alias}_{sub.alias}", (name, sub_name), (info.alias, sub.alias)
                    )
                )
    return tuple(found)


@functools.cache
def _clusters() -> dict[str, str]:
    """Variable prefix of each cluster (KAFKA_CLUSTERS_SOURCE) -> its field (source)."""
    return {
        info.alias: name
        for name, info in Settings.model_fields.items()
        if info.alias and _is_group(info)
    }


def _flow_from_application_name(env: dict[str, str]) -> None:
    name = env.get(APPLICATION_NAME)
    if name is None:
        return
    flow_variable = str(Settings.model_fields["flow"].alias)
    flow = env.get(flow_variable)
    if flow is not None and flow != name:
        raise ConfigError(
            APPLICATION_NAME,
            f"names the flow, and {flow_variable}={flow} names another: set one of the two",
            name,
        )
    try:
        env[flow_variable] = check_flow_name(name)
    except ValueError as exc:
        raise ConfigError(APPLICATION_NAME, str(exc)) from None


def _reject_unknown(env: Mapping[str, str]) -> None:
    for name in sorted(env):
        if _is_known(name) or not name.upper().startswith(PREFIXES):
            continue
        guess = _guess(name)
        raise ConfigError(
            name, f"unknown variable; did you mean {guess}?" if guess else "unknown variable"
        )


def _is_known(name: str) -> bool:
    return any(variable.name == name for variable in _variables()) or any(
        is_property_variable(cluster, name) for cluster in _clusters()
    )


def _guess(name: str) -> str | None:
    upper = name.upper()
    if _is_known(upper):
        return upper  # the environment is case-sensitive; our names are upper-case
    known = [variable.name for variable in _variables()]
    close = difflib.get_close_matches(upper, known, n=1, cutoff=0.8)
    return close[0] if close else None


def _put(data: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    data[path[-1]] = value


def _config_error(exc: ValidationError, env: Mapping[str, str]) -> ConfigError:
    """The first of pydantic's errors as a ConfigError naming the environment variable."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(str(part) for part in error["loc"])
    variable = next(
        (v.name for v in _variables() if loc[: len(v.aliases)] == v.aliases),
        "_".join(loc),
    )
    if error["type"] == "missing":
        return ConfigError(variable, "is required but not set")
    # Our own validators raise ValueError("what is wrong"); pydantic's types say it themselves.
    message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    return ConfigError(variable, message, env.get(variable))


def _render(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(_render(item) for item in value)
    if isinstance(value, re.Pattern):
        return str(value.pattern)
    return str(value)
