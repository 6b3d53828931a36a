"""The provenance header stage 2 adds to every destination record (docs/design.md §3): the origin
cluster, partition and offset, for exact offset translation, loop prevention and validation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HEADER_PROVENANCE = "exactly.origin"


@dataclass(frozen=True, slots=True)
class Provenance:
    source_cluster_id: str
    partition: int
    offset: int


def encode_provenance(source_cluster_id: str, partition: int, offset: int) -> bytes:
    return provenance_prefix(source_cluster_id, partition) + b"%d" % offset


def provenance_prefix(source_cluster_id: str, partition: int) -> bytes:
    """What every provenance value of one source partition starts with; the offset follows it
    (stage 2 makes the prefix once per envelope, not once per record)."""
    return f"{source_cluster_id}/{partition}/".encode()


def carries_provenance(headers: Iterable[tuple[str, bytes | None]] | None) -> bool:
    """Whether a record is a copy a stage 2 wrote: a provenance header with a value, well-formed
    or not. The one rule of loop prevention: stage 1 never copies such a record again, and
    `exactly validate` counts it as looped (docs/topologies.md)."""
    return any(name == HEADER_PROVENANCE and value is not None for name, value in headers or ())


def find_provenance(headers: Iterable[tuple[str, bytes | None]] | None) -> Provenance | None:
    """The provenance a record's header list carries: the last header of that name with a
    value (stage 2 appends its own after the record's headers, so on a record that was already
    a copy the last one names this hop), decoded; None when there is none or it is not well
    formed."""
    values = [value for name, value in headers or () if name == HEADER_PROVENANCE and value]
    if not values:
        return None
    try:
        return decode_provenance(values[-1])
    except (ValueError, UnicodeDecodeError):
        return None


def decode_provenance(value: bytes) -> Provenance:
    """Raises ValueError for a value that is not `<cluster id>/<partition>/<offset>`."""
    cluster_id, partition, offset = value.decode().rsplit("/", 2)
    if not cluster_id:
        raise ValueError(f"provenance without a cluster id: {value!r}")
    return Provenance(cluster_id, int(partition), int(offset))
