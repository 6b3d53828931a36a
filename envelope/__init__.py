"""Envelope format: how stage 1 wraps a run of source records for the staging topic."""

from envelope.codec import FORMAT_VERSION, RecordRow, decode, encode, encode_rows
from envelope.errors import EnvelopeError, MalformedEnvelopeError, UnsupportedVersionError
from envelope.model import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Envelope,
    SourceRecord,
)

__all__ = [
    "FORMAT_VERSION",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Envelope",
    "EnvelopeError",
    "MalformedEnvelopeError",
    "RecordRow",
    "SourceRecord",
    "UnsupportedVersionError",
    "decode",
    "encode",
    "encode_rows",
]
