"""A broker out of reach, as an operator reads it: one WARNING per broker with a count, not an
ERROR line per connection attempt from every client; an INFO line when the failures stop; a
gauge the ExactlyBrokerUnreachable alert reads. A certificate refused in a handshake is the same
run said at ERROR, with the counter the ExactlyCertificateRefused alert reads. What else only an
operator can cure (a password, a wrong security.protocol) keeps librdkafka's ERROR.

The lines come from real librdkafka clients and real ``KafkaError`` objects; the texts of the
secured listeners' refusals are librdkafka 2.16's, recorded against localkafka's SSL listener.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from localkafka.security import make_credentials
from runtime import (
    BROKER_REACH,
    LIBRDKAFKA_LOG,
    BrokerReach,
    broker_out_of_reach,
    get_logger,
    log_client_error,
)
from runtime.broker_reach import BrokerEvent, parse
from runtime.kafka_errors import CertificateRefusal, certificate_refusal
from tests.kafka_helpers import create_topic
from tests.secured import secured_clusters

# librdkafka 2.16's words, each seen here; the broker names are of a local cluster.
REFUSED = (
    "127.0.0.1:25558/bootstrap: Connect to ipv4#127.0.0.1:25558 failed: Connection refused "
    "(after 0ms in state CONNECT)"
)
REFUSED_AGAIN = (
    "127.0.0.1:29312/2: Connect to ipv4#127.0.0.1:29312 failed: Connection refused "
    "(after 0ms in state CONNECT, 1 identical error(s) suppressed)"
)
DROPPED = "127.0.0.1:25558/2: Disconnected: connection reset by peer (after 4995ms in state UP)"
COORDINATOR_DROPPED = (
    "GroupCoordinator: 127.0.0.1:25558: Disconnected: connection closed by peer: receive 0 "
    "after POLLIN (after 3075ms in state UP)"
)
CERTIFICATE_REFUSED = (
    "ssl://127.0.0.1:31658/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls "
    "alert bad certificate: SSL alert number 42 (after 6ms in state APIVERSION_QUERY)"
)
UNKNOWN_CA = (
    "ssl://127.0.0.1:31658/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified, verify that "
    "ssl.ca.location is correctly configured or root CA certificates are installed (install "
    "ca-certificates package) (after 11ms in state SSL_HANDSHAKE)"
)
SSL_TO_PLAINTEXT = (
    "ssl://127.0.0.1:31457/bootstrap: SSL handshake failed: Disconnected: SSL connection closed "
    "by peer: connecting to a PLAINTEXT broker listener? (after 82ms in state SSL_HANDSHAKE)"
)
PLAINTEXT_TO_SSL = (
    "127.0.0.1:31658/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN "
    "(after 45ms in state APIVERSION_QUERY)"
)
WRONG_PASSWORD = (
    "sasl_ssl://127.0.0.1:25121/bootstrap: SASL authentication error: Authentication failed "
    "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after "
    "937ms in state AUTH_REQ)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def in_place_of_broker_reach(own: BrokerReach) -> Iterator[BrokerReach]:
    """``own`` filters LIBRDKAFKA_LOG instead of the process's BROKER_REACH for a while."""
    LIBRDKAFKA_LOG.removeFilter(BROKER_REACH)
    LIBRDKAFKA_LOG.addFilter(own)
    try:
        yield own
    finally:
        LIBRDKAFKA_LOG.removeFilter(own)
        LIBRDKAFKA_LOG.addFilter(BROKER_REACH)


@pytest.fixture
def reach() -> Iterator[tuple[BrokerReach, Clock]]:
    """A BrokerReach on the test's clock, without a thread, in BROKER_REACH's place."""
    clock = Clock()
    with in_place_of_broker_reach(BrokerReach(clock, tick_s=None)) as own:
        yield own, clock


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port bound without listening: every connection to it is refused."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def librdkafka_line(level: int, text: str, facility: str = "FAIL") -> None:
    """A line as confluent_kafka hands librdkafka's to a client's ``logger``."""
    LIBRDKAFKA_LOG.log(level, "%s [%s] %s", facility, "rdkafka#producer-1", f"[thrd:x]: {text}")


def lines(stream: io.StringIO, pattern: str = "") -> list[str]:
    return [line for line in stream.getvalue().splitlines() if re.search(pattern, line)]


def refused_for(seconds: float, port: int, errors: list[KafkaError]) -> None:
    """A producer of ours (logger LIBRDKAFKA_LOG) polled while its only broker refuses."""
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "logger": LIBRDKAFKA_LOG,
            "error_cb": errors.append,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 50,
        }
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.poll(0.05)
    producer.flush(0)


def samples(collector: BrokerReach) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["broker"]): sample.value
        for family in collector.collect()
        for sample in family.samples
        if "certificate" not in sample.labels
    }


def refusals(collector: BrokerReach) -> dict[tuple[str, str], float]:
    """exactly_broker_certificate_refusals_total by (broker, whose certificate)."""
    return {
        (sample.labels["broker"], sample.labels["certificate"]): sample.value
        for family in collector.collect()
        for sample in family.samples
        if sample.name == "exactly_broker_certificate_refusals_total"
    }


# -- real clients -------------------------------------------------------------------------------


def test_refused_connections_are_one_warning_naming_the_broker_not_an_error_each(
    configure, refusing_port
):
    stream = configure()
    errors: list[KafkaError] = []
    refused_for(2.0, refusing_port, errors)
    broker = f"127.0.0.1:{refusing_port}"
    # Scoped to this broker: the process's BROKER_REACH may still be summing up brokers an
    # earlier test stopped, and its "still unreachable" lines land in this stream too.
    ours = re.escape(broker)
    assert lines(stream, f"level=error.*{ours}") == []
    [warning] = lines(stream, f"level=warning.*{ours}")
    assert 'msg="kafka broker unreachable"' in warning
    assert f"broker={broker} " in warning
    assert f'error="Connect to ipv4#{broker} failed: Connection refused"' in warning
    assert "logger=runtime.broker_reach" in warning
    # Through the process's own BROKER_REACH: counted, and failing since the first.
    assert BROKER_REACH.failing()[broker] > 0
    sample = samples(BROKER_REACH)
    assert sample["exactly_broker_connection_failures_total", broker] >= 2
    assert sample["exactly_broker_unreachable_seconds", broker] > 0
    # The error_cb saw the same failures, each one; for every role's callback they are reach.
    assert {e.code() for e in errors} >= {KafkaError._TRANSPORT}
    assert all(broker_out_of_reach(e) for e in errors)


@pytest.mark.parametrize("whose", ["client", "broker"])
def test_a_certificate_the_broker_refuses_is_one_error_naming_it_and_counted(
    configure, reach, target_cluster, tmp_path, whose
):
    """What a running role meets when a certificate stops being accepted (one expired, a trust
    store changed): real librdkafka against the target's mutual-TLS listener, through the same
    logger and error_cb as every role's clients."""
    own, _ = reach
    [secured] = secured_clusters(target_cluster)
    stream = configure()
    stranger = make_credentials(tmp_path / "another-ca", ("replicator",))
    config = secured.client_properties("SSL", "replicator")
    if whose == "client":
        config["ssl.certificate.location"] = str(stranger.certificate_path("replicator"))
        config["ssl.key.location"] = str(stranger.key_path("replicator"))
    else:
        config["ssl.ca.location"] = str(stranger.ca_path)
    log = get_logger("replicator.loop")
    producer = Producer(
        {
            **config,
            "logger": LIBRDKAFKA_LOG,
            "error_cb": lambda error: log_client_error(log, error, cluster="destination"),
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    broker = config["bootstrap.servers"]
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        producer.poll(0.05)
    producer.flush(0)
    ours = f"broker={re.escape(broker)} "
    errors = lines(stream, "level=error")
    first = (
        "kafka broker refused this client's certificate"
        if whose == "client"
        else "kafka broker's certificate could not be verified"
    )
    [line] = lines(stream, re.escape(first))
    # One line for the attempts of the whole run, not librdkafka's and error_cb's per attempt
    # (librdkafka's own name the broker in their text, ours in the broker field).
    assert [e for e in errors if re.search(ours, e) or broker in e] == [line]
    assert "logger=runtime.broker_reach" in line
    assert ("alert" if whose == "client" else "certificate verify failed") in line
    assert not lines(stream, "kafka client error")
    assert refusals(own)[broker, whose] >= 1


def test_at_debug_librdkafka_s_own_lines_are_kept_at_debug(configure, refusing_port):
    stream = configure("DEBUG")
    refused_for(1.0, refusing_port, [])
    assert lines(stream, "level=error") == []
    failed = lines(stream, r"level=debug .*logger=librdkafka .*FAIL .*Connection refused")
    assert failed


def test_a_run_of_failures_is_counted_every_summary_and_ends_after_quiet(
    configure, reach, refusing_port
):
    own, clock = reach
    stream = configure()
    errors: list[KafkaError] = []
    refused_for(1.5, refusing_port, errors)
    broker = f"127.0.0.1:{refusing_port}"
    # Only this broker's lines: a client an earlier test left to the garbage collector may
    # still be failing to reach its own dead broker through the same logger (seen in CI).
    ours = f"broker={re.escape(broker)} "
    counted = int(samples(own)["exactly_broker_connection_failures_total", broker])
    assert counted >= 2
    assert len(lines(stream, f"kafka broker unreachable.* {ours}")) == 1

    clock.now += own.summary_s - 1
    own.tick()
    assert lines(stream, f"still unreachable.* {ours}") == []
    clock.now += 1
    own.tick()
    [summary] = lines(stream, f"level=warning .*still unreachable.* {ours}")
    assert f"broker={broker} failures={counted - 1} failing_s={own.summary_s}" in summary
    assert own.failing()[broker] == own.summary_s

    clock.now += own.quiet_s - own.summary_s - 1
    own.tick()
    assert broker in own.failing()  # not yet quiet long enough
    clock.now += own.summary_s
    own.tick()
    assert broker not in own.failing()
    [done] = lines(stream, f"no longer failing.* {ours}")
    assert done.split(" ", 1)[1].startswith(
        'level=info role=replicator logger=runtime.broker_reach msg="kafka broker no longer '
        f'failing" broker={broker} failures={counted} failing_s=0.0 quiet_s={own.quiet_s}'
    )
    sample = samples(own)
    assert sample["exactly_broker_unreachable_seconds", broker] == 0
    assert sample["exactly_broker_connection_failures_total", broker] == counted


# -- lines that must keep their ERROR -----------------------------------------------------------


@pytest.mark.parametrize(
    "text", [SSL_TO_PLAINTEXT, WRONG_PASSWORD], ids=["ssl-to-plaintext", "wrong-password"]
)
def test_what_an_operator_must_fix_stays_an_error(configure, reach, text):
    own, _ = reach
    stream = configure()
    librdkafka_line(logging.ERROR, text)
    [line] = lines(stream)
    assert "level=error role=replicator logger=librdkafka" in line
    assert text in line
    assert own.failing() == {}


@pytest.mark.parametrize(
    ("text", "whose", "first", "still", "ended"),
    [
        (
            CERTIFICATE_REFUSED,
            "client",
            "kafka broker refused this client's certificate",
            "kafka broker still refuses this client's certificate",
            "kafka broker no longer refusing this client's certificate",
        ),
        (
            UNKNOWN_CA,
            "broker",
            "kafka broker's certificate could not be verified",
            "kafka broker's certificate still cannot be verified",
            "kafka broker's certificate no longer failing verification",
        ),
    ],
    ids=["ours-refused", "theirs-unverified"],
)
def test_a_refused_certificate_is_one_error_per_broker_with_a_count(
    configure, reach, text, whose, first, still, ended
):
    own, clock = reach
    stream = configure()
    for _ in range(3):
        librdkafka_line(logging.ERROR, text)
    broker = "127.0.0.1:31658"
    [line] = lines(stream)
    assert f'level=error role=replicator logger=runtime.broker_reach msg="{first}"' in line
    assert f"broker={broker} " in line
    assert ("alert bad certificate" if whose == "client" else "certificate verify failed") in line
    assert refusals(own) == {(broker, whose): 3}
    # Not a broker out of reach: the ExactlyBrokerUnreachable alert stays silent.
    assert own.failing() == {}
    assert samples(own) == {}
    assert not broker_out_of_reach(KafkaError(KafkaError._TRANSPORT, text))

    clock.now += own.summary_s
    own.tick()
    [summary] = lines(stream, re.escape(still))
    assert "level=error " in summary
    assert f"broker={broker} failures=2 failing_s={own.summary_s}" in summary
    clock.now += own.quiet_s
    own.tick()
    [done] = lines(stream, re.escape(ended))
    assert "level=info " in done
    assert f"broker={broker} failures=3 " in done


# What librdkafka logged at ERROR (facility SSL) before the FAIL line of each attempt whose
# broker certificate did not verify against another CA: OpenSSL's queued errors but the last.
OPENSSL_QUEUED = (
    "ssl://127.0.0.1:20342/bootstrap: kafka: error:030000EA:digital envelope routines::"
    "provider signature failure: ECDSA digest_verify_final:"
)


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_openssl_s_queued_errors_before_a_failed_handshake_go_to_debug(configure, reach, level):
    stream = configure(level)
    librdkafka_line(logging.ERROR, OPENSSL_QUEUED, facility="SSL")
    # Another SSL line, not a handshake's queue, keeps its level.
    other = "ssl.ca.location failed: not found"
    librdkafka_line(logging.WARNING, other, facility="SSL")
    said = lines(stream)
    if level == "INFO":
        [line] = said
        assert "level=warning " in line
        assert other in line
    else:
        assert [line.split(" ", 2)[1] for line in said] == ["level=debug", "level=warning"]
    assert reach[0].failing() == {}


def test_a_disconnect_before_the_connection_is_up_keeps_librdkafka_s_level(configure, reach):
    # How a client without TLS meets a TLS listener: not a broker out of reach.
    stream = configure()
    librdkafka_line(logging.INFO, PLAINTEXT_TO_SSL)
    [line] = lines(stream)
    assert "level=info role=replicator logger=librdkafka" in line
    assert reach[0].failing() == {}


def test_an_established_connection_dropping_goes_to_debug_and_counts_nothing(configure, reach):
    own, _ = reach
    stream = configure()
    librdkafka_line(logging.WARNING, DROPPED)
    librdkafka_line(logging.INFO, COORDINATOR_DROPPED)
    assert stream.getvalue() == ""
    assert own.failing() == {}
    assert samples(own) == {}


def test_other_librdkafka_lines_pass_untouched(configure, reach):
    stream = configure()
    text = (
        "Consumer group session timed out (in join-state steady) after 45012 ms without a "
        "successful response from the group coordinator"
    )
    librdkafka_line(logging.WARNING, text, facility="SESSTMOUT")
    [line] = lines(stream)
    assert "level=warning role=replicator logger=librdkafka" in line
    assert text in line


# -- error_cb -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "level"),
    [
        (KafkaError(KafkaError._TRANSPORT, REFUSED), None),
        (
            KafkaError(
                KafkaError._RESOLVE,
                "kafka-0.kafka:9092/0: Failed to resolve "
                "'kafka-0.kafka:9092': Name or service not known (after 2ms in state "
                "CONNECT)",
            ),
            None,
        ),
        (KafkaError(KafkaError._TRANSPORT, CERTIFICATE_REFUSED), None),
        (KafkaError(KafkaError._TRANSPORT, SSL_TO_PLAINTEXT), "warning"),
        (KafkaError(KafkaError._SSL, UNKNOWN_CA), None),
        (KafkaError(KafkaError._AUTHENTICATION, WRONG_PASSWORD), "error"),
        (KafkaError(KafkaError._ALL_BROKERS_DOWN, "No brokers configured"), "warning"),
    ],
    ids=["refused", "unresolved", "certificate", "ssl-to-plaintext", "ca", "password", "none"],
)
def test_error_cb_says_what_broker_reach_says_only_at_debug(configure, error, level):
    stream = configure()
    log_client_error(get_logger("replicator.loop"), error, cluster="source")
    said = lines(stream)
    if level is None:
        # BROKER_REACH says it from librdkafka's line of the same failure.
        assert broker_out_of_reach(error) or certificate_refusal(error) is not None
        assert parse(error.str()) is not None
        assert said == []
        return
    assert not broker_out_of_reach(error)
    [line] = said
    assert f"level={level} " in line
    assert f'msg="kafka client error" cluster=source code={error.name()}' in line


def test_all_brokers_down_is_said_once_per_summary_with_a_count(configure, reach):
    own, clock = reach
    stream = configure()
    for _ in range(3):
        own.all_down("1/1 brokers are down")
    clock.now += own.summary_s
    own.all_down("1/1 brokers are down")
    said = lines(stream)
    assert [line.split("msg=", 1)[1] for line in said] == [
        '"kafka client has no broker up" reports=1 error="1/1 brokers are down"',
        '"kafka client has no broker up" reports=3 error="1/1 brokers are down"',
    ]
    assert all("level=warning" in line for line in said)
    assert broker_out_of_reach(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))


# -- the words ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "event"),
    [
        (
            REFUSED,
            BrokerEvent(
                "127.0.0.1:25558",
                "failure",
                "Connect to ipv4#127.0.0.1:25558 failed: Connection refused",
                1,
            ),
        ),
        (
            REFUSED_AGAIN,
            BrokerEvent(
                "127.0.0.1:29312",
                "failure",
                "Connect to ipv4#127.0.0.1:29312 failed: Connection refused",
                2,
            ),
        ),
        (
            "sasl_ssl://b-2.kafka.internal:9096/2: Connection setup timed out in state CONNECT "
            "(after 30028ms in state CONNECT)",
            BrokerEvent(
                "b-2.kafka.internal:9096",
                "failure",
                "Connection setup timed out in state CONNECT",
                1,
            ),
        ),
        (
            "10.0.0.5:9092/1: Receive failed: Connection reset by peer (after 12ms in state UP)",
            BrokerEvent("10.0.0.5:9092", "failure", "Receive failed: Connection reset by peer", 1),
        ),
        (
            # A coordinator not yet bound to an address, as a node of three restarted: seen at
            # ERROR from stage 1's consumer before this case was recognised.
            "GroupCoordinator: Connect to ipv4#127.0.0.1:23393 failed: Connection refused "
            "(after 0ms in state CONNECT)",
            BrokerEvent(
                "127.0.0.1:23393",
                "failure",
                "Connect to ipv4#127.0.0.1:23393 failed: Connection refused",
                1,
            ),
        ),
        (
            COORDINATOR_DROPPED,
            BrokerEvent(
                "127.0.0.1:25558",
                "dropped",
                "Disconnected: connection closed by peer: receive 0 after POLLIN",
                1,
            ),
        ),
        (
            "127.0.0.1:25558/2: Disconnected (after 900ms in state UP)",
            None,  # a young connection: how a listener that wants SASL answers
        ),
        (
            CERTIFICATE_REFUSED,
            BrokerEvent(
                "127.0.0.1:31658",
                "refused",
                "Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: SSL "
                "alert number 42",
                1,
                CertificateRefusal.CLIENT,
            ),
        ),
        (
            UNKNOWN_CA,
            BrokerEvent(
                "127.0.0.1:31658",
                "refused",
                UNKNOWN_CA.split("/bootstrap: ", 1)[1].rsplit(" (after ", 1)[0],
                1,
                CertificateRefusal.BROKER,
            ),
        ),
        (SSL_TO_PLAINTEXT, None),
        (PLAINTEXT_TO_SSL, None),
        ("1/1 brokers are down", None),
    ],
)
def test_parse(text, event):
    assert parse(text) == event
    assert parse(f"[thrd:main]: {text}") == event


def test_every_process_serves_the_metrics_the_alert_reads_before_any_failure():
    registry = CollectorRegistry()
    registry.register(BrokerReach(tick_s=None))
    families = text_string_to_metric_families(generate_latest(registry).decode())
    assert {(family.name, family.type) for family in families} == {
        ("exactly_broker_unreachable_seconds", "gauge"),
        ("exactly_broker_connection_failures", "counter"),
        ("exactly_broker_certificate_refusals", "counter"),
    }


def test_the_thread_says_the_end_by_itself():
    clock = Clock()
    own = BrokerReach(clock, quiet_s=0.2, summary_s=0.1, tick_s=0.02)
    own.failed(BrokerEvent("10.0.0.5:9092", "failure", "Connect to x failed: refused", 1))
    ticker = own._ticker
    assert ticker is not None
    clock.now += 1
    ticker.join(5)
    assert not ticker.is_alive()
    assert own.failing() == {}
    # A new run starts the thread again.
    own.failed(BrokerEvent("10.0.0.5:9092", "failure", "Connect to x failed: refused", 1))
    again = own._ticker
    assert again is not None
    assert again is not ticker
    clock.now += 1
    again.join(5)
    assert own.failing() == {}


def test_threads_of_polling_clients_count_every_failure():
    own = BrokerReach(tick_s=None)
    event = BrokerEvent("10.0.0.5:9092", "failure", "Connect to x failed: refused", 1)

    def fail() -> None:
        for _ in range(1000):
            own.failed(event)

    threads = [threading.Thread(target=fail) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert samples(own)["exactly_broker_connection_failures_total", "10.0.0.5:9092"] == 4000


# -- a real broker, killed under running clients ------------------------------------------------


def test_a_killed_broker_is_a_warning_with_a_count_and_never_an_error_line(
    target_cluster, configure, unique_topic
):
    if target_cluster.broker is None:
        pytest.skip(f"{target_cluster.kind} clusters give no broker control")
    topic = unique_topic("reach")
    create_topic(target_cluster.bootstrap_servers, topic)
    [broker] = target_cluster.bootstrap_servers.split(",")
    stream = configure()
    log = get_logger("replicator.loop")
    # As a role's clients are made: our logger, and the role's error_cb line.
    config = {
        "bootstrap.servers": target_cluster.bootstrap_servers,
        "logger": LIBRDKAFKA_LOG,
        "error_cb": lambda error: log_client_error(log, error, cluster="target"),
    }
    # BROKER_REACH's own timing in seconds, not minutes.
    own = BrokerReach(summary_s=3.0, quiet_s=5.0, tick_s=0.2)
    with in_place_of_broker_reach(own):
        producer = Producer(config)
        consumer = Consumer({**config, "group.id": unique_topic("group")})
        consumer.subscribe([topic])
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                producer.produce(topic, b"x")
                producer.poll(0.05)
                consumer.poll(0.05)

        polling = threading.Thread(target=run, daemon=True)
        polling.start()
        try:
            _await(lambda: consumer.assignment(), 30, stream)
            target_cluster.broker.kill()
            try:
                _await(lambda: lines(stream, f"still unreachable.* broker={broker} "), 60, stream)
                assert samples(own)["exactly_broker_unreachable_seconds", broker] > 0
            finally:
                target_cluster.broker.restart()
            _await(lambda: lines(stream, f"no longer failing.* broker={broker} "), 60, stream)
        finally:
            stop.set()
            polling.join(10)
            consumer.close()
            producer.flush(10)
    log_text = stream.getvalue()
    assert lines(stream, "level=error") == [], log_text
    # Only this broker's lines: the process's own BROKER_REACH may still be summing up an
    # earlier test's refused port into the same stream (its 30 s summary, seen in company).
    ours = f" broker={re.escape(broker)} "
    first = lines(stream, f"kafka broker unreachable.*{ours}")
    assert first, log_text
    assert all("level=warning " in line for line in first)
    assert 'error="Connect to ipv4#' in first[0]
    [still, *_] = lines(stream, f"still unreachable.*{ours}")
    counted = re.search(rf"broker={broker} failures=(\d+) failing_s=", still)
    assert counted is not None, still
    assert int(counted[1]) > 0
    [done] = lines(stream, f"no longer failing.*{ours}")
    assert re.search(rf"level=info .* broker={broker} failures=\d+ failing_s=", done), done
    assert samples(own)["exactly_broker_unreachable_seconds", broker] == 0
    assert samples(own)["exactly_broker_connection_failures_total", broker] >= int(counted[1])


def _await(condition: Callable[[], object], timeout_s: float, stream: io.StringIO) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, stream.getvalue()[-5000:]
        time.sleep(0.1)
