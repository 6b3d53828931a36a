"""Settings as an operator meets them: environment in, settings or one-line ConfigError out."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from runtime import ConfigError, ExactlyError, is_secret_property, load_settings, render_config
from runtime.errors import DestinationCollisionError
from runtime.properties import librdkafka_refusal
from runtime.settings import DESTINATION_PREFIX, SOURCE_PREFIX, Settings, destination_names

SOURCE = "KAFKA_CLUSTERS_SOURCE_"
DESTINATION = "KAFKA_CLUSTERS_DESTINATION_"
SEED = {
    f"{SOURCE}BOOTSTRAP_SERVERS": "source-1:9092,source-2:9092",
    f"{SOURCE}TOPIC": "orders",
    f"{DESTINATION}BOOTSTRAP_SERVERS": "target-1:9092",
    f"{DESTINATION}TOPIC": "orders-copy",
}
RENAME = "REPLICATION_TOPICS_RENAME_"
CLUSTERS = {
    key: SEED[key] for key in (f"{SOURCE}BOOTSTRAP_SERVERS", f"{DESTINATION}BOOTSTRAP_SERVERS")
}


def load(**overrides: str | None):
    env = {**CLUSTERS, **overrides}
    return load_settings({name: value for name, value in env.items() if value is not None})


def config_error(**overrides: str | None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load(**overrides)
    return caught.value


# The seed's four variables.


def test_seed_variables_map_exactly():
    loaded = load_settings(SEED)
    assert loaded.source.bootstrap_servers == ("source-1:9092", "source-2:9092")
    assert loaded.destination.bootstrap_servers == ("target-1:9092",)
    assert loaded.source.topic == "orders"
    assert loaded.destination.topic == "orders-copy"
    # No client of ours asks a broker to create a topic by naming it, and each tries a broker
    # that went away again at least every second (runtime/cluster_settings.py).
    ours = {"allow.auto.create.topics": "false", "reconnect.backoff.max.ms": "1000"}
    assert loaded.source.client_config() == {
        "bootstrap.servers": "source-1:9092,source-2:9092",
        **ours,
    }
    assert loaded.destination.client_config() == {
        "bootstrap.servers": "target-1:9092",
        **ours,
    }
    assert loaded.destination_topic("orders") == "orders-copy"
    assert loaded.destination_topic("orders-eu") is None


def test_source_topic_alone_keeps_its_name():
    loaded = load(KAFKA_CLUSTERS_SOURCE_TOPIC="orders")
    assert loaded.destination_topic("orders") == "orders"
    assert loaded.destination_topic("payments") is None


def test_application_name_of_the_seeds_manifests_names_the_flow():
    assert load(APPLICATION_NAME="orders-dr").flow == "orders-dr"
    assert load(APPLICATION_NAME="orders-dr", REPLICATION_FLOW="orders-dr").flow == "orders-dr"
    assert str(config_error(APPLICATION_NAME="orders-dr", REPLICATION_FLOW="other")) == (
        "APPLICATION_NAME='orders-dr': names the flow, and REPLICATION_FLOW=other names another: "
        "set one of the two"
    )
    assert str(config_error(APPLICATION_NAME="orders dr")).startswith(
        "APPLICATION_NAME: 'orders dr' is not a valid flow name"
    )


def test_log_format_and_metrics_host():
    loaded = load(EXACTLY_LOG_FORMAT="JSON", METRICS_HOST="127.0.0.1")
    assert (loaded.log_format, loaded.metrics_host) == ("json", "127.0.0.1")
    assert (load().log_format, load().metrics_host) == ("text", "0.0.0.0")
    assert str(config_error(EXACTLY_LOG_FORMAT="xml")).startswith("EXACTLY_LOG_FORMAT='xml': ")
    assert str(config_error(METRICS_HOST="")).startswith("METRICS_HOST")


def test_defaults():
    loaded = load()
    assert loaded.flow == "default"
    assert str(loaded.state_dir) == "state"
    assert loaded.metrics_port == 9464
    assert loaded.log_level == "INFO"
    assert loaded.destination_topic("orders") is None  # nothing picked: roles decide if that is ok
    assert not loaded.syncs_group("billing")  # offset sync is opt-in


def test_bootstrap_entries_are_stripped_and_ipv6_needs_brackets():
    loaded = load(KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS=" a:1 ,  [::1]:9092,b.example.com:65535 ")
    assert loaded.source.bootstrap_servers == ("a:1", "[::1]:9092", "b.example.com:65535")
    assert (
        loaded.source.client_config()["bootstrap.servers"] == "a:1,[::1]:9092,b.example.com:65535"
    )


def test_values_are_immutable():
    loaded = load()
    with pytest.raises(ValidationError):
        loaded.flow = "other"
    with pytest.raises(ValidationError):
        loaded.source.topic = "other"


def test_log_level_is_case_insensitive():
    assert load(EXACTLY_LOG_LEVEL="debug").log_level == "DEBUG"


# Topics and groups: include, exclude, full match, exclude wins.


def test_include_is_a_full_match_and_exclude_wins():
    loaded = load(
        REPLICATION_TOPICS_INCLUDE="orders.*, payments",
        REPLICATION_TOPICS_EXCLUDE=".*-tmp",
    )
    assert loaded.destination_topic("orders") == "orders"
    assert loaded.destination_topic("orders-eu") == "orders-eu"
    assert loaded.destination_topic("payments") == "payments"
    assert loaded.destination_topic("payments-eu") is None  # full match, not search
    assert loaded.destination_topic("my-orders") is None
    assert loaded.destination_topic("orders-tmp") is None  # excluded although included


def test_exclude_wins_over_the_seed_topic():
    loaded = load(KAFKA_CLUSTERS_SOURCE_TOPIC="orders", REPLICATION_TOPICS_EXCLUDE="orders")
    assert loaded.destination_topic("orders") is None


def test_internal_topics_never_match_an_include_list():
    loaded = load(REPLICATION_TOPICS_INCLUDE=".*")
    assert loaded.destination_topic("__consumer_offsets") is None
    assert loaded.destination_topic("__transaction_state") is None
    assert loaded.destination_topic("_schemas") == "_schemas"


def test_groups_include_and_exclude():
    loaded = load(OFFSETSYNC_GROUPS_INCLUDE="billing-.*,audit", OFFSETSYNC_GROUPS_EXCLUDE=".*-test")
    assert loaded.syncs_group("billing-eu")
    assert loaded.syncs_group("audit")
    assert not loaded.syncs_group("audit-2")
    assert not loaded.syncs_group("billing-test")


# Every error: a ConfigError naming the variable, one line, saying what is wrong.


@pytest.mark.parametrize(
    ("variable", "value", "what"),
    [
        (f"{SOURCE}BOOTSTRAP_SERVERS", None, "is required but not set"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "", "is empty"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "a:1,,b:2", "entry 2 is empty"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "a:1,", "entry 2 is empty"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "h:0", "port 0 is outside 1..65535"),
        (f"{DESTINATION}BOOTSTRAP_SERVERS", "h:70000", "port 70000 is outside 1..65535"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "h:http", "port 'http' is not a number"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", ":9092", "has no host"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "::1:9092", "IPv6 address in brackets"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "[::1]", "has no port"),
        (f"{SOURCE}BOOTSTRAP_SERVERS", "[nope]:1", "'nope' is not an IPv6 address"),
        (f"{SOURCE}TOPIC", "a/b", "'a/b' is not a valid Kafka topic name"),
        (f"{SOURCE}TOPIC", "..", "is not a valid Kafka topic name"),
        (f"{SOURCE}TOPIC", "x" * 250, "is not a valid Kafka topic name"),
        (f"{DESTINATION}TOPIC", "copy", f"is set but {SOURCE}TOPIC is not"),
        (
            "REPLICATION_TOPICS_INCLUDE",
            "ok,a[",
            "expression 'a[' is not a valid regular expression",
        ),
        ("OFFSETSYNC_GROUPS_EXCLUDE", "(x", "expression '(x' is not a valid regular expression"),
        ("REPLICATION_FLOW", "my flow", "'my flow' is not a valid flow name"),
        ("REPLICATION_FLOW", "f" * 101, "is not a valid flow name"),
        ("METRICS_PORT", "70000", "less than or equal to 65535"),
        ("METRICS_PORT", "-1", "greater than or equal to 0"),
        ("METRICS_PORT", "http", "valid integer"),
        ("EXACTLY_LOG_LEVEL", "verbose", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ("STATE_DIR", "", "is empty"),
        ("REPLICATION_FLOWS", "x", "unknown variable; did you mean REPLICATION_FLOW?"),
        (f"{SOURCE}TOPICS", "x", f"unknown variable; did you mean {SOURCE}TOPIC?"),
        ("kafka_clusters_source_topic", "x", f"did you mean {SOURCE}TOPIC?"),
        ("EXACTLY_FROBNICATE", "x", "unknown variable"),
        (f"{SOURCE}PROPERTIES_FOO_BAR", "1", 'No such configuration property: "foo.bar"'),
        (f"{SOURCE}PROPERTIES_ACKS", "banana", "rejected by librdkafka: Invalid value"),
        (f"{DESTINATION}PROPERTIES_LINGER_MS", "-5", "outside allowed range"),
        (f"{SOURCE}PROPERTIES_security_protocol", "SSL", "upper-cased, dots as underscores"),
        (f"{SOURCE}PROPERTIES_BOOTSTRAP_SERVERS", "a:1", f"set {SOURCE}BOOTSTRAP_SERVERS instead"),
    ],
)
def test_errors_name_the_variable_in_one_line(variable, value, what):
    error = config_error(**{variable: value})
    assert error.variable == variable
    assert str(error).startswith(variable)
    assert what in str(error)
    assert "\n" not in str(error)
    assert isinstance(error, ExactlyError)


def test_one_topic_and_an_include_list_do_not_mix():
    error = config_error(KAFKA_CLUSTERS_SOURCE_TOPIC="orders", REPLICATION_TOPICS_INCLUDE="o.*")
    assert str(error) == (
        "REPLICATION_TOPICS_INCLUDE='o.*': cannot be combined with KAFKA_CLUSTERS_SOURCE_TOPIC: "
        "use KAFKA_CLUSTERS_SOURCE_TOPIC (and KAFKA_CLUSTERS_DESTINATION_TOPIC) for one topic, "
        "or REPLICATION_TOPICS_INCLUDE for many"
    )


def test_a_commit_floor_above_the_commit_interval_is_refused():
    error = config_error(REPLICATION_COMMIT_MIN_INTERVAL_MS="500")
    assert str(error) == (
        "REPLICATION_COMMIT_MIN_INTERVAL_MS='500': is above REPLICATION_COMMIT_INTERVAL_MS=100: "
        "raise that as well"
    )
    settings = load(REPLICATION_COMMIT_MIN_INTERVAL_MS="500", REPLICATION_COMMIT_INTERVAL_MS="500")
    assert (settings.commit_min_interval_ms, settings.commit_interval_ms) == (500, 500)


def test_a_commit_interval_a_transaction_could_outlive_its_timeout_with_is_refused():
    """A transaction open longer than its 60 s timeout is aborted by its coordinator with a new
    producer epoch, which librdkafka reports as fenced: stage 2 exited on every transaction,
    naming an identity twin that did not exist."""
    error = config_error(REPLICATION_COMMIT_INTERVAL_MS="120000")
    assert str(error).startswith("REPLICATION_COMMIT_INTERVAL_MS='120000': ")
    assert "20000" in str(error)
    error = config_error(
        REPLICATION_COMMIT_MIN_INTERVAL_MS="90000", REPLICATION_COMMIT_INTERVAL_MS="20000"
    )
    assert str(error).startswith("REPLICATION_COMMIT_MIN_INTERVAL_MS='90000': ")


def test_error_format_quotes_the_value():
    error = config_error(KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS="localhost")
    assert str(error) == (
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS='localhost': "
        "entry 'localhost' has no port (expected host:port)"
    )


def test_unknown_variable_does_not_echo_its_value():
    error = config_error(KAFKA_CLUSTERS_SOURCE_PROPERTY_SASL_PASSWORD="hunter2")
    assert "hunter2" not in str(error)


def test_variables_outside_our_prefixes_are_ignored():
    assert (
        load(PATH="/usr/bin", KAFKA_HOME="/opt/kafka", LOCALKAFKA_CACHE_DIR="/tmp").flow
        == "default"
    )


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(
        [
            f"{SOURCE}BOOTSTRAP_SERVERS",
            f"{SOURCE}TOPIC",
            "REPLICATION_TOPICS_INCLUDE",
            f"{RENAME}PATTERN",
            f"{RENAME}REPLACEMENT",
            "REPLICATION_FLOW",
            "METRICS_PORT",
            "STATE_DIR",
            "EXACTLY_LOG_LEVEL",
            f"{SOURCE}PROPERTIES_CLIENT_ID",
            f"{SOURCE}PROPERTIES_ACKS",
        ]
    ),
    value=st.text(alphabet=st.characters(exclude_characters="\x00"), max_size=30),
)
def test_any_value_gives_settings_or_config_error(name, value):
    try:
        load(**{name: value})
    except ConfigError as caught:
        error = caught
    else:
        return
    assert error.variable == name
    assert "\n" not in str(error)


# librdkafka passthrough and secrets.


def test_passthrough_properties_reach_client_config():
    loaded = load(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SECURITY_PROTOCOL="SASL_SSL",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_MECHANISM="PLAIN",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_USERNAME="replicator",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD="pw",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_LOG_LEVEL="3",
        KAFKA_CLUSTERS_DESTINATION_PROPERTIES_ACKS="all",
    )
    assert loaded.source.client_config() == {
        "bootstrap.servers": CLUSTERS[f"{SOURCE}BOOTSTRAP_SERVERS"],
        "allow.auto.create.topics": "false",
        "reconnect.backoff.max.ms": "1000",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "replicator",
        "sasl.password": "pw",
        "log_level": "3",
    }
    assert loaded.destination.client_config()["acks"] == "all"


def test_a_users_reconnect_backoff_wins_over_ours():
    loaded = load(KAFKA_CLUSTERS_DESTINATION_PROPERTIES_RECONNECT_BACKOFF_MAX_MS="10000")
    assert loaded.destination.client_config()["reconnect.backoff.max.ms"] == "10000"
    assert loaded.source.client_config()["reconnect.backoff.max.ms"] == "1000"


def test_a_users_longer_first_reconnect_wait_raises_our_maximum_to_it(tmp_path):
    """librdkafka refuses a maximum below reconnect.backoff.ms; a user who set only the first
    wait must never meet that refusal of a value they never gave, however they gave it."""
    loaded = load(KAFKA_CLUSTERS_SOURCE_PROPERTIES_RECONNECT_BACKOFF_MS="2500")
    config = loaded.source.client_config()
    assert config["reconnect.backoff.max.ms"] == "2500"
    assert librdkafka_refusal(config) is None
    in_a_file = tmp_path / "first-wait"
    in_a_file.write_text("2500\n")
    loaded = load(KAFKA_CLUSTERS_SOURCE_PROPERTIES_RECONNECT_BACKOFF_MS_FILE=str(in_a_file))
    config = loaded.source.client_config()
    assert config["reconnect.backoff.max.ms"] == "2500"
    assert librdkafka_refusal(config) is None
    # Written as librdkafka reads it but not as plain digits: librdkafka's own maximum stays.
    loaded = load(KAFKA_CLUSTERS_SOURCE_PROPERTIES_RECONNECT_BACKOFF_MS="+2500")
    config = loaded.source.client_config()
    assert "reconnect.backoff.max.ms" not in config
    assert librdkafka_refusal(config) is None


def test_consumer_and_producer_properties_are_both_accepted_silently(capfd):
    loaded = load(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_AUTO_OFFSET_RESET="earliest",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_ISOLATION_LEVEL="read_committed",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_ENABLE_IDEMPOTENCE="true",
    )
    assert loaded.source.client_config()["auto.offset.reset"] == "earliest"
    assert capfd.readouterr().err == ""  # librdkafka's "consumer property ignored" stays quiet


def test_a_bad_value_of_a_consumer_property_is_still_caught():
    error = config_error(KAFKA_CLUSTERS_SOURCE_PROPERTIES_AUTO_OFFSET_RESET="banana")
    assert error.variable == "KAFKA_CLUSTERS_SOURCE_PROPERTIES_AUTO_OFFSET_RESET"


def test_properties_checked_together_blame_the_right_variable():
    # ssl.key.pem alone passes; librdkafka parses it only once security.protocol is SSL.
    error = config_error(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SECURITY_PROTOCOL="SSL",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SSL_KEY_PEM="not-a-key",
    )
    assert error.variable == "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SSL_KEY_PEM"
    assert "not-a-key" not in str(error)
    assert "'****'" in str(error)


def test_properties_wrong_only_together_blame_the_cluster():
    error = config_error(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SECURITY_PROTOCOL="SASL_SSL",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_MECHANISM="PLAIN",
    )
    assert error.variable == "KAFKA_CLUSTERS_SOURCE_PROPERTIES_*"
    assert "sasl.username and sasl.password must be set" in str(error)


def test_secret_from_file_reaches_client_config_only(tmp_path):
    secret_file = tmp_path / "password"
    secret_file.write_text("s3cr3t-value\n")
    loaded = load(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_USERNAME="replicator",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE=str(secret_file),
    )
    assert loaded.source.client_config()["sasl.password"] == "s3cr3t-value"
    assert loaded.source.client_config()["sasl.username"] == "replicator"
    for shown in (repr(loaded), str(loaded), repr(loaded.source), render_config(loaded)):
        assert "s3cr3t-value" not in shown
    assert "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD=****\n" in render_config(loaded)


def test_any_file_value_is_secret_even_for_a_harmless_property(tmp_path):
    (tmp_path / "client-id").write_text("private-name")
    loaded = load(KAFKA_CLUSTERS_SOURCE_PROPERTIES_CLIENT_ID_FILE=str(tmp_path / "client-id"))
    assert loaded.source.client_config()["client.id"] == "private-name"
    assert "private-name" not in render_config(loaded) + repr(loaded)


def test_inline_secret_is_masked_everywhere():
    loaded = load(KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SASL_PASSWORD="hunter2")
    assert loaded.destination.client_config()["sasl.password"] == "hunter2"
    for shown in (repr(loaded), str(loaded), render_config(loaded)):
        assert "hunter2" not in shown


def test_missing_secret_file_names_variable_and_path(tmp_path):
    missing = tmp_path / "nope"
    error = config_error(KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE=str(missing))
    assert str(error) == (
        f"KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE='{missing}': "
        "cannot read the file: No such file or directory"
    )


def test_bad_value_from_file_is_not_echoed(tmp_path):
    (tmp_path / "protocol").write_text("banana\n")
    error = config_error(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SECURITY_PROTOCOL_FILE=str(tmp_path / "protocol")
    )
    assert error.variable == "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SECURITY_PROTOCOL_FILE"
    assert str(tmp_path / "protocol") in str(error)
    assert "banana" not in str(error)


def test_masking_a_short_secret_leaves_the_message_readable():
    error = config_error(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD="p",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_ACKS="banana",
    )
    assert str(error) == (
        "KAFKA_CLUSTERS_SOURCE_PROPERTIES_ACKS='banana': rejected by librdkafka: "
        'Invalid value for configuration property "request.required.acks"'
    )


def test_value_and_file_for_one_property_is_an_error(tmp_path):
    (tmp_path / "password").write_text("x")
    error = config_error(
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD="y",
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE=str(tmp_path / "password"),
    )
    assert error.variable == "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE"
    assert "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD sets the same property" in str(error)


def test_property_named_file_is_not_read_from_a_file():
    loaded = load(KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_OAUTHBEARER_ASSERTION_FILE="/run/jwt")
    assert loaded.source.client_config()["sasl.oauthbearer.assertion.file"] == "/run/jwt"


@pytest.mark.parametrize(
    ("name", "from_file", "secret"),
    [
        ("sasl.password", False, True),
        ("ssl.key.password", False, True),
        ("ssl.keystore.password", False, True),
        ("ssl.key.pem", False, True),
        ("sasl.oauthbearer.config", False, True),
        ("sasl.oauthbearer.client.secret", False, True),
        ("sasl.oauthbearer.assertion.private.key.passphrase", False, True),
        ("client.id", True, True),
        ("sasl.username", False, False),
        ("ssl.key.location", False, False),
        ("ssl.certificate.pem", False, False),
        ("security.protocol", False, False),
    ],
)
def test_secret_rule(name, from_file, secret):
    assert is_secret_property(name, from_file=from_file) is secret


# exactly config


def test_render_config_lists_every_variable_with_defaults_marked():
    env = {**SEED, "METRICS_PORT": "9500", f"{SOURCE}PROPERTIES_SASL_PASSWORD": "hunter2"}
    env[f"{SOURCE}PROPERTIES_ACKS"] = "all"
    assert render_config(load_settings(env)) == (
        "EXACTLY_CREDENTIALS_CHECK_MS=10000  # default\n"
        "EXACTLY_LOG_FORMAT=text  # default\n"
        "EXACTLY_LOG_LEVEL=INFO  # default\n"
        "EXACTLY_SPARK_JARS=  # default\n"
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS=target-1:9092\n"
        "KAFKA_CLUSTERS_DESTINATION_TOPIC=orders-copy\n"
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS=source-1:9092,source-2:9092\n"
        "KAFKA_CLUSTERS_SOURCE_PROPERTIES_ACKS=all\n"
        "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD=****\n"
        "KAFKA_CLUSTERS_SOURCE_TOPIC=orders\n"
        "METRICS_HOST=0.0.0.0  # default\n"
        "METRICS_PORT=9500\n"
        "OFFSETSYNC_GROUPS_EXCLUDE=  # default\n"
        "OFFSETSYNC_GROUPS_INCLUDE=  # default\n"
        "OFFSETSYNC_INTERVAL_MS=5000  # default\n"
        "OFFSETSYNC_WAITING_WARN_MS=30000  # default\n"
        "REPLICATION_COMMIT_INTERVAL_MS=100  # default\n"
        "REPLICATION_COMMIT_MAX_BYTES=16777216  # default\n"
        "REPLICATION_COMMIT_MAX_RECORDS=100000  # default\n"
        "REPLICATION_COMMIT_MIN_INTERVAL_MS=0  # default\n"
        "REPLICATION_DESTINATION_TOPIC={topic}  # default\n"
        "REPLICATION_ENVELOPE_MAX_BYTES=1048576  # default\n"
        "REPLICATION_ENVELOPE_MAX_RECORDS=500  # default\n"
        "REPLICATION_FLOW=default  # default\n"
        "REPLICATION_INSTANCE_ID=  # default\n"
        "REPLICATION_ON_BAD_ENVELOPE=deadletter  # default\n"
        "REPLICATION_ON_DATA_LOSS=stop  # default\n"
        "REPLICATION_ON_TOPIC_RECREATED=stop  # default\n"
        "REPLICATION_PROVENANCE_HEADER=true  # default\n"
        "REPLICATION_STAGING_COMPRESSION=lz4  # default\n"
        "REPLICATION_STAGING_PARTITIONS=12  # default\n"
        "REPLICATION_STAGING_RETENTION_MS=604800000  # default\n"
        "REPLICATION_STAGING_TOPIC=  # default\n"
        "REPLICATION_STALL_TIMEOUT_MS=30000  # default\n"
        "REPLICATION_START_FROM=earliest  # default\n"
        "REPLICATION_TOPICS_EXCLUDE=  # default\n"
        "REPLICATION_TOPICS_INCLUDE=  # default\n"
        "REPLICATION_TOPICS_RENAME_PATTERN=  # default\n"
        "REPLICATION_TOPICS_RENAME_REPLACEMENT=  # default\n"
        "REPLICATION_WORKERS=1  # default\n"
        "STATE_DIR=state  # default\n"
    )


def test_render_config_shows_the_implied_destination_topic():
    rendered = render_config(load(KAFKA_CLUSTERS_SOURCE_TOPIC="orders"))
    assert (
        "KAFKA_CLUSTERS_DESTINATION_TOPIC=orders  # default: same as KAFKA_CLUSTERS_SOURCE_TOPIC\n"
        in rendered
    )


def test_rendered_config_loads_back_to_the_same_settings():
    env = {**CLUSTERS, "REPLICATION_TOPICS_INCLUDE": "a.*,b", "OFFSETSYNC_GROUPS_INCLUDE": "g"}
    env |= {f"{RENAME}PATTERN": r"a(?P<rest>.*)", f"{RENAME}REPLACEMENT": r"b\g<rest>"}
    loaded = load_settings(env)
    lines = [line.split("  #")[0] for line in render_config(loaded).splitlines()]
    rendered_env = dict(line.split("=", 1) for line in lines if not line.endswith("="))
    assert load_settings(rendered_env) == loaded


# Only the environment given, never os.environ or a .env file behind its back.


def test_reads_os_environ_when_given_nothing(monkeypatch):
    for name, value in CLUSTERS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("REPLICATION_FLOW", "from-os-environ")
    assert load_settings().flow == "from-os-environ"


def test_explicit_environ_ignores_os_environ_and_dotenv(monkeypatch, tmp_path):
    monkeypatch.setenv("REPLICATION_FLOW", "from-os-environ")
    monkeypatch.setenv("FLOW", "from-os-environ")
    (tmp_path / ".env").write_text("REPLICATION_FLOW=from-dotenv\nflow=from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    assert load_settings(CLUSTERS).flow == "default"


def test_destination_topic_template_names_included_topics():
    loaded = load(REPLICATION_TOPICS_INCLUDE="orders.*", REPLICATION_DESTINATION_TOPIC="dr.{topic}")
    assert loaded.destination_topic("orders-eu") == "dr.orders-eu"
    assert loaded.destination_topic("payments") is None


@pytest.mark.parametrize("template", ["dr.topic", "{topic}.{topic}", "bad name {topic}"])
def test_a_bad_destination_topic_template_is_named(template):
    with pytest.raises(ConfigError) as raised:
        load(REPLICATION_TOPICS_INCLUDE="x", REPLICATION_DESTINATION_TOPIC=template)
    assert str(raised.value).startswith("REPLICATION_DESTINATION_TOPIC=")


def test_settings_name_the_flow_s_topics_from_its_name_and_staging_override():
    assert load(REPLICATION_FLOW="eu").names.staging == "__exactly.eu.staging"
    overridden = load(REPLICATION_FLOW="eu", REPLICATION_STAGING_TOPIC="stage-eu").names
    assert (overridden.staging, overridden.checkpoints) == ("stage-eu", "__exactly.eu.checkpoints")


def test_an_instance_id_without_room_for_its_workers_names_both_variables():
    assert load(REPLICATION_INSTANCE_ID="a" * 98, REPLICATION_WORKERS="9").workers == 9
    error = config_error(REPLICATION_INSTANCE_ID="a" * 98, REPLICATION_WORKERS="10")
    assert error.variable == "REPLICATION_INSTANCE_ID"
    assert "REPLICATION_WORKERS=10" in str(error)


def test_a_property_value_that_is_not_utf8_names_its_variable():
    # os.environ hands a non-UTF-8 byte to Python as a lone surrogate (surrogateescape).
    error = config_error(
        **{f"{SOURCE}PROPERTIES_CLIENT_ID": b"caf\xe9".decode(errors="surrogateescape")}
    )
    assert str(error) == f"{SOURCE}PROPERTIES_CLIENT_ID: the value is not UTF-8 text"


def test_the_cluster_prefixes_are_the_settings_aliases():
    assert Settings.model_fields["source"].alias == SOURCE_PREFIX
    assert Settings.model_fields["destination"].alias == DESTINATION_PREFIX


# Renaming by regular expression (issue 19): the rename, then the template.


def rename(pattern: str = r"(.*)\.orders", replacement: str = r"\1.sales", **more: str):
    variables = {f"{RENAME}PATTERN": pattern, f"{RENAME}REPLACEMENT": replacement}
    return load(**{"REPLICATION_TOPICS_INCLUDE": ".*", **variables, **more})


def test_a_topic_the_pattern_matches_is_renamed_and_others_keep_their_name():
    loaded = rename()
    assert loaded.destination_topic("eu.orders") == "eu.sales"
    assert loaded.destination_topic("eu.payments") == "eu.payments"  # no match
    assert loaded.destination_topic("eu.orders.v2") == "eu.orders.v2"  # a full match only
    assert loaded.destination_topic("__consumer_offsets") is None


def test_named_groups_and_the_whole_match_can_be_used():
    loaded = rename(r"(?P<region>[a-z]+)-(?P<kind>.*)", r"\g<kind>.\g<region>.\g<0>")
    assert loaded.destination_topic("eu-orders") == "orders.eu.eu-orders"


def test_the_template_applies_to_the_renamed_name():
    loaded = rename(REPLICATION_DESTINATION_TOPIC="dc1.{topic}")
    assert loaded.destination_topic("eu.orders") == "dc1.eu.sales"
    assert loaded.destination_topic("eu.payments") == "dc1.eu.payments"


def test_exclude_and_include_look_at_the_source_name():
    loaded = rename(REPLICATION_TOPICS_INCLUDE=r".*\.orders", REPLICATION_TOPICS_EXCLUDE="us.*")
    assert loaded.destination_topic("eu.orders") == "eu.sales"
    assert loaded.destination_topic("eu.sales") is None
    assert loaded.destination_topic("us.orders") is None


def test_a_rename_to_an_invalid_topic_name_raises_like_the_template():
    with pytest.raises(ValueError, match="is not a valid Kafka topic name") as raised:
        rename(replacement=r"\1 sales").destination_topic("eu.orders")
    assert str(raised.value) == (
        f"{RENAME}PATTERN renames eu.orders to an invalid name: 'eu sales' is not a valid Kafka "
        'topic name (1..249 characters of a-z A-Z 0-9 . _ -, not "." or "..")'
    )
    with pytest.raises(ValueError, match="is not a valid Kafka topic name"):
        rename(r"x(.*)", r"\1").destination_topic("x")  # renamed to ""
    with pytest.raises(ValueError, match="is not a valid Kafka topic name"):
        rename(r"(.*)", r"\1\1").destination_topic("o" * 125)  # 250 characters


@pytest.mark.parametrize(
    ("variables", "line"),
    [
        (
            {f"{RENAME}PATTERN": r"(.*)\.orders"},
            rf"{RENAME}PATTERN='(.*)\\.orders': is set but {RENAME}REPLACEMENT is not: the two "
            "make the rename together",
        ),
        (
            {f"{RENAME}REPLACEMENT": r"\1.sales"},
            rf"{RENAME}REPLACEMENT='\\1.sales': is set but {RENAME}PATTERN is not: the two make "
            "the rename together",
        ),
        (
            {f"{RENAME}PATTERN": "(.*", f"{RENAME}REPLACEMENT": "x"},
            f"{RENAME}PATTERN='(.*': is not a valid regular expression: missing ), unterminated "
            "subpattern at position 0",
        ),
        (
            {f"{RENAME}PATTERN": "", f"{RENAME}REPLACEMENT": "x"},
            f"{RENAME}PATTERN='': is empty (expected a regular expression)",
        ),
        (
            {f"{RENAME}PATTERN": "(.*)", f"{RENAME}REPLACEMENT": ""},
            f"{RENAME}REPLACEMENT='': is empty",
        ),
        (
            {f"{RENAME}PATTERN": r"(.*)\.orders", f"{RENAME}REPLACEMENT": r"\2.sales"},
            rf"{RENAME}REPLACEMENT='\\2.sales': refers to a group that {RENAME}PATTERN does not "
            "have: invalid group reference 2 at position 1",
        ),
        (
            {f"{RENAME}PATTERN": r"(.*)\.orders", f"{RENAME}REPLACEMENT": r"\g<name>.sales"},
            rf"{RENAME}REPLACEMENT='\\g<name>.sales': refers to a group that {RENAME}PATTERN "
            "does not have: unknown group name 'name'",
        ),
        (
            {f"{RENAME}PATTERN": r"(.*)\.orders", f"{RENAME}REPLACEMENT": r"\q"},
            rf"{RENAME}REPLACEMENT='\\q': is not a valid replacement: bad escape \q at position 0",
        ),
        (
            {
                f"{SOURCE}TOPIC": "eu.orders",
                f"{RENAME}PATTERN": r"(.*)\.orders",
                f"{RENAME}REPLACEMENT": r"\1.sales",
            },
            rf"{RENAME}PATTERN='(.*)\\.orders': cannot be combined with {SOURCE}TOPIC: the one "
            f"topic's destination name is {DESTINATION}TOPIC",
        ),
    ],
)
def test_a_wrong_rename_stops_start_up_with_one_line(variables, line):
    error = config_error(**variables)
    assert str(error) == line
    assert error.variable == line.split("=")[0].split(":")[0]


# Destination names of many topics at once: one source per destination, none of the flow's.


def test_destination_names_are_those_of_the_replicated_topics_in_the_order_given():
    loaded = rename(REPLICATION_TOPICS_EXCLUDE="tmp", REPLICATION_DESTINATION_TOPIC="dc1.{topic}")
    topics = ["eu.payments", "eu.orders", "tmp", "__consumer_offsets", "eu.orders"]
    names = destination_names(loaded, topics)
    assert list(names.items()) == [
        ("eu.payments", "dc1.eu.payments"),
        ("eu.orders", "dc1.eu.sales"),
    ]


def test_an_invalid_destination_name_raises_or_is_left_out():
    loaded = rename(replacement=r"\1 sales")
    with pytest.raises(ValueError, match=r"renames eu\.orders to an invalid name"):
        destination_names(loaded, ["eu.orders", "eu.payments"])
    left_out = []
    names = destination_names(
        loaded, ["eu.orders", "eu.payments"], invalid=lambda t, e: left_out.append((t, str(e)))
    )
    assert names == {"eu.payments": "eu.payments"}
    assert [topic for topic, _ in left_out] == ["eu.orders"]


def collision(settings, topics) -> DestinationCollisionError:
    with pytest.raises(DestinationCollisionError) as raised:
        destination_names(settings, topics)
    error = raised.value
    assert isinstance(error, ConfigError)  # exit 2, like a wrong variable
    assert "\n" not in str(error)
    return error


def test_two_topics_renamed_to_one_name_collide():
    loaded = rename(REPLICATION_DESTINATION_TOPIC="dc1.{topic}")
    # Either order: the line is the same.
    for topics in (["eu.sales", "a", "eu.orders"], ["eu.orders", "eu.sales"]):
        assert str(collision(loaded, topics)) == (
            f"{RENAME}PATTERN: source topics eu.orders and eu.sales would both be copied to "
            "dc1.eu.sales: one destination topic per source topic (rename them apart, or leave "
            "one out with REPLICATION_TOPICS_EXCLUDE)"
        )
    # Excluding one mends it.
    mended = rename(
        REPLICATION_DESTINATION_TOPIC="dc1.{topic}", REPLICATION_TOPICS_EXCLUDE="eu.sales"
    )
    assert destination_names(mended, ["eu.orders", "eu.sales"]) == {"eu.orders": "dc1.eu.sales"}


def test_at_work_a_newcomer_that_collides_is_left_out_and_the_established_topic_kept():
    loaded = rename(REPLICATION_DESTINATION_TOPIC="dc1.{topic}")
    left_out: list[tuple[str, str]] = []

    def names(topics, established):
        left_out.clear()
        return destination_names(
            loaded,
            topics,
            established=established,
            left_out=lambda topic, error: left_out.append((topic, str(error))),
        )

    # The established topic keeps its name whichever sorts first; the newcomer is left out,
    # with the collision's own line.
    for established, newcomer in (("eu.sales", "eu.orders"), ("eu.orders", "eu.sales")):
        assert names(["eu.orders", "eu.payments", "eu.sales"], {established}) == {
            "eu.payments": "dc1.eu.payments",
            established: "dc1.eu.sales",
        }
        assert left_out == [(newcomer, str(collision(loaded, ["eu.orders", "eu.sales"])))]
    # Two newcomers: neither has a claim.
    assert names(["eu.orders", "eu.payments", "eu.sales"], {"eu.payments"}) == {
        "eu.payments": "dc1.eu.payments"
    }
    assert sorted(topic for topic, _ in left_out) == ["eu.orders", "eu.sales"]
    # Two established topics made to clash by a change of the settings: that is still an error.
    with pytest.raises(DestinationCollisionError):
        names(["eu.orders", "eu.sales"], {"eu.orders", "eu.sales"})


def test_a_topic_copied_onto_a_topic_of_the_flow_collides():
    loaded = load(
        REPLICATION_TOPICS_INCLUDE=".*",
        REPLICATION_FLOW="eu",
        REPLICATION_DESTINATION_TOPIC="__exactly.eu.{topic}",
    )
    error = collision(loaded, ["changelog"])
    assert str(error) == (
        "REPLICATION_DESTINATION_TOPIC: source topic changelog would be copied to "
        "__exactly.eu.changelog, the flow's own changelog topic: give it another destination "
        "name"
    )
    # An overridden staging topic (and its .meta) too, though not starting with __.
    staged = load(REPLICATION_TOPICS_INCLUDE=".*", REPLICATION_STAGING_TOPIC="stage")
    assert str(collision(staged, ["orders", "stage.meta"])) == (
        "REPLICATION_STAGING_TOPIC: source topic stage.meta would be copied to stage.meta, the "
        "flow's own meta topic: give it another destination name"
    )


def test_a_topic_copied_to_a_name_starting_with_two_underscores_collides():
    error = collision(rename(replacement=r"__\1"), ["eu.orders"])
    assert str(error) == (
        f"{RENAME}PATTERN: source topic eu.orders would be copied to __eu: names starting with "
        "__ are Kafka's internal topics and the flows'"
    )
    seed = load_settings({**SEED, f"{DESTINATION}TOPIC": "__orders"})
    assert collision(seed, ["orders"]).variable == f"{DESTINATION}TOPIC"
