"""Record values for the benches that do not flatter whoever compresses: a different value for
every record, about as compressible as real event data.

The data is a realistic JSON mix: order and click events with ids, user names, product codes,
amounts, timestamps, free-text notes from a small vocabulary, and a 32-hex-digit trace id (the
part no compressor shrinks). A pool of such lines is made once; record ``i``'s value is its
number followed by a slice of the pool at a position spread over the pool by a hash, so
no two values are equal and neighbouring records (one batch, one compression window) never
repeat each other's bytes. `compression_ratios` says how compressible the values are, measured
the same way for every run: zlib level 1 over a sample batch (lz4 and zstd land near it on such
text; Kafka's on-disk size of the topic is reported beside it where a bench can read it).
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterator

_POOL_BYTES = 16 * 1024 * 1024
# Knuth's multiplicative hash: consecutive records start at unrelated places in the pool, far
# beyond any compression window from each other.
_SPREAD = 2_654_435_761
# fmt: off
_WORDS = (
    "delivered", "shipped", "pending", "refund", "express", "standard", "gift", "wrapped",
    "returned", "cancelled", "customer", "warehouse", "north", "south", "east", "west",
    "priority", "backorder", "partial", "coupon", "loyalty", "member", "guest", "mobile",
    "web", "store", "checkout", "cart", "viewed", "added", "removed", "payment", "card",
    "wallet", "invoice", "address", "berlin", "paris", "madrid", "lisbon", "dublin", "warsaw",
    "vienna", "prague", "oslo", "helsinki",
)
# fmt: on
_EVENTS = ("order_created", "order_paid", "item_viewed", "cart_updated", "order_shipped")
_CURRENCIES = ("EUR", "USD", "GBP", "PLN", "SEK")


def _event(rng: random.Random) -> bytes:
    event = {
        "event": rng.choice(_EVENTS),
        "ts": 1_790_000_000_000 + rng.randrange(10**9),
        "user": f"user-{rng.randrange(10**6):06d}",
        "session": f"{rng.getrandbits(128):032x}",
        "sku": f"SKU-{rng.randrange(10**5):05d}-{rng.choice('ABCDEFGH')}",
        "qty": rng.randrange(1, 9),
        "amount": round(rng.uniform(1, 500), 2),
        "currency": rng.choice(_CURRENCIES),
        "note": " ".join(rng.choices(_WORDS, k=rng.randrange(2, 12))),
    }
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


class Payloads:
    """``value(i)``: record i's value, ``size`` bytes, unlike every other record's."""

    def __init__(self, size: int, seed: int = 20261124) -> None:
        rng = random.Random(seed)
        lines: list[bytes] = []
        length = 0
        while length < _POOL_BYTES:
            lines.append(_event(rng))
            length += len(lines[-1])
        self._pool = b"".join(lines)
        self.size = size
        self._span = len(self._pool) - size

    def value(self, i: int) -> bytes:
        prefix = b"%d:" % i
        start = (i * _SPREAD) % self._span
        return prefix + self._pool[start : start + self.size - len(prefix)]

    def values(self, start: int = 0) -> Iterator[bytes]:
        i = start
        while True:
            yield self.value(i)
            i += 1


def compression_ratio(size: int, records: int = 2000) -> float:
    """Raw bytes over zlib-1-compressed bytes of ``records`` consecutive values (one batch)."""
    payloads = Payloads(size)
    raw = b"".join(payloads.value(i) for i in range(records))
    return len(raw) / len(zlib.compress(raw, 1))
