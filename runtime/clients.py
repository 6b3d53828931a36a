"""What every Kafka client of ours shares: its log lines through our logging, the line of its
``error_cb`` (``log_client_error``), admin clients built so, and how both stages' consumers
prefetch and how long their fetches wait (PREFETCH_DEFAULTS).

librdkafka writes its log lines to stderr unless a client has a ``logger``: raw ``%6|...`` lines
in a process whose every other line is ``key=value`` or JSON (``EXACTLY_LOG_FORMAT``), which a
log shipper cannot parse. Every client of ours logs through ``LIBRDKAFKA_LOG`` instead, whose
filter (runtime/broker_reach.py) turns its ERROR line per failed connection attempt into one
WARNING per broker with a count (one ERROR per broker for a certificate a handshake refused),
and whose lines about a failed transaction, which the roles handle and say themselves, are
WARNINGs (runtime/transaction_lines.py).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from runtime.broker_reach import BROKER_REACH, broker_out_of_reach
from runtime.errors import AuthenticationError, CertificateRefusedError
from runtime.kafka_errors import CertificateRefusal, ErrorClass, certificate_refusal, classify
from runtime.logs import EventLogger
from runtime.properties import quiet_other_kind_properties
from runtime.settings import ClusterSettings
from runtime.transaction_lines import demote_handled_transaction_lines

LIBRDKAFKA_LOG = logging.getLogger("librdkafka")
LIBRDKAFKA_LOG.addFilter(BROKER_REACH)
LIBRDKAFKA_LOG.addFilter(demote_handled_transaction_lines)
LIBRDKAFKA_LOG.addFilter(quiet_other_kind_properties)

# Both stages' consumers, under the user's own properties. librdkafka fetches a partition again
# only while its local queue holds fewer than queued.min.messages (100 000 a partition) and
# queued.max.messages.kbytes (64 MiB); past them it waits fetch.queue.backoff.ms, 1 s by
# default, although a stage works through 64 MiB of 1 KiB records in well under a second and
# then waits empty-handed. And 100 000 records of 100 B a partition queued took stage 1 past
# 500 MiB resident. Measured side by side (1 M records of 1 KiB, 3 M of 100 B, two runs each):
# these values 90-91 k and 213-258 k records/s, peak RSS 233 and 389 MiB; librdkafka's
# defaults 70-79 k and 187-191 k records/s, 316 and 530 MiB.
#
# And how a fetch waits at the broker. librdkafka asks for 1 byte (fetch.min.bytes), so the broker
# answers a stage's fetch as soon as anything arrives: a fetch, a response and a small batch
# through the stage's loop for every few records, on both brokers and both stages. 32 KiB or a
# wait, whichever comes first, cut that work: issue 35's outside method, the pipeline alone on
# fresh clusters, alternating runs (docs/performance.md), at 20,000 records/s p50 / p99 148 / 435
# and 155 / 439 ms with librdkafka's values, 113 / 280 and 98 / 220 ms with a 20 ms wait, the
# machine busy 1.97-1.98 cores against 1.82-1.86. The wait is 50 ms, not 20: an idle consumer
# asks every wait, and the broker looks at each partition of the fetch each time, so over 1,200
# partitions carrying 10 records/s 20 ms cost the brokers about 0.25 of a core more than
# librdkafka's values, and 50 ms nothing (0.74-0.78 cores against 0.74-0.80). Alternated in one
# run: 1,000 records/s p50 / p99 86 / 155 and 89 / 157 ms at 50 ms against 107 / 183 and
# 125 / 235 at 20 (100 ms: 129-142 / 252-255); 20,000 records/s no worse (392-449 against
# 402-554 ms). What it costs: a record on a partition little else arrives on waits up to 50 ms
# more at each stage's fetch (at 10 records/s p50 / p99 131 / 211-213 ms against 79-82 /
# 121-137).
PREFETCH_DEFAULTS: dict[str, object] = {
    "fetch.queue.backoff.ms": 20,
    "queued.min.messages": 20_000,
    "queued.max.messages.kbytes": 32 * 1024,
    "fetch.min.bytes": 32 * 1024,
    "fetch.wait.max.ms": 50,
}


def log_client_error(log: EventLogger, error: KafkaError, **fields: object) -> None:
    """The line of an ``error_cb`` for ``error``, with ``fields`` first.

    A broker out of reach, or a certificate refused in a handshake with one, is DEBUG here:
    librdkafka's own line of the same failure goes to ``BROKER_REACH``, which says it once per
    broker with a count ("N/N brokers are down", which has no line of its own, is counted there
    too). What an operator must cure (FATAL by runtime/kafka_errors.py: credentials, ACLs,
    fencing) is an ERROR; the rest a WARNING.
    """
    if broker_out_of_reach(error) or certificate_refusal(error) is not None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            BROKER_REACH.all_down(error.str())
        say = log.debug
    elif classify(error) is ErrorClass.FATAL:
        say = log.error
    else:
        say = log.warning
    line: dict[str, Any] = {**fields, "code": error.name(), "error": error.str()}
    say("kafka client error", **line)


# What librdkafka reports (to error_cb only) when the cluster refuses the credentials; the call
# itself fails as "Broker transport failure", which start-up retries as transient. A refused
# certificate reaches error_cb so too (runtime/kafka_errors.py certificate_refusal).
_REFUSED_CREDENTIALS = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
)


class _CredentialWatch:
    """error_cb of an admin client: the last refusal of its credentials. A holder of its own,
    not a bound method of the client: that would tie the client into a reference cycle, freed
    only by the cyclic collector, at any time and in any thread."""

    def __init__(self) -> None:
        self.refused: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() in _REFUSED_CREDENTIALS or certificate_refusal(error) is not None:
            self.refused = error


class RoleAdminClient(AdminClient):  # type: ignore[misc]  # confluent_kafka's is untyped
    """An AdminClient that remembers a refusal of its credentials (``check_credentials``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._watch = _CredentialWatch()
        self.bootstrap_servers = str(config.get("bootstrap.servers", ""))
        super().__init__({**config, "error_cb": self._watch})

    def forget_refusals(self) -> None:
        """Serve what is queued and forget it: a retry loop judges only what happens in it."""
        self.poll(0)
        self._watch.refused = None

    def check_credentials(self) -> None:
        """Raise ``AuthenticationError`` if the cluster refused this client's credentials
        (``CertificateRefusedError`` if a TLS handshake refused a certificate, either side's)."""
        self.poll(0)  # serves error_cb, which an admin call does not
        refused = self._watch.refused
        if refused is None:
            return
        side = certificate_refusal(refused)
        if side is None:
            raise AuthenticationError(refused, self.bootstrap_servers)
        raise CertificateRefusedError(
            refused, self.bootstrap_servers, client=side is CertificateRefusal.CLIENT
        )


def admin_client(cluster: ClusterSettings, **config: Any) -> RoleAdminClient:
    """An admin client of ``cluster`` (its properties, then ``config``), logging through us."""
    return RoleAdminClient({**cluster.client_config(), "logger": LIBRDKAFKA_LOG, **config})
