"""Renewed credential files are seen, judged by librdkafka, and end a role by a drain with exit 3
(runtime/credential_files.py); files librdkafka refuses are reported once and left alone. No
broker is involved: librdkafka loads and checks certificates and keys when a client is made."""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from localkafka.security import Credentials, make_credentials, renewed_certificate
from runtime import credential_files, load_settings
from runtime.credential_files import DESTINATION, SOURCE, CertificateValidity, CredentialFiles
from runtime.role import EXIT_RELOAD, run_role
from tests.files import replace_file

USER = "alice"
_DAY = datetime.timedelta(days=1)


@pytest.fixture
def credentials(tmp_path: Path) -> Credentials:
    return make_credentials(tmp_path / "ca", (USER,))


@pytest.fixture
def mounted(tmp_path: Path, credentials: Credentials) -> Path:
    """The user's credentials where a role reads them (a mounted secret's directory)."""
    directory = tmp_path / "mounted"
    directory.mkdir()
    shutil.copy(credentials.ca_path, directory / "ca.pem")
    shutil.copy(credentials.certificate_path(USER), directory / "tls.crt")
    shutil.copy(credentials.key_path(USER), directory / "tls.key")
    shutil.copy(credentials.password_path(USER), directory / "password")
    return directory


def environment(mounted: Path) -> dict[str, str]:
    source = "KAFKA_CLUSTERS_SOURCE_PROPERTIES_"
    destination = "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_"
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "KAFKA_CLUSTERS_SOURCE_TOPIC": "orders",
        f"{source}SECURITY_PROTOCOL": "SASL_SSL",
        f"{source}SASL_MECHANISM": "SCRAM-SHA-512",
        f"{source}SASL_USERNAME": USER,
        f"{source}SASL_PASSWORD_FILE": str(mounted / "password"),
        f"{source}SSL_CA_LOCATION": str(mounted / "ca.pem"),
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:2",
        f"{destination}SECURITY_PROTOCOL": "SSL",
        f"{destination}SSL_CA_LOCATION": str(mounted / "ca.pem"),
        f"{destination}SSL_CERTIFICATE_LOCATION": str(mounted / "tls.crt"),
        f"{destination}SSL_KEY_LOCATION": str(mounted / "tls.key"),
        "METRICS_PORT": "0",
    }


def renew(credentials: Credentials, mounted: Path) -> None:
    certificate, key = renewed_certificate(credentials, USER, _DAY)
    replace_file(mounted / "tls.crt", certificate)
    replace_file(mounted / "tls.key", key)


def paths(files) -> list[str]:
    return [Path(file.path).name for file in files]


def test_only_the_files_of_the_clusters_a_role_connects_to_are_watched(mounted):
    settings = load_settings(environment(mounted))
    assert paths(CredentialFiles(settings, (DESTINATION,)).files) == [
        "ca.pem",
        "tls.crt",
        "tls.key",
    ]
    watched = CredentialFiles(settings, (SOURCE, DESTINATION)).files
    assert [(file.cluster, file.property) for file in watched] == [
        ("source", "ssl.ca.location"),
        ("source", "sasl.password"),
        ("destination", "ssl.ca.location"),
        ("destination", "ssl.certificate.location"),
        ("destination", "ssl.key.location"),
    ]
    assert CredentialFiles(settings, ()).files == []


def test_a_renewed_certificate_is_acted_on_once_it_stays_the_same_for_a_look(credentials, mounted):
    files = CredentialFiles(load_settings(environment(mounted)), (DESTINATION,))
    assert files.renewed() == []
    renew(credentials, mounted)
    assert files.renewed() == []  # seen once: its writer may not be done
    assert paths(files.renewed()) == ["tls.crt", "tls.key"]


def test_a_certificate_without_its_new_key_is_refused_once_and_the_role_keeps_its_own(
    credentials, mounted, caplog
):
    caplog.set_level(logging.INFO, logger="runtime.credential_files")
    files = CredentialFiles(load_settings(environment(mounted)), (DESTINATION,))
    certificate, key = renewed_certificate(credentials, USER, _DAY)
    replace_file(mounted / "tls.crt", certificate)  # the old key no longer matches it
    for _look in range(4):
        assert files.renewed() == []
    [refusal] = [record for record in caplog.records if record.levelname == "ERROR"]
    assert "librdkafka refuses them" in refusal.getMessage()
    fields = refusal.event_fields  # type: ignore[attr-defined]
    assert fields["files"] == f"{mounted / 'tls.crt'} (destination ssl.certificate.location)"
    assert "ssl.key.location failed" in fields["error"]
    replace_file(mounted / "tls.key", key)  # the writer is done
    assert files.renewed() == []
    assert paths(files.renewed()) == ["tls.crt", "tls.key"]


def test_a_rotated_password_file_is_acted_on_and_never_shown(mounted, caplog):
    caplog.set_level(logging.INFO, logger="runtime.credential_files")
    files = CredentialFiles(load_settings(environment(mounted)), (SOURCE,))
    replace_file(mounted / "password", b"the-rotated-password\n")
    assert files.renewed() == []
    assert paths(files.renewed()) == ["password"]
    assert "the-rotated-password" not in caplog.text


@pytest.fixture
def role_logging() -> Iterator[None]:
    """run_role configures the root logger; it is put back as it was afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_a_refusal_never_shows_a_secret(credentials, mounted, monkeypatch, caplog):
    """librdkafka may quote a value it refuses: the new password read from its file, and the
    loaded ones, are masked in the ERROR line."""
    caplog.set_level(logging.INFO, logger="runtime.credential_files")

    def quoting(config):
        return f"refused {config['sasl.password']} and {config['ssl.ca.location']}"

    monkeypatch.setattr(credential_files, "librdkafka_refusal", quoting)
    files = CredentialFiles(load_settings(environment(mounted)), (SOURCE,))
    replace_file(mounted / "password", b"the-rotated-password\n")
    assert files.renewed() == []
    assert files.renewed() == []
    [refusal] = [record for record in caplog.records if record.levelname == "ERROR"]
    error = refusal.event_fields["error"]  # type: ignore[attr-defined]
    assert error == f"refused **** and {mounted / 'ca.pem'}"
    assert "the-rotated-password" not in caplog.text


def test_a_longer_first_reconnect_wait_in_a_renewed_file_is_judged_with_our_maximum_raised(
    mounted, caplog
):
    """Our reconnect.backoff.max.ms follows the user's reconnect.backoff.ms (runtime
    cluster_settings): a file renewed to a first wait above our 1000 is accepted, as the
    restarted role will make its clients, not refused beside the maximum worked out at start."""
    caplog.set_level(logging.INFO, logger="runtime.credential_files")
    first_wait = mounted / "reconnect-backoff-ms"
    first_wait.write_text("200\n")
    env = {
        **environment(mounted),
        "KAFKA_CLUSTERS_SOURCE_PROPERTIES_RECONNECT_BACKOFF_MS_FILE": str(first_wait),
    }
    files = CredentialFiles(load_settings(env), (SOURCE,))
    replace_file(first_wait, b"5000\n")
    assert files.renewed() == []
    assert paths(files.renewed()) == ["reconnect-backoff-ms"]
    assert "librdkafka refuses" not in caplog.text


def test_a_secret_file_rewritten_with_its_value_unchanged_is_no_renewal(mounted):
    """The value as the settings read it counts (a trailing newline is not part of it)."""
    files = CredentialFiles(load_settings(environment(mounted)), (SOURCE,))
    password = (mounted / "password").read_text().rstrip("\n")
    replace_file(mounted / "password", password.encode())  # without its newline now
    assert files.renewed() == []
    assert files.renewed() == []


def test_renewed_credentials_end_the_role_by_a_drain_with_exit_3(
    credentials, mounted, monkeypatch, capfd, role_logging
):
    for name, value in environment(mounted).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EXACTLY_CREDENTIALS_CHECK_MS", "100")
    drained = []

    def work(settings, health, shutdown, heartbeat):
        renew(credentials, mounted)
        assert shutdown.wait(30), "the renewal did not stop the role"
        drained.append(shutdown.reason)

    status = run_role("replicator", work, registry=CollectorRegistry(), clusters=(DESTINATION,))
    assert status == EXIT_RELOAD
    assert drained == ["credential files renewed"]
    log = capfd.readouterr().err
    assert 'msg="credential files renewed; draining to start again with them"' in log
    assert f"{mounted / 'tls.key'} (destination ssl.key.location)" in log
    assert 'msg="replicator stopped to start again with renewed credentials" exit_status=3' in log


def test_a_renewal_seen_while_a_sigterm_drains_keeps_the_exit_0(
    credentials, mounted, monkeypatch, capfd, role_logging
):
    for name, value in environment(mounted).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EXACTLY_CREDENTIALS_CHECK_MS", "100")

    def work(settings, health, shutdown, heartbeat):
        os.kill(os.getpid(), signal.SIGTERM)
        assert shutdown.wait(5)
        renew(credentials, mounted)
        time.sleep(0.5)  # five looks, while the drain goes on: none may change its status

    assert run_role("replicator", work, registry=CollectorRegistry(), clusters=(DESTINATION,)) == 0
    log = capfd.readouterr().err
    assert 'msg="replicator stopped cleanly"' in log
    assert "draining to start again" not in log


def test_with_the_watch_off_renewed_credentials_leave_the_role_running(
    credentials, mounted, monkeypatch, role_logging
):
    for name, value in environment(mounted).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EXACTLY_CREDENTIALS_CHECK_MS", "0")

    def work(settings, health, shutdown, heartbeat):
        renew(credentials, mounted)
        assert not shutdown.wait(1.0)

    assert run_role("replicator", work, registry=CollectorRegistry(), clusters=(DESTINATION,)) == 0


def test_the_certificate_in_use_has_its_validity_exported(credentials, mounted):
    """What the ExactlyCertificateExpiring alert reads: the validity of the certificate each
    cluster's clients present, none for a cluster without one."""
    # Taken around the certificate's making: a key made on a busy machine took more than the
    # second this test once allowed (validity is stamped in whole seconds).
    made_from = int(datetime.datetime.now(datetime.UTC).timestamp())
    certificate, key = renewed_certificate(credentials, USER, datetime.timedelta(hours=2))
    made_by = datetime.datetime.now(datetime.UTC).timestamp()
    replace_file(mounted / "tls.crt", certificate)
    replace_file(mounted / "tls.key", key)
    registry = CollectorRegistry()
    registry.register(
        CertificateValidity(load_settings(environment(mounted)), (SOURCE, DESTINATION))
    )
    not_before = "exactly_client_certificate_not_before_timestamp_seconds"
    not_after = "exactly_client_certificate_not_after_timestamp_seconds"
    before = registry.get_sample_value(not_before, {"cluster": "destination"})
    after = registry.get_sample_value(not_after, {"cluster": "destination"})
    assert before is not None
    assert after is not None
    assert made_from - 300 <= before <= made_by - 300  # renewed_certificate: from 5 minutes ago
    assert made_from + 7200 <= after <= made_by + 7200
    assert (
        registry.get_sample_value(not_after, {"cluster": "source"}) is None
    )  # SCRAM, no certificate


def test_a_watch_that_fails_says_so_and_leaves_the_role_running(mounted, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="runtime.credential_files")
    files = CredentialFiles(load_settings(environment(mounted)), (DESTINATION,))

    def broken() -> list:
        raise OSError("a bug")

    monkeypatch.setattr(files, "renewed", broken)
    renewed: list = []
    with credential_files.CredentialWatch(files, 0.01, renewed.append) as watch:
        watch._thread.join(5)
        assert not watch._thread.is_alive()
    assert renewed == []
    [failed] = [record for record in caplog.records if record.levelname == "ERROR"]
    assert failed.getMessage().startswith("the credential watch failed")
