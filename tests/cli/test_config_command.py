"""`exactly config` as a user runs it: the effective configuration, or one line and exit 2."""

from __future__ import annotations

import os

import pytest

from runtime.settings_docs import BEGIN, END, reference_table
from tests.commands import run_exactly

VALID = {
    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source-1:9092,source-2:9092",
    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "target-1:9092",
    "KAFKA_CLUSTERS_SOURCE_TOPIC": "orders",
    "KAFKA_CLUSTERS_DESTINATION_TOPIC": "orders-replica",
}


def _environ(**overrides: str) -> dict[str, str]:
    # The caller's own KAFKA_CLUSTERS_* etc. must not leak into what is being tested.
    prefixes = ("KAFKA_CLUSTERS_", "REPLICATION_", "OFFSETSYNC_", "EXACTLY_")
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith(prefixes)}
    base.pop("STATE_DIR", None)
    base.pop("METRICS_PORT", None)
    return {**base, **VALID, **overrides}


def test_prints_the_seed_variables_and_masks_a_secret_from_a_file(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("hunter2-very-secret\n")
    result = run_exactly(
        "config",
        env=_environ(
            KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SECURITY_PROTOCOL="SASL_SSL",
            KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SASL_MECHANISM="PLAIN",
            KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SASL_USERNAME="replicator",
            KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SASL_PASSWORD_FILE=str(secret),
        ),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS=source-1:9092,source-2:9092" in lines
    assert "KAFKA_CLUSTERS_SOURCE_TOPIC=orders" in lines
    assert "KAFKA_CLUSTERS_DESTINATION_TOPIC=orders-replica" in lines
    assert "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SASL_USERNAME=replicator" in lines
    assert "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SASL_PASSWORD=****" in lines
    assert "hunter2" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("overrides", "variable", "says"),
    [
        (
            {"KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source-1:9092,localhost"},
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS",
            "has no port",
        ),
        (
            {"KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVER": "source-1:9092"},
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVER",
            "unknown variable",
        ),
        (
            {"KAFKA_CLUSTERS_SOURCE_PROPERTIES_SSL_KEY_PASSWORD_FILE": "/nonexistent/key-password"},
            "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SSL_KEY_PASSWORD_FILE",
            "/nonexistent/key-password",
        ),
        (
            {"KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": ""},
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS",
            "",
        ),
    ],
)
def test_a_bad_setting_gives_one_line_naming_it_and_exit_2(overrides, variable, says):
    result = run_exactly("config", env=_environ(**overrides))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"exactly: configuration error: {variable}")
    assert says in lines[0]
    assert "Traceback" not in result.stderr


def test_a_missing_required_variable_is_named():
    environ = _environ()
    del environ["KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS"]
    result = run_exactly("config", env=environ)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "exactly: configuration error: KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS: "
        "is required but not set"
    )


def test_markdown_prints_the_reference_table_without_reading_the_environment():
    environ = _environ()
    del environ["KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS"]
    result = run_exactly("config", "--markdown", env=environ)
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference_table()


def test_write_docs_replaces_only_the_generated_part(tmp_path):
    page = tmp_path / "configuration.md"
    page.write_text(f"# Configuration\n\nprose\n\n{BEGIN}\n| old |\n{END}\n\nmore prose\n")
    result = run_exactly("config", "--write-docs", str(page), env=_environ())
    assert result.returncode == 0, result.stderr
    assert page.read_text() == (
        f"# Configuration\n\nprose\n\n{BEGIN}\n{reference_table()}{END}\n\nmore prose\n"
    )
