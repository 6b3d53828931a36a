"""Envelope format: how stage 1 wraps a run of source records for the staging topic."""

from envelope.codec import (
    FORMAT_VERSION,
    EnvelopeRows,
    RecordRow,
    decode,
    decode_rows,
    encode,
    encode_rows,
)
from envelope.errors import EnvelopeError, MalformedEnvelopeError, UnsupportedVersionError
from envelope.model import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Envelope,
    SourceRecord,
)
from envelope.provenance import (
    HEADER_PROVENANCE,
    Provenance,
    carries_provenance,
    decode_provenance,
    encode_provenance,
    find_provenance,
    provenance_prefix,
)

__all__ = [
    "FORMAT_VERSION",
    "HEADER_PROVENANCE",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Envelope",
    "EnvelopeError",
    "EnvelopeRows",
    "MalformedEnvelopeError",
    "Provenance",
    "RecordRow",
    "SourceRecord",
    "UnsupportedVersionError",
    "carries_provenance",
    "decode",
    "decode_provenance",
    "decode_rows",
    "encode",
    "encode_provenance",
    "encode_rows",
    "find_provenance",
    "provenance_prefix",
]
