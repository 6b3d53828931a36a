"""Refused credentials or certificates stop a role at once with one line saying so, where
librdkafka reports only a "Broker transport failure" that start-up would retry for minutes."""

from __future__ import annotations

import datetime

import pytest

from localkafka.security import make_credentials
from tests.replication.processes import role_processes
from tests.secured import secured_topic_flow


def _secured_role(source_cluster, target_cluster, unique_topic, role: str) -> dict[str, str]:
    """``role``'s environment of a flow of one new topic between the secured listeners."""
    envs = secured_topic_flow(
        source_cluster, target_cluster, unique_topic, 1, OFFSETSYNC_GROUPS_INCLUDE="auth-group"
    )
    return envs[role]


def _fatal_line(tmp_path, role: str, env: dict[str, str]) -> tuple[str, str]:
    """The one line of ``role``, started with ``env``, saying why it stopped (exit 1), and its
    whole log."""
    with role_processes(tmp_path) as roles:
        process = roles.start(role, env)
        status = process.wait(60)  # not the 2 minutes transient errors are waited out
        log = process.log_text()
    assert status == 1, log[-3000:]
    [line] = [line for line in log.splitlines() if "stopped by a fatal error" in line]
    # Named at the first look between start-up's short attempts, not after a whole 10 s one
    # (runtime/topics.py): from the role's first line to this one, on the role's own clock.
    first = next(entry for entry in log.splitlines() if entry.startswith("ts="))
    assert _stamp(line) - _stamp(first) < _NAMED_WITHIN_S, log[-3000:]
    return line, log


# 10.0-10.1 s each before the first attempt was shortened. Looks come about 1, 4 and 9 s into
# start-up: a refusal librdkafka reports after the first look, on a loaded machine, is named at
# the second.
_NAMED_WITHIN_S = 8.0


def _stamp(line: str) -> float:
    """A role log line's time (``ts=2026-12-02T05:14:08.034Z ...``) in seconds."""
    stamp = line.split(" ", 1)[0].removeprefix("ts=")
    return datetime.datetime.fromisoformat(stamp).timestamp()


@pytest.mark.parametrize("role", ["replicator", "offsetsync"])
def test_a_wrong_password_stops_the_role_naming_the_refusal(
    source_cluster, target_cluster, tmp_path, unique_topic, role
):
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    secured = _secured_role(source_cluster, target_cluster, unique_topic, role)
    secured["KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE"] = str(wrong)
    line, log = _fatal_line(tmp_path, role, secured)
    source = secured["KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS"]
    assert f"authentication to {source} failed" in line
    assert "SASL authentication error" in line
    assert "not-the-password" not in log


@pytest.mark.parametrize(
    ("role", "refused"),
    [
        ("replicator", "client"),
        ("deduplicator", "client"),
        ("offsetsync", "client"),
        ("deduplicator", "broker"),
    ],
)
def test_a_refused_certificate_stops_the_role_naming_whose(
    source_cluster, target_cluster, tmp_path, unique_topic, role, refused
):
    """A certificate refused on either side of the handshake with the target (mutual TLS):
    librdkafka fails each call as a transient transport failure."""
    secured = _secured_role(source_cluster, target_cluster, unique_topic, role)
    # Credentials of another CA: the target's brokers do not trust its certificates, and its
    # CA does not verify theirs.
    stranger = make_credentials(tmp_path / "another-ca", (role,))
    prefix = "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SSL"
    if refused == "client":
        secured[f"{prefix}_CERTIFICATE_LOCATION"] = str(stranger.certificate_path(role))
        secured[f"{prefix}_KEY_LOCATION"] = str(stranger.key_path(role))
    else:
        secured[f"{prefix}_CA_LOCATION"] = str(stranger.ca_path)
    line, _ = _fatal_line(tmp_path, role, secured)
    target = secured["KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS"]
    if refused == "client":
        assert f"the cluster at {target} refused this client's certificate" in line
        assert "ssl.certificate.location" in line
    else:
        assert f"could not verify the certificate of the cluster at {target}" in line
        assert "ssl.ca.location" in line
