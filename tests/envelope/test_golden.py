"""Format v1 is frozen: golden_v1.bin decodes to GOLDEN, and GOLDEN encodes to exactly those bytes.

If this test fails, the wire format changed: that needs a new FORMAT_VERSION (and a reader of
v1 kept for the envelopes already in staging topics), never an edit of golden_v1.bin.

golden_v1.bin was written once, from the repository root, by running this file:
`PYTHONPATH=. python tests/envelope/test_golden.py`.
The tests only compare; they never write it.
"""

from pathlib import Path

from envelope import Envelope, SourceRecord, decode, encode

GOLDEN_PATH = Path(__file__).with_name("golden_v1.bin")

GOLDEN = Envelope(
    source_cluster_id="lkc-Zx9_3fQ2S0a4gH1bTn6wYA",
    topic="orders.eu-ü",
    topic_id=bytes.fromhex("3f2a9c0e5b7d4e1f8a6c2b9d0e4f7a13"),
    partition=7,
    prev_offset=1_234_566,
    records=(
        SourceRecord(
            offset=1_234_567,
            timestamp=1_700_000_000_123,
            timestamp_type=1,
            key=b"customer-42",
            value=b'{"total": 12.5}',
            headers=(("trace-id", b"\x00\x01\xfe\xff"), ("trace-id", None), ("", b"")),
        ),
        SourceRecord(
            offset=1_234_568,
            timestamp=1_700_000_000_456,
            timestamp_type=2,
            key=None,
            value=None,
            headers=(),
        ),
        SourceRecord(
            offset=2**63 - 1,
            timestamp=-1,
            timestamp_type=0,
            key=b"",
            value=b"",
            headers=(("ключ", b"v"),),
        ),
    ),
)


def test_golden_bytes_decode_to_the_golden_envelope() -> None:
    assert decode(GOLDEN_PATH.read_bytes()) == GOLDEN


def test_golden_envelope_encodes_to_the_golden_bytes() -> None:
    assert encode(GOLDEN) == GOLDEN_PATH.read_bytes()


def test_golden_bytes_start_with_a_7_array_and_version_1() -> None:
    assert GOLDEN_PATH.read_bytes()[:2] == b"\x97\x01"


if __name__ == "__main__":
    GOLDEN_PATH.write_bytes(encode(GOLDEN))
    print(f"wrote {GOLDEN_PATH} ({GOLDEN_PATH.stat().st_size} bytes)")
