"""The provenance header stage 2 adds to every destination record (DESIGN.md §3): the origin
cluster, partition and offset, for exact offset translation, loop prevention and validation."""

from __future__ import annotations

from dataclasses import dataclass

HEADER_PROVENANCE = "exactly.origin"


@dataclass(frozen=True, slots=True)
class Provenance:
    source_cluster_id: str
    partition: int
    offset: int


def encode_provenance(source_cluster_id: str, partition: int, offset: int) -> bytes:
    return f"{source_cluster_id}/{partition}/{offset}".encode()


def decode_provenance(value: bytes) -> Provenance:
    """Raises ValueError for a value that is not `<cluster id>/<partition>/<offset>`."""
    cluster_id, partition, offset = value.decode().rsplit("/", 2)
    if not cluster_id:
        raise ValueError(f"provenance without a cluster id: {value!r}")
    return Provenance(cluster_id, int(partition), int(offset))
