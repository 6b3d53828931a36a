"""What every process shares: settings, Kafka error classification, the runtime errors."""

from runtime.broker_reach import BROKER_REACH, BrokerReach, broker_out_of_reach
from runtime.clients import LIBRDKAFKA_LOG, PREFETCH_DEFAULTS, admin_client, log_client_error
from runtime.consuming import consume_ready
from runtime.errors import (
    AbortableKafkaError,
    ConfigError,
    ExactlyError,
    FatalKafkaError,
    FencedError,
    KafkaClientError,
    NotAuthorizedError,
    RetriableKafkaError,
)
from runtime.fenced_joins import FencedJoins
from runtime.http import Health, HttpServer, HttpServerError, serve_http
from runtime.kafka_errors import (
    ErrorClass,
    PartitionAnswer,
    call_retrying,
    classify,
    kafka_error_of,
    member_fenced,
    partition_answer,
    producer_mendable,
    raise_if_refused,
    records_refused,
    refusal,
    refused_for_good,
    to_client_error,
    translate_kafka_errors,
)
from runtime.logs import EventLogger, configure_logging, get_logger
from runtime.producing import abort_or_replace, produce_when_room
from runtime.properties import is_secret_property
from runtime.settings import ClusterSettings, Settings, load_settings, render_config
from runtime.shutdown import GracefulShutdown

__all__ = [
    "BROKER_REACH",
    "LIBRDKAFKA_LOG",
    "PREFETCH_DEFAULTS",
    "AbortableKafkaError",
    "BrokerReach",
    "ClusterSettings",
    "ConfigError",
    "ErrorClass",
    "EventLogger",
    "ExactlyError",
    "FatalKafkaError",
    "FencedError",
    "FencedJoins",
    "GracefulShutdown",
    "Health",
    "HttpServer",
    "HttpServerError",
    "KafkaClientError",
    "NotAuthorizedError",
    "PartitionAnswer",
    "RetriableKafkaError",
    "Settings",
    "abort_or_replace",
    "admin_client",
    "broker_out_of_reach",
    "call_retrying",
    "classify",
    "configure_logging",
    "consume_ready",
    "get_logger",
    "is_secret_property",
    "kafka_error_of",
    "load_settings",
    "log_client_error",
    "member_fenced",
    "partition_answer",
    "produce_when_room",
    "producer_mendable",
    "raise_if_refused",
    "records_refused",
    "refusal",
    "refused_for_good",
    "render_config",
    "serve_http",
    "to_client_error",
    "translate_kafka_errors",
]
