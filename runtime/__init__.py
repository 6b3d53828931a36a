"""What every process shares: settings, Kafka error classification, the runtime errors."""

from runtime.errors import (
    AbortableKafkaError,
    ConfigError,
    ExactlyError,
    FatalKafkaError,
    FencedError,
    KafkaClientError,
    RetriableKafkaError,
)
from runtime.kafka_errors import ErrorClass, classify, to_client_error, translate_kafka_errors
from runtime.properties import is_secret_property
from runtime.settings import ClusterSettings, Settings, load_settings, render_config

__all__ = [
    "AbortableKafkaError",
    "ClusterSettings",
    "ConfigError",
    "ErrorClass",
    "ExactlyError",
    "FatalKafkaError",
    "FencedError",
    "KafkaClientError",
    "RetriableKafkaError",
    "Settings",
    "classify",
    "is_secret_property",
    "load_settings",
    "render_config",
    "to_client_error",
    "translate_kafka_errors",
]
