"""A client certificate renewed on disk while a role runs is loaded by a drain and a restart,
before the old one's expiry stops the flow (runtime/credential_files.py): librdkafka reads
certificates only when a client is made."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from localkafka.security import renewed_certificate
from runtime.role import EXIT_RELOAD
from tests.files import replace_file
from tests.replication.processes import RoleProcess, role_processes
from tests.replication.scrape import free_port, sample, scrape
from tests.replication.staging import assert_exactly_once, await_records, read_source
from tests.secured import secured_clusters, secured_topic_flow

# Long enough for the deduplicator to start and copy a first batch with it.
_SHORT_LIVED_S = 25
_DAY = datetime.timedelta(days=1)
_TLS = "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SSL"


def _alive(process: RoleProcess) -> Callable[[], None]:
    """A check between reads: the role has not exited."""

    def check() -> None:
        if not process.is_running():
            raise AssertionError(
                f"{process.name} exited {process.returncode}\n{process.log_tail()}"
            )

    return check


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(topic, key=b"%d" % i, value=os.urandom(64), partition=i % 2)
    assert producer.flush(30) == 0


def _expires_in_s(env: dict[str, str]) -> float:
    """Seconds until the certificate the role serving metrics on env's port presents expires."""
    metrics = scrape(int(env["METRICS_PORT"]))
    name = "exactly_client_certificate_not_after_timestamp_seconds"
    expiry = sample(metrics, name, cluster="destination")
    assert expiry is not None, metrics
    return expiry - time.time()


def _write(directory: Path, certificate: bytes, key: bytes) -> None:
    """A certificate and its key, as a certificate manager renews them in a mounted Secret."""
    replace_file(directory / "tls.crt", certificate)
    replace_file(directory / "tls.key", key)


# About 40 s (a certificate that expires while the flow runs): in make test-slow, so that the
# default suite stays inside its 20 minutes.
@pytest.mark.slow
def test_a_renewed_certificate_is_loaded_before_the_expired_one_stops_the_flow(
    source_cluster, target_cluster, tmp_path, unique_topic
):
    _source, target = secured_clusters(source_cluster, target_cluster)
    envs = secured_topic_flow(
        source_cluster, target_cluster, unique_topic, 2, STATE_DIR=str(tmp_path / "state")
    )
    topic = envs["replicator"]["REPLICATION_TOPICS_INCLUDE"]
    # Stage 2's target certificate, short-lived, where a mounted Secret would put it.
    mounted = tmp_path / "deduplicator-tls"
    mounted.mkdir()
    expires = time.monotonic() + _SHORT_LIVED_S
    short_lived = renewed_certificate(
        target.credentials, "deduplicator", datetime.timedelta(seconds=_SHORT_LIVED_S)
    )
    _write(mounted, *short_lived)
    deduplicator_env = {
        **envs["deduplicator"],
        f"{_TLS}_CERTIFICATE_LOCATION": str(mounted / "tls.crt"),
        f"{_TLS}_KEY_LOCATION": str(mounted / "tls.key"),
        "EXACTLY_CREDENTIALS_CHECK_MS": "500",
        "METRICS_PORT": str(free_port()),
    }
    with role_processes(tmp_path) as roles:
        roles.start("replicator", envs["replicator"])
        deduplicator = roles.start("deduplicator", deduplicator_env)
        _produce(source_cluster.bootstrap_servers, topic, 0, 200)
        await_records(target_cluster.bootstrap_servers, [topic], 200, 60, _alive(deduplicator))
        assert time.monotonic() < expires, "the first batch took longer than the certificate"
        # What the ExactlyCertificateExpiring alert reads: the short-lived certificate's expiry.
        assert _expires_in_s(deduplicator_env) < _SHORT_LIVED_S

        # The certificate expires; the renewal lands after it, as a late certificate manager's.
        time.sleep(max(0.0, expires - time.monotonic()) + 1)
        _produce(source_cluster.bootstrap_servers, topic, 200, 200)
        _write(mounted, *renewed_certificate(target.credentials, "deduplicator", _DAY))
        status = deduplicator.wait(60)
        log = deduplicator.log_text()
        assert status == EXIT_RELOAD, log[-3000:]
        assert "credential files renewed; draining to start again with them" in log
        assert f"{mounted / 'tls.crt'} (destination ssl.certificate.location)" in log

        # What the old certificate would meet now: the target refuses it at start-up.
        expired = tmp_path / "expired-tls"
        expired.mkdir()
        _write(expired, *short_lived)
        refused = roles.start(
            "deduplicator",
            {
                **deduplicator_env,
                f"{_TLS}_CERTIFICATE_LOCATION": str(expired / "tls.crt"),
                f"{_TLS}_KEY_LOCATION": str(expired / "tls.key"),
            },
            name="deduplicator-expired",
        )
        assert refused.wait(60) == 1
        assert "refused this client's certificate" in refused.log_text()

        # Started again, as its orchestrator would, it copies on with the renewed one.
        deduplicator.start()
        _produce(source_cluster.bootstrap_servers, topic, 400, 200)
        source = read_source(source_cluster.bootstrap_servers, [topic])
        destination = await_records(
            target_cluster.bootstrap_servers, [topic], 600, 90, _alive(deduplicator)
        )
        assert _expires_in_s(deduplicator_env) > _DAY.total_seconds() - 120
    assert_exactly_once(source_cluster, source, destination)
