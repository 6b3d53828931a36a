"""decode() returns a fully valid Envelope or raises one EnvelopeError that says what and where.

Each case builds the wire value by hand (msgpack lists, as any writer could produce them) from
one valid envelope, breaks one thing, and checks the error names it.
"""

import dataclasses

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envelope import (
    Envelope,
    EnvelopeError,
    MalformedEnvelopeError,
    SourceRecord,
    UnsupportedVersionError,
    decode,
    encode,
)

TOPIC_ID = bytes(range(16))
# Positions in the wire arrays (see envelope/codec.py).
VERSION, CLUSTER, TOPIC, TOPIC_ID_FIELD, PARTITION, PREV_OFFSET, RECORDS = range(7)
OFFSET, TIMESTAMP, TIMESTAMP_TYPE, KEY, VALUE, HEADERS = range(6)
NAME, HEADER_VALUE = range(2)


def valid_wire() -> list:
    return [
        1,
        "cluster-A",
        "orders",
        TOPIC_ID,
        3,
        9,
        [
            [10, 1_700_000_000_000, 1, b"k0", b"v0", [["trace", b"t"], ["trace", None]]],
            [11, 1_700_000_000_001, 1, None, None, []],
            [15, -1, 0, b"", b"", [["h", b""]]],
        ],
    ]


def pack(wire: object) -> bytes:
    return msgpack.packb(wire, use_bin_type=True)


def rejected(data: bytes, expected: type[EnvelopeError] = MalformedEnvelopeError) -> str:
    with pytest.raises(expected) as info:
        decode(data)
    return str(info.value)


def test_the_valid_wire_value_decodes() -> None:
    """The starting point of every case below is itself valid."""
    envelope = decode(pack(valid_wire()))
    assert envelope.prev_offset == 9
    assert [r.offset for r in envelope.records] == [10, 11, 15]


# --- framing -----------------------------------------------------------------------------------


def test_empty_input() -> None:
    assert "empty envelope" in rejected(b"")


def test_truncated_input() -> None:
    data = pack(valid_wire())
    message = rejected(data[: len(data) // 2])
    assert message.startswith("truncated envelope")


def test_truncated_inside_a_declared_array_length() -> None:
    assert rejected(b"\x97\x01").startswith("truncated envelope")


def test_trailing_extra_bytes() -> None:
    assert "3 trailing bytes" in rejected(pack(valid_wire()) + b"\x00\x01\x02")


def test_two_envelopes_back_to_back_are_trailing_bytes() -> None:
    data = pack(valid_wire())
    assert "trailing bytes" in rejected(data + data)


@pytest.mark.parametrize(
    ("wire", "kind"),
    [(5, "int 5"), ("envelope", "str"), (b"\x97", "bytes of length 1"), (None, "nil")],
)
def test_not_an_array(wire: object, kind: str) -> None:
    assert rejected(pack(wire)) == f"envelope is not a msgpack array: got {kind}"


def test_map_instead_of_the_envelope_array() -> None:
    assert "msgpack map" in rejected(pack({"version": 1, "topic": "orders"}))


def test_map_where_a_record_array_belongs() -> None:
    wire = valid_wire()
    wire[RECORDS][1] = {"offset": 11}
    assert "msgpack map" in rejected(pack(wire))


def test_empty_map_where_the_headers_array_belongs() -> None:
    wire = valid_wire()
    wire[RECORDS][1][HEADERS] = {}
    assert rejected(pack(wire)) == "envelope record 1 field 'headers': expected array, got map"


def test_not_msgpack_at_all() -> None:
    assert "not valid msgpack" in rejected(b"\xc1")  # 0xc1 is never used by msgpack


def test_nesting_deeper_than_msgpack_allows() -> None:
    assert "nested too deeply" in rejected(b"\x91" * 10_000 + b"\xc0")


def test_invalid_utf8_in_a_str() -> None:
    wire = pack(valid_wire()).replace(b"\xa6orders", b"\xa6order\xff")
    assert "not valid UTF-8" in rejected(wire)


# --- version -----------------------------------------------------------------------------------


def test_unknown_version() -> None:
    wire = valid_wire()
    wire[VERSION] = 7
    with pytest.raises(UnsupportedVersionError) as info:
        decode(pack(wire))
    assert str(info.value) == "unsupported envelope format version 7 (this build reads 1)"
    assert info.value.version == 7


@pytest.mark.parametrize(
    "wire",
    [
        [2, {"a": "map"}, msgpack.ExtType(1, b"ext")],
        [2**64 - 1],
        [-3, *valid_wire()[1:]],
        [300, *valid_wire()[1:], "extra"],
    ],
    ids=["maps-and-ext", "uint64", "negative", "wide-int"],
)
def test_version_is_checked_before_the_layout(wire: list) -> None:
    """A future version may have any layout; it must still be reported as a version."""
    message = rejected(pack(wire), UnsupportedVersionError)
    assert f"unsupported envelope format version {wire[0]} (this build reads 1)" == message


def test_version_of_a_truncated_future_envelope_is_reported() -> None:
    assert "version 2" in rejected(pack([2, "x" * 40])[:10], UnsupportedVersionError)


@pytest.mark.parametrize(("version", "kind"), [("1", "str"), (True, "bool"), (1.0, "float")])
def test_non_int_version_is_malformed(version: object, kind: str) -> None:
    wire = valid_wire()
    wire[VERSION] = version
    assert rejected(pack(wire)) == f"envelope field 'version': expected int, got {kind}"


def test_empty_array() -> None:
    assert "empty array" in rejected(pack([]))


# --- field counts ------------------------------------------------------------------------------


def test_envelope_with_an_extra_field() -> None:
    wire = [*valid_wire(), "extra"]
    assert rejected(pack(wire)) == "envelope has 8 fields, format v1 has 7"


def test_envelope_with_a_missing_field() -> None:
    wire = valid_wire()
    del wire[PREV_OFFSET]
    assert rejected(pack(wire)) == "envelope has 6 fields, format v1 has 7"


@pytest.mark.parametrize("count", [5, 7])
def test_record_with_wrong_field_count(count: int) -> None:
    wire = valid_wire()
    wire[RECORDS][2] = ([*wire[RECORDS][2], None] * 2)[:count]
    assert rejected(pack(wire)).startswith(
        f"envelope record 2 has {count} fields, format v1 has 6 [offset, timestamp,"
    )


@pytest.mark.parametrize(("header", "count"), [(["trace"], 1), (["trace", b"t", b"x"], 3)])
def test_header_with_wrong_field_count(header: list, count: int) -> None:
    wire = valid_wire()
    wire[RECORDS][0][HEADERS][1] = header
    assert (
        rejected(pack(wire))
        == f"envelope record 0 header 1 has {count} fields, format v1 has 2 [name, value]"
    )


def test_header_that_is_not_an_array() -> None:
    wire = valid_wire()
    wire[RECORDS][0][HEADERS][0] = "trace=t"
    assert (
        rejected(pack(wire)) == "envelope record 0 header 0: expected array [name, value], got str"
    )


# --- types -------------------------------------------------------------------------------------

TYPE_CASES = [
    # (path into the wire value, wrong value, expected message)
    ((PARTITION,), True, "envelope field 'partition': expected int in 0..2**31-1, got bool"),
    ((RECORDS, 1, OFFSET), True, "envelope record 1 field 'offset': expected int in 0..2**63-1,"),
    ((RECORDS, 1, TIMESTAMP), False, "envelope record 1 field 'timestamp': expected int"),
    ((RECORDS, 1, TIMESTAMP_TYPE), True, "envelope record 1 field 'timestamp_type': expected"),
    ((RECORDS, 0, TIMESTAMP), 1.5, "field 'timestamp': expected int in -2**63..2**63-1, got float"),
    ((RECORDS, 2, KEY), 7, "envelope record 2 field 'key': expected bytes or nil, got int 7"),
    ((RECORDS, 2, KEY), "k", "envelope record 2 field 'key': expected bytes or nil, got str"),
    ((RECORDS, 1, VALUE), "v", "envelope record 1 field 'value': expected bytes or nil, got str"),
    (
        (RECORDS, 1, VALUE),
        False,
        "envelope record 1 field 'value': expected bytes or nil, got bool",
    ),
    ((RECORDS, 1, HEADERS), None, "envelope record 1 field 'headers': expected array, got nil"),
    ((RECORDS, 0, HEADERS, 1, NAME), b"trace", "record 0 header 1 field 'name': expected str, got"),
    ((RECORDS, 2, HEADERS, 0, HEADER_VALUE), "x", "header 0 field 'value': expected bytes or nil"),
    ((CLUSTER,), b"cluster-A", "envelope field 'source_cluster_id': expected non-empty str, got"),
    ((TOPIC,), b"orders", "envelope field 'topic': expected non-empty str, got bytes of length 6"),
    ((TOPIC_ID_FIELD,), TOPIC_ID.hex(), "envelope field 'topic_id': expected 16 bytes, got str"),
    ((TOPIC_ID_FIELD,), None, "envelope field 'topic_id': expected 16 bytes, got nil"),
    ((PREV_OFFSET,), "9", "envelope field 'prev_offset': expected nil or int in 0..2**63-1, got"),
    ((RECORDS,), None, "envelope field 'records': expected array, got nil"),
    ((RECORDS, 1), 11, "envelope record 1: expected array [offset, timestamp"),
    (
        (RECORDS, 0, KEY),
        msgpack.ExtType(5, b""),
        "field 'key': expected bytes or nil, got ext type 5",
    ),
]


def set_at(wire: list, path: tuple[int, ...], value: object) -> list:
    target = wire
    for index in path[:-1]:
        target = target[index]
    target[path[-1]] = value
    return wire


@pytest.mark.parametrize(("path", "value", "message"), TYPE_CASES)
def test_wrong_type(path: tuple[int, ...], value: object, message: str) -> None:
    assert message in rejected(pack(set_at(valid_wire(), path, value)))


@pytest.mark.parametrize(
    "ext", [msgpack.ExtType(5, b"abc"), msgpack.Timestamp(1)], ids=["ext", "timestamp"]
)
def test_msgpack_ext_type(ext: object) -> None:
    wire = set_at(valid_wire(), (RECORDS, 0, VALUE), ext)
    assert "msgpack ext type" in rejected(pack(wire))


# --- values ------------------------------------------------------------------------------------


def test_negative_partition() -> None:
    wire = set_at(valid_wire(), (PARTITION,), -1)
    assert rejected(pack(wire)) == (
        "envelope field 'partition': expected int in 0..2**31-1, got int -1"
    )


def test_negative_offset() -> None:
    wire = set_at(valid_wire(), (PREV_OFFSET,), None)
    set_at(wire, (RECORDS, 0, OFFSET), -1)
    assert rejected(pack(wire)) == (
        "envelope record 0 field 'offset': expected int in 0..2**63-1, got int -1"
    )


def test_offset_beyond_int64() -> None:
    wire = set_at(valid_wire(), (RECORDS, 2, OFFSET), 2**64 - 1)
    assert "record 2 field 'offset': expected int in 0..2**63-1" in rejected(pack(wire))


def test_negative_prev_offset() -> None:
    wire = set_at(valid_wire(), (PREV_OFFSET,), -1)
    assert "envelope field 'prev_offset': expected nil or int in 0..2**63-1, got int -1" in (
        rejected(pack(wire))
    )


@pytest.mark.parametrize("prev_offset", [10, 11])
def test_prev_offset_not_before_the_first_record(prev_offset: int) -> None:
    wire = set_at(valid_wire(), (PREV_OFFSET,), prev_offset)
    assert rejected(pack(wire)) == (
        f"envelope record 0 field 'offset': 10 is not greater than prev_offset {prev_offset}"
        " (offsets must strictly increase)"
    )


@pytest.mark.parametrize("offset", [11, 10])
def test_offsets_not_strictly_increasing(offset: int) -> None:
    wire = set_at(valid_wire(), (RECORDS, 2, OFFSET), offset)
    assert rejected(pack(wire)) == (
        f"envelope record 2 field 'offset': {offset} is not greater than record 1's offset 11"
        " (offsets must strictly increase)"
    )


def test_empty_record_list() -> None:
    wire = set_at(valid_wire(), (RECORDS,), [])
    assert rejected(pack(wire)) == "envelope field 'records': empty (at least one record)"


@pytest.mark.parametrize("size", [0, 15, 17])
def test_topic_id_not_16_bytes(size: int) -> None:
    wire = set_at(valid_wire(), (TOPIC_ID_FIELD,), bytes(size))
    assert rejected(pack(wire)) == (
        f"envelope field 'topic_id': expected 16 bytes, got bytes of length {size}"
    )


@pytest.mark.parametrize(("field", "name"), [(CLUSTER, "source_cluster_id"), (TOPIC, "topic")])
def test_empty_cluster_id_or_topic(field: int, name: str) -> None:
    wire = set_at(valid_wire(), (field,), "")
    assert rejected(pack(wire)) == f"envelope field '{name}': expected non-empty str, got str"


@pytest.mark.parametrize("timestamp_type", [3, -1, 255])
def test_timestamp_type_out_of_range(timestamp_type: int) -> None:
    wire = set_at(valid_wire(), (RECORDS, 1, TIMESTAMP_TYPE), timestamp_type)
    assert rejected(pack(wire)) == (
        f"envelope record 1 field 'timestamp_type': expected 0, 1 or 2, got int {timestamp_type}"
    )


# --- encode checks the same invariants ---------------------------------------------------------

VALID = decode(pack(valid_wire()))


def with_record(index: int, **changes: object) -> Envelope:
    records = list(VALID.records)
    records[index] = dataclasses.replace(records[index], **changes)
    return dataclasses.replace(VALID, records=tuple(records))


@pytest.mark.parametrize(
    ("envelope", "wire"),
    [
        (dataclasses.replace(VALID, partition=True), set_at(valid_wire(), (PARTITION,), True)),
        (dataclasses.replace(VALID, topic_id=b"short"), set_at(valid_wire(), (3,), b"short")),
        (dataclasses.replace(VALID, prev_offset=10), set_at(valid_wire(), (PREV_OFFSET,), 10)),
        (dataclasses.replace(VALID, records=()), set_at(valid_wire(), (RECORDS,), [])),
        (with_record(1, offset=10), set_at(valid_wire(), (RECORDS, 1, OFFSET), 10)),
        (with_record(2, key="k"), set_at(valid_wire(), (RECORDS, 2, KEY), "k")),
        (with_record(0, timestamp_type=3), set_at(valid_wire(), (RECORDS, 0, TIMESTAMP_TYPE), 3)),
        (
            with_record(2, headers=(("h", 1),)),
            set_at(valid_wire(), (RECORDS, 2, HEADERS), [["h", 1]]),
        ),
        (with_record(2, headers=(("h",),)), set_at(valid_wire(), (RECORDS, 2, HEADERS), [["h"]])),
    ],
)
def test_encode_rejects_what_decode_rejects_with_the_same_message(envelope, wire) -> None:
    with pytest.raises(MalformedEnvelopeError) as info:
        encode(envelope)
    assert str(info.value) == rejected(pack(wire))


@pytest.mark.parametrize(
    ("envelope", "message"),
    [
        (with_record(0, key=bytearray(b"k")), "field 'key': expected bytes or nil, got bytearray"),
        (with_record(0, headers=[("h", b"")]), "'headers': expected array, got list (arrays are"),
        (with_record(0, offset=2**64), "record 0 field 'offset': expected int in 0..2**63-1"),
        (
            dataclasses.replace(VALID, records=list(VALID.records)),
            "expected a tuple of SourceRecord",
        ),
        (
            dataclasses.replace(VALID, records=(VALID.records[0], (12,))),
            "record 1: expected a Sour",
        ),
        (dataclasses.replace(VALID, topic="\ud800"), "not encodable as UTF-8"),
        ("not an envelope", "expected an Envelope, got str"),
    ],
)
def test_encode_rejects_values_that_would_not_round_trip(envelope, message: str) -> None:
    with pytest.raises(MalformedEnvelopeError) as info:
        encode(envelope)
    assert message in str(info.value)


# --- fuzzing -----------------------------------------------------------------------------------


def decodes_or_raises_envelope_error(data: bytes) -> None:
    """The whole promise: a fully valid Envelope, or EnvelopeError, and nothing else."""
    try:
        envelope = decode(data)
    except EnvelopeError:
        return
    assert type(envelope) is Envelope
    assert all(type(r) is SourceRecord for r in envelope.records)
    assert decode(encode(envelope)) == envelope


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    decodes_or_raises_envelope_error(data)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=5)
    | st.binary(max_size=20)
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=3)),
    lambda children: (
        st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=3), children)
    ),
    max_leaves=30,
)


@settings(max_examples=500)
@given(msgpack_values)
def test_random_msgpack_values(value: object) -> None:
    """Well-formed msgpack of any shape reaches the validator, which must reject it cleanly."""
    decodes_or_raises_envelope_error(pack(value))


@settings(max_examples=300)
@given(st.sets(st.sampled_from(range(1, 7))), st.sets(st.sampled_from(range(6))), st.data())
def test_random_values_in_a_valid_layout(
    envelope_fields: set[int], record_fields: set[int], data: st.DataObject
) -> None:
    """Replace whole fields of a valid envelope with arbitrary values, some of them valid."""
    wire = valid_wire()
    for field in record_fields:
        wire[RECORDS][1][field] = data.draw(msgpack_values)
    for field in envelope_fields:
        wire[field] = data.draw(msgpack_values)
    decodes_or_raises_envelope_error(pack(wire))


VALID_BYTES = pack(valid_wire())


def test_every_truncation_is_reported_as_truncated() -> None:
    for end in range(1, len(VALID_BYTES)):
        assert rejected(VALID_BYTES[:end]).startswith("truncated envelope"), end


@settings(max_examples=500)
@given(st.data())
def test_flipped_bytes(data: st.DataObject) -> None:
    mutated = bytearray(VALID_BYTES)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] ^= data.draw(st.integers(1, 255))
    decodes_or_raises_envelope_error(bytes(mutated))


@settings(max_examples=100)
@given(st.binary(min_size=1, max_size=40))
def test_appended_bytes(tail: bytes) -> None:
    assert f"{len(tail)} trailing bytes" in rejected(VALID_BYTES + tail)
