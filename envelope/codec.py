"""Envelope wire format v1: the contract between stage 1 (writer) and stage 2 (reader).

An envelope is ONE msgpack array, packed with use_bin_type=True so that bin (bytes) and str
are distinct types. Arrays only, never maps: the envelope is written for every batch.

    [version, source_cluster_id, topic, topic_id, partition, prev_offset, records]

    version            int   FORMAT_VERSION (1); always first, read before anything else
    source_cluster_id  str   non-empty
    topic              str   non-empty
    topic_id           bin   exactly 16 bytes (Kafka's topic Uuid)
    partition          int   0 .. 2**31-1
    prev_offset        int   0 .. 2**63-1, less than the first record's offset; or nil at the
                             start of a stage-1 session
    records            array at least one record, offsets strictly increasing

    record = [offset, timestamp, timestamp_type, key, value, headers]

    offset             int   0 .. 2**63-1
    timestamp          int   -2**63 .. 2**63-1 (milliseconds since the epoch)
    timestamp_type     int   0 not available, 1 CreateTime, 2 LogAppendTime
    key                bin or nil
    value              bin or nil (nil is a tombstone)
    headers            array of [name, value] in Kafka's order; names may repeat

    header = [name, value]

    name               str
    value              bin or nil

Booleans are not ints, str is not bin, and nothing else (float, map, ext) appears anywhere.
decode() returns a fully valid Envelope or raises an EnvelopeError naming what is wrong and where;
encode() checks the same invariants (in the same function) before it writes a byte.
"""

from collections import deque
from dataclasses import fields
from itertools import repeat
from operator import attrgetter
from typing import Any, NamedTuple

import msgpack

from envelope.errors import MalformedEnvelopeError, UnsupportedVersionError
from envelope.model import Envelope, SourceRecord

FORMAT_VERSION = 1

_ENVELOPE_FIELDS = (
    "version",
    "source_cluster_id",
    "topic",
    "topic_id",
    "partition",
    "prev_offset",
    "records",
)
_RECORD_FIELDS = tuple(f.name for f in fields(SourceRecord))
_TOPIC_ID_BYTES = 16
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# How every v1 envelope starts: a msgpack fixarray of 7 elements, then the positive fixint 1.
_V1_PREFIX = bytes([0x90 | len(_ENVELOPE_FIELDS), FORMAT_VERSION])
# Enough input for the widest array header (5 bytes) and the widest int (9 bytes).
_PEEK_BYTES = 14

# The wire row of a record is its fields in declaration order.
_record_row = attrgetter(*_RECORD_FIELDS)
RecordRow = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class EnvelopeRows(NamedTuple):
    """A decoded envelope whose records are still wire rows: stage 2's hot path reads the rows
    it writes as they came off the wire, without a SourceRecord per record."""

    source_cluster_id: str
    topic: str
    topic_id: bytes
    partition: int
    prev_offset: int | None
    rows: tuple[RecordRow, ...]


# Slot setters of SourceRecord, in row order. decode() fills validated rows into new records
# through them: the frozen dataclass __init__ (object.__setattr__ per field) takes twice as long.
_RECORD_SETTERS = tuple(getattr(SourceRecord, name).__set__ for name in _RECORD_FIELDS)


def encode(envelope: Envelope) -> bytes:
    """Serialize an envelope; raises MalformedEnvelopeError if it breaks the format contract."""
    if type(envelope) is not Envelope:
        raise MalformedEnvelopeError(f"expected an Envelope, got {type(envelope).__name__}")
    records = envelope.records
    if type(records) is not tuple or not all(type(r) is SourceRecord for r in records):
        raise _records_type_error(records)
    return encode_rows(
        envelope.source_cluster_id,
        envelope.topic,
        envelope.topic_id,
        envelope.partition,
        envelope.prev_offset,
        tuple(map(_record_row, records)),
    )


def encode_rows(
    source_cluster_id: str,
    topic: str,
    topic_id: bytes,
    partition: int,
    prev_offset: int | None,
    rows: tuple[RecordRow, ...],
) -> bytes:
    """encode() for a writer that holds records as wire rows already, `(offset, timestamp,
    timestamp_type, key, value, headers)` with headers a tuple of `(name, value)` tuples: stage
    1's hot path, which skips building a SourceRecord per record. Same checks, same bytes."""
    wire = (FORMAT_VERSION, source_cluster_id, topic, topic_id, partition, prev_offset, rows)
    _validate(wire)
    try:
        packed: bytes = msgpack.packb(wire, use_bin_type=True)
        return packed
    except UnicodeEncodeError as exc:  # a str with lone surrogates: not representable in UTF-8
        raise MalformedEnvelopeError(f"envelope string is not encodable as UTF-8: {exc}") from exc


def decode(data: bytes) -> Envelope:
    """Parse an envelope; raises an EnvelopeError unless `data` is exactly one valid envelope."""
    cluster_id, topic, topic_id, partition, prev_offset, rows = decode_rows(data)
    return Envelope(cluster_id, topic, topic_id, partition, prev_offset, _build_records(rows))


def decode_rows(data: bytes) -> EnvelopeRows:
    """decode() with the records left as wire rows, `(offset, timestamp, timestamp_type, key,
    value, headers)`: same checks, the same EnvelopeError for the same input."""
    wire = _unpack(data)
    _validate(wire)
    return EnvelopeRows(*wire[1:])


def _unpack(data: bytes) -> Any:  # msgpack's value, of a shape _validate checks
    if not data:
        raise MalformedEnvelopeError("empty envelope (0 bytes)")
    if data[:2] != _V1_PREFIX:
        # Report another version as such, whatever its layout (maps, ext types) would be.
        version = _peek_version(data)
        if type(version) is int and version != FORMAT_VERSION:
            raise UnsupportedVersionError(version, FORMAT_VERSION)
    try:
        return msgpack.unpackb(data, **_unpack_options(len(data)))
    except msgpack.ExtraData as exc:
        raise MalformedEnvelopeError(
            f"envelope has {len(exc.extra)} trailing bytes after its msgpack value"
        ) from exc
    except msgpack.StackError as exc:
        raise MalformedEnvelopeError("envelope is nested too deeply to be msgpack v1") from exc
    except UnicodeDecodeError as exc:
        raise MalformedEnvelopeError(f"envelope string is not valid UTF-8: {exc}") from exc
    except ValueError as exc:  # also msgpack.FormatError and the limits below
        raise MalformedEnvelopeError(_unpack_failure(data, exc)) from exc


def _peek_version(data: bytes) -> object:
    """The first element of the top-level array; None if there is none or it is not short."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=_PEEK_BYTES)
    unpacker.feed(data[:_PEEK_BYTES])
    try:
        return unpacker.unpack() if unpacker.read_array_header() else None
    except (ValueError, msgpack.UnpackException):
        return None  # not an array, or a first element too long to be a version


def _unpack_options(size: int) -> dict[str, object]:
    """Limits that keep a hostile envelope from allocating much more than its own size.

    A declared length can never be honestly larger than the input, so `size` bounds every
    str, bin and array (up to the staging topic's max.message.bytes, 64 MiB or more).
    Maps and ext types never appear in format v1, so none is allowed to be built.
    """
    return {
        "raw": False,
        "use_list": False,  # arrays become tuples: the shape the value objects hold
        "max_str_len": size,
        "max_bin_len": size,
        "max_array_len": size,
        "max_map_len": 0,
        "max_ext_len": 0,
    }


def _unpack_failure(data: bytes, exc: ValueError) -> str:
    """Name the reason msgpack gave up (error path only: it may parse `data` again)."""
    text = str(exc) or type(exc).__name__
    if "max_map_len" in text:
        return f"envelope contains a msgpack map; format v1 uses arrays only ({text})"
    if "max_ext_len" in text:
        return f"envelope contains a msgpack ext type; format v1 has none ({text})"
    if "exceeds max_" in text:  # a declared length beyond the end of the input
        return f"truncated envelope: a length exceeds the whole {len(data)}-byte input ({text})"
    unpacker = msgpack.Unpacker(max_buffer_size=len(data), **_unpack_options(len(data)))
    unpacker.feed(data)
    try:
        unpacker.unpack()
    except msgpack.OutOfData:
        return f"truncated envelope: input ends inside a msgpack value ({len(data)} bytes)"
    except ValueError:
        pass  # the same failure again: report the original
    return f"envelope is not valid msgpack: {text}"


def _validate(wire: object) -> None:
    """Check every invariant of format v1 on the wire-shaped value (shared by encode and decode).

    `wire` is the tuple msgpack yields with use_list=False, or the one encode() is about to pack.
    Hot loop: exact type checks (so bool is not an int), one branch per field; messages are
    built only once something is wrong.
    """
    if type(wire) is not tuple:
        raise MalformedEnvelopeError(f"envelope is not a msgpack array: got {_kind(wire)}")
    if not wire:
        raise MalformedEnvelopeError("envelope is an empty array; the format version comes first")
    version = wire[0]
    if type(version) is not int:
        raise _field_error("version", "int", version)
    if version != FORMAT_VERSION:
        raise UnsupportedVersionError(version, FORMAT_VERSION)
    if len(wire) != len(_ENVELOPE_FIELDS):
        raise MalformedEnvelopeError(
            f"envelope has {len(wire)} fields, format v{FORMAT_VERSION} has {len(_ENVELOPE_FIELDS)}"
        )
    _, cluster_id, topic, topic_id, partition, prev_offset, rows = wire
    if type(cluster_id) is not str or not cluster_id:
        raise _field_error("source_cluster_id", "non-empty str", cluster_id)
    if type(topic) is not str or not topic:
        raise _field_error("topic", "non-empty str", topic)
    if type(topic_id) is not bytes or len(topic_id) != _TOPIC_ID_BYTES:
        raise _field_error("topic_id", f"{_TOPIC_ID_BYTES} bytes", topic_id)
    if type(partition) is not int or not 0 <= partition <= _INT32_MAX:
        raise _field_error("partition", "int in 0..2**31-1", partition)
    if prev_offset is None:
        last = -1
    elif type(prev_offset) is int and 0 <= prev_offset <= _INT64_MAX:
        last = prev_offset
    else:
        raise _field_error("prev_offset", "nil or int in 0..2**63-1", prev_offset)
    if type(rows) is not tuple:
        raise _field_error("records", "array", rows)
    if not rows:
        raise MalformedEnvelopeError("envelope field 'records': empty (at least one record)")
    _validate_records(rows, last, prev_offset)


def _validate_records(rows: tuple[object, ...], last: int, prev_offset: int | None) -> None:
    """The records of `_validate`'s envelope, after its header fields: one call per envelope,
    the loop over its records inside (a call per record would cost the hot path)."""
    int64_min, int64_max = _INT64_MIN, _INT64_MAX
    for i, row in enumerate(rows):
        if type(row) is not tuple or len(row) != 6:
            raise _row_shape_error(f"envelope record {i}", row, _RECORD_FIELDS)
        offset, timestamp, timestamp_type, key, value, headers = row
        if type(offset) is not int or not last < offset <= int64_max:
            raise _offset_error(i, offset, last, prev_offset)
        last = offset
        if type(timestamp) is not int or not int64_min <= timestamp <= int64_max:
            raise _record_error(i, "timestamp", "int in -2**63..2**63-1", timestamp)
        if type(timestamp_type) is not int or not 0 <= timestamp_type <= 2:
            raise _record_error(i, "timestamp_type", "0, 1 or 2", timestamp_type)
        if type(key) is not bytes and key is not None:
            raise _record_error(i, "key", "bytes or nil", key)
        if type(value) is not bytes and value is not None:
            raise _record_error(i, "value", "bytes or nil", value)
        if type(headers) is not tuple:
            raise _record_error(i, "headers", "array", headers)
        for header in headers:  # no enumerate(): it would cost more than the checks
            if type(header) is not tuple or len(header) != 2:
                where = f"envelope record {i} header {_position(headers, header)}"
                raise _row_shape_error(where, header, ("name", "value"))
            name, header_value = header
            if type(name) is not str:
                raise _header_error(i, _position(headers, header), "name", "str", name)
            if type(header_value) is not bytes and header_value is not None:
                j = _position(headers, header)
                raise _header_error(i, j, "value", "bytes or nil", header_value)


def _build_records(rows: tuple[tuple[object, ...], ...]) -> tuple[SourceRecord, ...]:
    """SourceRecord(*row) for each validated row, column by column at C speed."""
    records = tuple(map(object.__new__, repeat(SourceRecord, len(rows))))
    for set_field, column in zip(_RECORD_SETTERS, zip(*rows, strict=True), strict=True):
        deque(map(set_field, records, column), maxlen=0)
    return records


def _kind(value: object) -> str:
    """The msgpack-level name of a decoded value's type, for error messages."""
    if value is None:
        return "nil"
    if type(value) is tuple:
        return f"array of {len(value)}"
    if type(value) is list:  # only from encode(): the value objects hold arrays as tuples
        return "list (arrays are tuples)"
    if type(value) is dict:
        return "map"
    if type(value) is bytes:
        return f"bytes of length {len(value)}"
    if isinstance(value, msgpack.ExtType):
        return f"ext type {value.code}"
    if isinstance(value, msgpack.Timestamp):
        return "ext type -1 (timestamp)"
    if type(value) is int:
        return f"int {value}"
    return type(value).__name__


def _field_error(field: str, expected: str, got: object) -> MalformedEnvelopeError:
    return MalformedEnvelopeError(
        f"envelope field '{field}': expected {expected}, got {_kind(got)}"
    )


def _record_error(i: int, field: str, expected: str, got: object) -> MalformedEnvelopeError:
    return MalformedEnvelopeError(
        f"envelope record {i} field '{field}': expected {expected}, got {_kind(got)}"
    )


def _header_error(i: int, j: int, field: str, expected: str, got: object) -> MalformedEnvelopeError:
    return MalformedEnvelopeError(
        f"envelope record {i} header {j} field '{field}': expected {expected}, got {_kind(got)}"
    )


def _position(headers: tuple[object, ...], header: object) -> int:
    """Index of `header`; its checks do not depend on position, so the first occurrence failed."""
    return next(j for j, candidate in enumerate(headers) if candidate is header)


def _row_shape_error(where: str, row: object, names: tuple[str, ...]) -> MalformedEnvelopeError:
    layout = "[" + ", ".join(names) + "]"
    if type(row) is not tuple:
        return MalformedEnvelopeError(f"{where}: expected array {layout}, got {_kind(row)}")
    return MalformedEnvelopeError(
        f"{where} has {len(row)} fields, format v{FORMAT_VERSION} has {len(names)} {layout}"
    )


def _offset_error(
    i: int, offset: object, last: int, prev_offset: int | None
) -> MalformedEnvelopeError:
    if type(offset) is not int or not 0 <= offset <= _INT64_MAX:
        return _record_error(i, "offset", "int in 0..2**63-1", offset)
    after = f"prev_offset {prev_offset}" if i == 0 else f"record {i - 1}'s offset {last}"
    return MalformedEnvelopeError(
        f"envelope record {i} field 'offset': {offset} is not greater than {after}"
        " (offsets must strictly increase)"
    )


def _records_type_error(records: object) -> MalformedEnvelopeError:
    if type(records) is not tuple:
        return MalformedEnvelopeError(
            f"envelope field 'records': expected a tuple of SourceRecord, got"
            f" {type(records).__name__}"
        )
    i, record = next((i, r) for i, r in enumerate(records) if type(r) is not SourceRecord)
    return MalformedEnvelopeError(
        f"envelope record {i}: expected a SourceRecord, got {type(record).__name__}"
    )
