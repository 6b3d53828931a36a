"""Kafka brokers this process cannot reach: librdkafka's connection failures as one WARNING per
broker with a count, an INFO line when they stop, and two metrics; and certificates refused in
a TLS handshake, as one ERROR per broker with a count and a metric.

librdkafka logs every failed attempt to connect at ERROR (facility FAIL, "Connect to
ipv4#10.0.0.5:9092 failed: Connection refused") and hands it to ``error_cb`` as well. While a
broker restarts, each client retries it several times a second, and once "1/1 brokers are down"
it bootstraps again and its own suppression of repeated lines starts over: three clients of a
one-broker cluster logged 1,300 ERROR lines in the 50 s of one restart (librdkafka 2.16).
``BROKER_REACH``, a filter on ``LIBRDKAFKA_LOG`` (runtime/clients.py), logs instead::

    level=warning msg="kafka broker unreachable" broker=10.0.0.5:9092 error="Connect to ..."
    level=warning msg="kafka broker still unreachable" broker=10.0.0.5:9092 failures=212
        failing_s=30.0 error="Connect to ..."
    level=info msg="kafka broker no longer failing" broker=10.0.0.5:9092 failures=431
        failing_s=48.2 quiet_s=60.0

the second at most every SUMMARY_S per broker, counting the failures since the line before, and
passes librdkafka's own line on at DEBUG. "N/N brokers are down", which librdkafka hands to
``error_cb`` only, is said at most as often (``all_down``, from runtime.log_client_error).
``exactly_broker_unreachable_seconds{broker}`` and
``exactly_broker_connection_failures_total{broker}`` say the same to Prometheus (the
ExactlyBrokerUnreachable alert). ``broker`` is the address the cluster advertises, which names
the cluster too: librdkafka's line does not say which client configuration it came from.

A failure to reach a broker (``parse``): a TCP connect that fails, a name that does not resolve,
a connection set-up that times out, a send or receive the network cuts off. An established
connection that drops ("Disconnected", in state UP for 2 s or more: a broker going down) is not
one: its line goes to DEBUG and the reconnect decides. Anything else keeps librdkafka's level, for
it is a setting or a credential to fix, not a broker out of reach: SSL and SASL failures, a
disconnect during the handshake or in a connection's first seconds (how a wrong
security.protocol shows).

A certificate refused in a TLS handshake (runtime.kafka_errors.certificate_refused_in: the
broker's TLS alert against ours, or ours failing to verify its) stops a role at start-up
(runtime/clients.py). Met later, by a role that runs (a certificate expired and not renewed, a
broker's trust store changed, a broker's certificate renewed from a CA ours does not hold),
librdkafka says each attempt at ERROR two or three times (its FAIL line, OpenSSL's errors
queued before it, every client's ``error_cb``), and nothing counts it. Here it is a run like
an unreachable broker's, said at ERROR, for no retry mends it::

    level=error msg="kafka broker refused this client's certificate" broker=10.0.0.5:9093
        error="Receive failed: ... alert certificate expired: SSL alert number 45"
    level=error msg="kafka broker still refuses this client's certificate" ... failures=6

OpenSSL's queued errors (facility SSL, "<broker>: kafka: error:...") go to DEBUG with the FAIL
line. The refusal is counted in ``exactly_broker_certificate_refusals_total{broker,certificate}``
(client: ours was refused; broker: we could not verify the broker's), which the
ExactlyCertificateRefused alert reads. The role goes on: the brokers that accept it still
serve their partitions.

"No longer failing" is inferred from quiet, and claims no more: librdkafka reports a successful
connection only in its debug log, repeats an identical failure at most every 30 s, and stops
retrying a broker it no longer needs (in a replicated cluster, once leadership moved away).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import KafkaError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from runtime.kafka_errors import CertificateRefusal, certificate_refused_in
from runtime.logs import get_logger

# No failure for this long and a broker counts as no longer failing: longer than librdkafka's
# 30 s between two lines of one identical failure plus its longest wait between two tries
# (reconnect.backoff.max.ms: 1 s as runtime/cluster_settings.py sets it, librdkafka's own 10 s
# where a user's first wait is written otherwise; jitter never exceeds it), so that a broker
# still refusing is not called recovered in between.
QUIET_S = 60.0
# At most one "still unreachable" line per broker (and one "no broker up") this often.
SUMMARY_S = 30.0
_TICK_S = 1.0
# A connection that drops sooner after it came up is how a listener that expects another
# security.protocol (SASL) answers; librdkafka's own hint for that case uses the same 2 s.
_SETTLED_MS = 2000

_log = get_logger(__name__)

# failure: the broker cannot be reached; dropped: an established connection closed; refused: a
# TLS handshake refused a certificate, the client's or the broker's.
Kind = Literal["failure", "dropped", "refused"]
_Line = tuple[Callable[..., None], str, dict[str, object]]


@dataclass(frozen=True, slots=True)
class BrokerEvent:
    """One connection-level line of librdkafka about one broker."""

    broker: str  # host:port, as the cluster advertises it
    kind: Kind
    detail: str  # librdkafka's words, without its "(after ...)" suffix
    attempts: int  # this failure and the identical ones librdkafka left unsaid before it
    refused: CertificateRefusal | None = None  # kind "refused": whose certificate


@dataclass(frozen=True, slots=True)
class _Words:
    """What a run of one kind of failure is called: its first line and the count every summary
    (both said by ``say``), the end after quiet (at INFO)."""

    say: Callable[..., None]
    first: str
    still: str
    ended: str
    certificate: str = ""  # a refusal's label: whose certificate (CertificateRefusal's value)


_UNREACHABLE = _Words(
    _log.warning,
    "kafka broker unreachable",
    "kafka broker still unreachable",
    "kafka broker no longer failing",
)
# A refused certificate is for an operator to mend, and no retry mends it: an ERROR, but one per
# broker and summary, not librdkafka's two per attempt and client (its line and error_cb's).
_REFUSED = {
    CertificateRefusal.CLIENT: _Words(
        _log.error,
        "kafka broker refused this client's certificate",
        "kafka broker still refuses this client's certificate",
        "kafka broker no longer refusing this client's certificate",
        CertificateRefusal.CLIENT.value,
    ),
    CertificateRefusal.BROKER: _Words(
        _log.error,
        "kafka broker's certificate could not be verified",
        "kafka broker's certificate still cannot be verified",
        "kafka broker's certificate no longer failing verification",
        CertificateRefusal.BROKER.value,
    ),
}


_THREAD = re.compile(r"\[thrd:[^\]]*\]: ")
# "10.0.0.5:9092/1", "10.0.0.5:9092/bootstrap", "sasl_ssl://10.0.0.5:9093/2"
_BROKER_NAME = re.compile(r"(?:[a-z_]+://)?(?P<address>\S+:\d+)/\w+")
# A logical broker ("GroupCoordinator", "TxnCoordinator") puts its current address first.
_LOGICAL = re.compile(r"(?P<address>\S+:\d+): (?P<rest>.*)", re.DOTALL)
_SUFFIX = re.compile(
    r" \(after (?P<ms>\d+)ms in state (?P<state>\w+)"
    r"(?:, (?P<unsaid>\d+) identical error\(s\) suppressed)?\)$"
)
# "Connect to ipv4#10.0.0.5:9092 failed: ..." (how a logical broker's line may begin).
_CONNECT_ADDRESS = re.compile(r"Connect to (?:ipv[46]#)?(?P<address>\S+:\d+) failed: ")
_UNREACHABLE_TEXT = re.compile(
    r"Connect to \S+ failed: .+"
    r"|Failed to resolve '[^']*': .+"
    r"|Connection setup timed out in state (?:CONNECT|SSL_HANDSHAKE|APIVERSION_QUERY)"
    r"|(?:Receive|Send) failed: (?:Connection reset by peer|Broken pipe|Connection timed out"
    r"|No route to host|Network is unreachable|Host is unreachable)",
    re.DOTALL,
)
_DROPPED = re.compile(
    r"Disconnected(?:: connection (?:reset by peer"
    r"|closed by peer(?:: receive 0 after POLLIN|: POLLHUP)?))?"
)
# "ssl://10.0.0.5:9093/1: kafka: error:0A000086:SSL routines::..." (an SSL line: OpenSSL's queue).
_OPENSSL_QUEUE = re.compile(r"(?:\[thrd:[^\]]*\]: )?(?:[a-z_]+://)?\S+:\d+/\w+: kafka: ")
_ALL_DOWN = re.compile(r"\d+/\d+ brokers are down")
_REACH_CODES = frozenset({KafkaError._TRANSPORT, KafkaError._RESOLVE})


def parse(text: str) -> BrokerEvent | None:
    """The broker event librdkafka's ``text`` reports (a FAIL line, or an ``error_cb`` error's
    string), or None when it is anything but a broker out of reach or a connection dropped."""
    thread = _THREAD.match(text)
    if thread is not None:
        text = text[thread.end() :]
    name, separator, rest = text.partition(": ")
    if not separator:
        return None
    named = _BROKER_NAME.fullmatch(name)
    if named is not None:
        address = named["address"]
    elif not name.isalnum():
        return None
    elif (logical := _LOGICAL.fullmatch(rest)) is not None:
        address, rest = logical["address"], logical["rest"]
    elif (connect := _CONNECT_ADDRESS.match(rest)) is not None:
        # A logical broker not yet bound to an address names it only in the failure itself.
        address = connect["address"]
    else:
        return None
    suffix = _SUFFIX.search(rest)
    detail = rest if suffix is None else rest[: suffix.start()]
    unsaid = int(suffix["unsaid"] or 0) if suffix is not None else 0
    if _UNREACHABLE_TEXT.fullmatch(detail):
        return BrokerEvent(address, "failure", detail, 1 + unsaid)
    if (refused := certificate_refused_in(detail)) is not None:
        return BrokerEvent(address, "refused", detail, 1 + unsaid, refused)
    if (
        _DROPPED.fullmatch(detail)
        and suffix is not None
        and suffix["state"] == "UP"
        and int(suffix["ms"]) >= _SETTLED_MS
    ):
        return BrokerEvent(address, "dropped", detail, 1)
    return None


def broker_out_of_reach(error: KafkaError) -> bool:
    """Whether ``error`` (an ``error_cb``'s) says only that brokers cannot be reached right now:
    ``BROKER_REACH`` reports it, once per broker with a count, from librdkafka's own line of the
    same failure (and "N/N brokers are down" through ``all_down``)."""
    if error.code() == KafkaError._ALL_BROKERS_DOWN:
        return _ALL_DOWN.fullmatch(error.str()) is not None
    if error.code() not in _REACH_CODES:
        return False
    event = parse(error.str())
    return event is not None and event.kind != "refused"


@dataclass
class _Run:
    """One broker's failures of one kind: a run while they keep coming, and their count."""

    failures: int = 0  # since the process started (the counter)
    since: float | None = None  # the first failure of the current run; None: not failing
    last: float = 0.0  # the latest failure
    run: int = 0  # failures in the current run
    unsaid: int = 0  # failures since the run's last line
    said: float = 0.0  # when that line was
    detail: str = ""  # the latest failure, in librdkafka's words


class BrokerReach:
    """Which brokers this process's Kafka clients fail to reach, or reach only to have a
    certificate refused (module docstring): a logging filter for librdkafka's lines, a
    Prometheus collector, and a daemon thread that says when a run of failures has a count due
    or has ended. Thread-safe: librdkafka's lines come from whichever thread polls a client."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        quiet_s: float = QUIET_S,
        summary_s: float = SUMMARY_S,
        tick_s: float | None = _TICK_S,
    ) -> None:
        """``tick_s`` None: no thread, the caller calls ``tick()`` (tests, with their clock)."""
        self.quiet_s = quiet_s
        self.summary_s = summary_s
        self._clock = clock
        self._tick_s = tick_s
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, _Words], _Run] = {}
        self._ticker: threading.Thread | None = None
        self._all_down_unsaid = 0
        self._all_down_said: float | None = None

    # -- what comes in --------------------------------------------------------------------------

    def filter(self, record: logging.LogRecord) -> bool:
        """The filter of ``LIBRDKAFKA_LOG``: a broker failure or a refused certificate is
        counted (and said once), its line, a dropped connection's and OpenSSL's queued errors
        before a failed handshake go on at DEBUG; any other line passes unchanged."""
        line = librdkafka_line(record)
        if line is None:
            return True
        facility, text = line
        if facility == "SSL" and _OPENSSL_QUEUE.match(text):
            # OpenSSL's errors of one handshake, each but the last, which librdkafka puts in
            # the FAIL line of the same attempt (rd_kafka_ssl_error0): an ERROR per attempt,
            # its cause said by that line (counted here) or kept at its level.
            return self._at_debug(record)
        event = parse(text) if facility == "FAIL" else None
        if event is None:
            return True
        if event.kind != "dropped":
            self.failed(event)
        return self._at_debug(record)

    @staticmethod
    def _at_debug(record: logging.LogRecord) -> bool:
        """Pass ``record`` on at DEBUG if its logger logs DEBUG; drop it otherwise."""
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True

    def failed(self, event: BrokerEvent) -> None:
        """Count a failure to reach ``event.broker`` or a certificate it refused; the first of a
        run is said at once."""
        words = _UNREACHABLE if event.refused is None else _REFUSED[event.refused]
        lines: list[_Line] = []
        with self._lock:
            now = self._clock()
            run = self._runs.setdefault((event.broker, words), _Run())
            run.failures += event.attempts
            run.last, run.detail = now, event.detail
            if run.since is None:
                run.since, run.run, run.unsaid, run.said = now, event.attempts, 0, now
                fields: dict[str, object] = {"broker": event.broker, "error": event.detail}
                lines.append((words.say, words.first, fields))
            else:
                run.run += event.attempts
                run.unsaid += event.attempts
            self._keep_ticking()
        _say(lines)

    def all_down(self, detail: str) -> None:
        """A client has no broker up ("1/1 brokers are down"): said at most every summary_s,
        with the number of such reports since the line before."""
        lines: list[_Line] = []
        with self._lock:
            now = self._clock()
            self._all_down_unsaid += 1
            said = self._all_down_said
            if said is None or now - said >= self.summary_s:
                fields: dict[str, object] = {"reports": self._all_down_unsaid, "error": detail}
                lines.append((_log.warning, "kafka client has no broker up", fields))
                self._all_down_unsaid, self._all_down_said = 0, now
        _say(lines)

    # -- what goes out --------------------------------------------------------------------------

    def tick(self) -> bool:
        """Say what is due: each failing broker's failures since its last line (every
        summary_s), and the end of each run quiet_s after its last failure. Returns whether a
        broker is still failing."""
        lines: list[_Line] = []
        with self._lock:
            now = self._clock()
            for (address, words), run in self._runs.items():
                if run.since is None:
                    continue
                if now - run.last >= self.quiet_s:
                    fields: dict[str, object] = {
                        "broker": address,
                        "failures": run.run,
                        "failing_s": round(run.last - run.since, 1),
                        "quiet_s": self.quiet_s,
                    }
                    lines.append((_log.info, words.ended, fields))
                    run.since = None
                elif run.unsaid and now - run.said >= self.summary_s:
                    fields = {
                        "broker": address,
                        "failures": run.unsaid,
                        "failing_s": round(now - run.since, 1),
                        "error": run.detail,
                    }
                    lines.append((words.say, words.still, fields))
                    run.unsaid, run.said = 0, now
            failing = self._failing()
        _say(lines)
        return failing

    def failing(self) -> dict[str, float]:
        """Each broker out of reach now, with how long it has been (seconds)."""
        with self._lock:
            now = self._clock()
            return {
                address: now - run.since
                for (address, words), run in self._runs.items()
                if words is _UNREACHABLE and run.since is not None
            }

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            now = self._clock()
            rows = [
                (address, words, 0.0 if r.since is None else now - r.since, r.failures)
                for (address, words), r in sorted(self._runs.items(), key=lambda kv: kv[0][0])
            ]
        unreachable, failures, refusals = self._families()
        for address, words, seconds, count in rows:
            if words is _UNREACHABLE:
                unreachable.add_metric([address], seconds)
                failures.add_metric([address], count)
            else:
                refusals.add_metric([address, words.certificate], count)
        return [unreachable, failures, refusals]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, CounterMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(
                "exactly_broker_unreachable_seconds",
                "How long this process's Kafka clients have been failing to connect to the "
                f"broker; 0 once no connection to it has failed for {QUIET_S:.0f} s (inferred: "
                "librdkafka does not report a connection that succeeds).",
                labels=["broker"],
            ),
            CounterMetricFamily(
                "exactly_broker_connection_failures",
                "Failed attempts of this process's Kafka clients to connect to the broker "
                "(refused, unresolved, timed out, cut off).",
                labels=["broker"],
            ),
            CounterMetricFamily(
                "exactly_broker_certificate_refusals",
                "TLS handshakes with the broker that refused a certificate: this process's "
                "(certificate=client: the broker did not accept it) or the broker's "
                "(certificate=broker: this process could not verify it).",
                labels=["broker", "certificate"],
            ),
        )

    # -- the thread -----------------------------------------------------------------------------

    def _failing(self) -> bool:
        return any(run.since is not None for run in self._runs.values())

    def _keep_ticking(self) -> None:
        """Start the ticking thread unless it runs; called holding the lock."""
        if self._tick_s is None or self._ticker is not None:
            return
        self._ticker = threading.Thread(target=self._tick_until_quiet, name="broker-reach")
        self._ticker.daemon = True
        self._ticker.start()

    def _tick_until_quiet(self) -> None:
        assert self._tick_s is not None
        while True:
            time.sleep(self._tick_s)
            self.tick()
            with self._lock:  # decided and recorded together with failed()'s check
                if not self._failing():
                    self._ticker = None
                    return


def librdkafka_line(record: logging.LogRecord) -> tuple[str, str] | None:
    """The facility and text of a librdkafka line, as confluent_kafka logs one:
    ``logger.log(level, "%s [%s] %s", facility, client name, text)``; None for any other."""
    args = record.args
    if record.msg != "%s [%s] %s" or not isinstance(args, tuple) or len(args) != 3:
        return None
    return str(args[0]), str(args[2])


def _say(lines: list[_Line]) -> None:
    for log, msg, fields in lines:
        log(msg, **fields)


BROKER_REACH = BrokerReach()
