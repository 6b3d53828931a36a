"""The root of every error kafka-exactly raises, and the whole tree, drawn here once.

A role's process exits 1 (restart me) on any ``ExactlyError`` or untranslated ``KafkaException``
and 2 on a ``ConfigError`` (runtime/role.py); nothing else needs a list of fatal classes.

ExactlyError                        root: every package's errors derive from it
├── ConfigError                     runtime: an environment variable is missing, malformed, unknown
│   ├── IdentityTakenError          a live instance on this host already has our identity
│   └── DestinationCollisionError   two replicated topics named alike, or like a flow topic
├── KafkaClientError                runtime: a confluent_kafka error, classified (kafka_errors)
│   ├── RetriableKafkaError         transient: call again after a short backoff
│   ├── AbortableKafkaError         abort the open transaction, rewind the consumer, begin again
│   └── FatalKafkaError             this client is unusable: close it, make a new one or exit
│       ├── FencedError             another instance with our identity took over (zombie)
│       ├── NotAuthorizedError      the cluster refused an operation on a resource: an ACL
│       └── AuthenticationError     the cluster refused the credentials (SASL)
│           └── CertificateRefusedError  a TLS handshake refused our or the broker's certificate
├── ClientHungError                 runtime.deadline: a client call blocked past its hard deadline
├── TopicSetupError                 runtime: a topic could not be created, or got no leaders
├── HttpServerError                 runtime.http: the metrics/health port cannot be served
├── EnvelopeError                   envelope: anything wrong with an envelope
│   ├── UnsupportedVersionError     a well-formed envelope of a format version we cannot read
│   └── MalformedEnvelopeError      bytes, or an Envelope value, that break the format contract
├── LocalKafkaError                 localkafka: the embedded local clusters
│   ├── KafkaInstallError           the Kafka jars could not be resolved with Maven
│   ├── ClusterStateError           a cluster directory is missing, foreign or in the wrong state
│   └── ClusterStartError           the broker died or did not become ready in time
├── ReplicatorError                 stage 1
│   └── StagingMismatchError        the staging topic is not what was recorded at its creation
├── DeduplicatorError               stage 2
│   ├── StateStoreError             local RocksDB state cannot be opened, read or written
│   │   └── StateStoreLockedError   another client holds the store open: never deleted
│   ├── TransactionFailedError      a transaction cannot complete: abort, go on from the commit
│   ├── ProducerFailedError         librdkafka gave the producer up: a new one, from the commit
│   └── RestoreTimeoutError         a partition's state was not restored within the deadline
├── OffsetSyncError                 offset sync
│   ├── ReadTimeoutError            a cycle's reads did not reach their end in time
│   ├── NoOffsetsError              a cycle's first fetch answered for no group
│   └── StaleLeadershipError        partitions' leaders this client knows wrong: new clients
├── ValidatorError                  the audit (exit 3 unless a subclass says otherwise)
│   ├── InputError                  bad input: a cluster out of reach, an unknown topic (exit 2)
│   ├── IncompleteError             the audit could not finish: no verdict (exit 3)
│   └── MergeJarError               the merge plan's jar cannot be built: the join plan serves
├── DemoError                       exactly demo: a failure of the demo itself, not a verdict
│   └── GroupNotMovedError          the failover step's group did not arrive on the target
├── ChaosError                      exactly chaos: a failure of the run itself, not a verdict
└── RoleNotDrainedError             exactly run: a supervised role did not drain cleanly

Each package's errors.py holds its own classes and says what they mean; ``tests/runtime``
checks this drawing against the classes, so it cannot drift.
"""

from __future__ import annotations

from confluent_kafka import KafkaError


class ExactlyError(Exception):
    """Root of every error kafka-exactly raises."""


class ClientHungError(ExactlyError):
    """A client call still blocked past its hard deadline (runtime.deadline): the client is
    stuck in it, and only a new client (or a new process) goes on. ``thread`` is the one the
    call blocks; the stuck client must not be closed or destroyed before it ends."""

    def __init__(self, call: str, seconds: float, thread: object) -> None:
        super().__init__(f"{call} blocked past its hard deadline of {seconds:.0f} s")
        self.call = call
        self.seconds = seconds
        self.thread = thread


class ConfigError(ExactlyError):
    """One environment variable is wrong; ``str()`` is one line naming it.

    ``value`` is shown quoted after the name when given; pass ``"****"`` for a secret.
    """

    def __init__(self, variable: str, message: str, value: str | None = None) -> None:
        self.variable = variable
        self.message = _one_line(message)
        self.value = value
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.variable}: {self.message}"
        return f"{self.variable}={_quote(self.value)}: {self.message}"


class IdentityTakenError(ConfigError):
    """Another live instance on this host has this instance's flow, role and identity
    (runtime/identity.py): two would fence each other in turn."""


class DestinationCollisionError(ConfigError):
    """The naming settings give two replicated source topics one destination topic, or one a
    name of the flow's own topics or starting with ``__`` (runtime/topic_naming.py
    ``destination_names``): stage 2 would mix their records. ``variable`` is the setting that
    made the name; ``str()`` names the source topics and the destination."""


class KafkaClientError(ExactlyError):
    """A confluent_kafka error translated at the boundary; the original is ``kafka_error``."""

    def __init__(self, kafka_error: KafkaError, operation: str | None = None) -> None:
        self.kafka_error = kafka_error
        self.operation = operation
        reason = _one_line(kafka_error.str())
        where = f"{operation}: " if operation else ""
        super().__init__(f"{where}{kafka_error.name()}: {reason}")


class TopicSetupError(ExactlyError):
    """A topic could not be created, or its partitions got no leader in time."""


class RetriableKafkaError(KafkaClientError):
    """Transient (broker moving, coordinator loading, timeout): the same call may succeed."""


class AbortableKafkaError(KafkaClientError):
    """The open transaction cannot commit: abort it, rewind to the last commit, begin again."""


class FatalKafkaError(KafkaClientError):
    """The client cannot go on: close it and make a new one (or exit and be restarted)."""


class FencedError(FatalKafkaError):
    """A newer instance with the same transactional.id or group.instance.id fenced this one."""


class NotAuthorizedError(FatalKafkaError):
    """The cluster refused this role's principal ``operation`` on a resource: an ACL is missing
    (docs/security.md). Retrying cannot mend it; ``str()`` names what to grant."""

    def __init__(
        self, kafka_error: KafkaError, *, cluster: str, operation: str, resource: str, name: str
    ) -> None:
        super().__init__(kafka_error)
        self.cluster = cluster
        self.resource = resource
        self.name = name
        self.args = (
            f"not authorized on the {cluster} cluster: {operation} on {resource} {name} "
            f"({kafka_error.name()}; grant it to this role's principal)",
        )


class AuthenticationError(FatalKafkaError):
    """The cluster refused the client's credentials: retrying with the same ones cannot help;
    ``str()`` names the cluster's address and librdkafka's reason."""

    def __init__(self, kafka_error: KafkaError, bootstrap_servers: str) -> None:
        super().__init__(kafka_error)
        self.args = (
            f"authentication to {bootstrap_servers} failed: {_one_line(kafka_error.str())} "
            "(check that cluster's SASL and SSL properties)",
        )


class CertificateRefusedError(AuthenticationError):
    """A TLS handshake with the cluster refused a certificate: the broker ours (``client``), or
    we the broker's; ``str()`` names the cluster, the side, librdkafka's reason and what to
    check."""

    def __init__(self, kafka_error: KafkaError, bootstrap_servers: str, *, client: bool) -> None:
        super().__init__(kafka_error, bootstrap_servers)
        reason = _one_line(kafka_error.str())
        if client:
            self.args = (
                f"the cluster at {bootstrap_servers} refused this client's certificate: {reason} "
                "(check ssl.certificate.location and ssl.key.location, or their .pem and "
                "keystore forms, and that the cluster trusts the CA that signed it)",
            )
        else:
            self.args = (
                f"could not verify the certificate of the cluster at {bootstrap_servers}: "
                f"{reason} (check ssl.ca.location)",
            )


_MAX_SHOWN_VALUE = 200  # characters of a variable's value quoted in an error; a PEM is longer


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _quote(value: str) -> str:
    if len(value) > _MAX_SHOWN_VALUE:
        value = value[:_MAX_SHOWN_VALUE] + "..."
    return repr(value)
