"""encode → decode gives back the same Envelope, for every envelope the contract allows."""

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from envelope import (
    FORMAT_VERSION,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Envelope,
    EnvelopeError,
    SourceRecord,
    decode,
    encode,
    encode_rows,
)

INT64_MAX = 2**63 - 1
TOPIC_ID = bytes(range(16))

maybe_bytes = st.none() | st.binary(max_size=64)
# A few fixed names make repeated header names likely; arbitrary text covers the rest.
header_names = st.sampled_from(["", "trace-id", "trace-id", "ü"]) | st.text(max_size=8)
headers = st.lists(st.tuples(header_names, maybe_bytes), max_size=5).map(tuple)


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    offsets = sorted(draw(st.lists(st.integers(0, INT64_MAX), min_size=1, max_size=8, unique=True)))
    prev_offset = draw(st.none() | st.integers(0, offsets[0] - 1)) if offsets[0] else None
    records = tuple(
        SourceRecord(
            offset=offset,
            timestamp=draw(st.integers(-(2**63), INT64_MAX)),
            timestamp_type=draw(st.sampled_from([0, 1, 2])),
            key=draw(maybe_bytes),
            value=draw(maybe_bytes),
            headers=draw(headers),
        )
        for offset in offsets
    )
    return Envelope(
        source_cluster_id=draw(st.text(min_size=1, max_size=30)),
        topic=draw(st.text(min_size=1, max_size=30)),
        topic_id=draw(st.binary(min_size=16, max_size=16)),
        partition=draw(st.integers(0, 2**31 - 1)),
        prev_offset=prev_offset,
        records=records,
    )


def one_record(**fields: object) -> Envelope:
    record = {
        "offset": 42,
        "timestamp": 1_700_000_000_000,
        "timestamp_type": TIMESTAMP_CREATE_TIME,
        "key": b"k",
        "value": b"v",
        "headers": (),
    } | fields
    return Envelope("cluster-A", "orders", TOPIC_ID, 3, 41, (SourceRecord(**record),))


@settings(max_examples=300)
@given(envelopes())
@example(one_record(value=b""))
@example(one_record(value=None))
@example(one_record(key=None))
@example(one_record(key=b""))
@example(one_record(headers=(("all-bytes", bytes(range(256))),)))
@example(one_record(headers=tuple(("b", bytes([i])) for i in range(256))))
@example(one_record(headers=(("dup", None), ("dup", b""), ("dup", b"\x00"))))
@example(one_record(offset=INT64_MAX, timestamp=-1, timestamp_type=TIMESTAMP_NOT_AVAILABLE))
@example(one_record(timestamp_type=TIMESTAMP_LOG_APPEND_TIME))
def test_encode_then_decode_gives_back_the_envelope(envelope: Envelope) -> None:
    decoded = decode(encode(envelope))
    assert decoded == envelope
    assert all(type(r) is SourceRecord for r in decoded.records)
    assert hash(decoded) == hash(envelope)


def test_one_mebibyte_value_round_trips() -> None:
    value = bytes(range(256)) * 4096
    envelope = one_record(value=value)
    assert decode(encode(envelope)) == envelope


def test_unicode_names_round_trip() -> None:
    envelope = Envelope(
        "クラスタ",
        "topic.名前-ü_😀",
        TOPIC_ID,
        0,
        None,
        one_record(headers=(("ключ", b"x"),)).records,
    )
    assert decode(encode(envelope)) == envelope


def test_wire_layout_is_one_array_with_the_version_first() -> None:
    envelope = one_record(key=None, headers=(("h", None),))
    assert msgpack.unpackb(encode(envelope), raw=False) == [
        FORMAT_VERSION,
        "cluster-A",
        "orders",
        TOPIC_ID,
        3,
        41,
        [[42, 1_700_000_000_000, 1, None, b"v", [["h", None]]]],
    ]


@given(envelopes())
def test_encode_rows_writes_the_same_bytes_as_encode(envelope):
    rows = tuple(
        (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
        for r in envelope.records
    )
    assert encode_rows(
        envelope.source_cluster_id,
        envelope.topic,
        envelope.topic_id,
        envelope.partition,
        envelope.prev_offset,
        rows,
    ) == encode(envelope)


def test_encode_rows_checks_like_encode():
    with pytest.raises(EnvelopeError, match="record 1 field 'offset'"):
        encode_rows(
            "c", "t", bytes(16), 0, None, ((5, 0, 1, None, b"", ()), (5, 0, 1, None, b"", ()))
        )


def test_find_provenance_reads_the_first_valued_header_and_nothing_malformed():
    from envelope import HEADER_PROVENANCE, Provenance, encode_provenance, find_provenance

    origin = encode_provenance("cluster-A", 3, 17)
    assert find_provenance(
        [("h", b"1"), (HEADER_PROVENANCE, None), (HEADER_PROVENANCE, origin)]
    ) == (Provenance("cluster-A", 3, 17))
    assert find_provenance([("h", b"1")]) is None
    assert find_provenance(None) is None
    assert find_provenance([(HEADER_PROVENANCE, b"not/a-number")]) is None
