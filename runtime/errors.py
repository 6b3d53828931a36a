"""Errors of runtime.

ExactlyError                  root of every error runtime raises
├── ConfigError               an environment variable is missing, malformed or unknown
└── KafkaClientError          a confluent_kafka error, classified (kafka_errors.classify)
    ├── RetriableKafkaError   transient: call again after a short backoff
    ├── AbortableKafkaError   abort the open transaction, rewind the consumer, begin again
    └── FatalKafkaError       this client is unusable: close it, make a new one or exit
        └── FencedError       another instance with our identity took over (zombie)
"""

from __future__ import annotations

from confluent_kafka import KafkaError


class ExactlyError(Exception):
    """Root of every error runtime raises."""


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


class KafkaClientError(ExactlyError):
    """A confluent_kafka error translated at the boundary; the original is ``kafka_error``."""

    def __init__(self, kafka_error: KafkaError, operation: str | None = None) -> None:
        self.kafka_error = kafka_error
        self.operation = operation
        reason = _one_line(kafka_error.str())
        where = f"{operation}: " if operation else ""
        super().__init__(f"{where}{kafka_error.name()}: {reason}")


class RetriableKafkaError(KafkaClientError):
    """Transient (broker moving, coordinator loading, timeout): the same call may succeed."""


class AbortableKafkaError(KafkaClientError):
    """The open transaction cannot commit: abort it, rewind to the last commit, begin again."""


class FatalKafkaError(KafkaClientError):
    """The client cannot go on: close it and make a new one (or exit and be restarted)."""


class FencedError(FatalKafkaError):
    """A newer instance with the same transactional.id or group.instance.id fenced this one."""


_MAX_SHOWN_VALUE = 200  # characters of a variable's value quoted in an error; a PEM is longer


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _quote(value: str) -> str:
    if len(value) > _MAX_SHOWN_VALUE:
        value = value[:_MAX_SHOWN_VALUE] + "..."
    return repr(value)
