"""The grants of a flow's roles, expanded from runtime/grants.py's table (which says why each
role needs what), and applied to a cluster as ACLs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from runtime.grants import (
    COPIED,
    DESTINATION_TOPIC,
    GRANTS,
    GROUP_MOVED,
    MOVED,
    ROLES,
    SERIES,
    SOURCE,
    SOURCE_TOPIC,
    TARGET,
    name_of,
)
from runtime.settings import Settings, destination_names

__all__ = [
    "ROLES",
    "SOURCE",
    "TARGET",
    "Grant",
    "allowed_acls",
    "apply_flow_grants",
    "apply_grants",
    "flow_grants",
]

_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Grant:
    """ALLOW ``operations`` on one resource to a role's principal, on one cluster."""

    role: str
    cluster: str  # SOURCE | TARGET
    resource: str  # TOPIC | GROUP | TRANSACTIONAL_ID
    name: str
    operations: tuple[str, ...]
    why: str
    prefixed: bool = False  # the name is a prefix (Kafka's PREFIXED pattern type)


def flow_grants(
    settings: Settings, source_topics: Sequence[str], groups: Sequence[str] = ()
) -> list[Grant]:
    """Every grant the flow's roles need: ``source_topics`` are the topics the flow copies,
    ``groups`` the consumer groups offset sync moves. DestinationCollisionError when two of
    them would be copied to one topic, as stage 1 would stop."""
    copied = destination_names(settings, source_topics).items()
    # The names of a series' kinds, item by item; a row of one name is expanded once.
    items: dict[str | None, list[dict[str, str]]] = {
        COPIED: [{SOURCE_TOPIC: source, DESTINATION_TOPIC: to} for source, to in copied],
        MOVED: [{GROUP_MOVED: group} for group in groups],
        None: [{}],
    }
    grants: list[Grant] = []
    for series, rows in groupby(GRANTS, key=lambda row: SERIES.get(row.kind)):
        run = list(rows)
        for names in items[series]:
            for row in run:
                name = names[row.kind] if series else name_of(row.kind, settings.names)
                grants.extend(
                    Grant(
                        row.role,
                        cluster,
                        row.resource,
                        name,
                        row.operations,
                        row.why,
                        prefixed=row.prefixed,
                    )
                    for cluster in row.clusters
                )
    return grants


def apply_flow_grants(
    source_bootstrap_servers: str, target_bootstrap_servers: str, grants: Sequence[Grant]
) -> None:
    """``apply_grants`` of each cluster's share of ``grants``, through the bootstrap servers
    given for it."""
    for cluster, bootstrap_servers in (
        (SOURCE, source_bootstrap_servers),
        (TARGET, target_bootstrap_servers),
    ):
        apply_grants(bootstrap_servers, [g for g in grants if g.cluster == cluster])


def apply_grants(
    bootstrap_servers: str,
    grants: Sequence[Grant],
    principal: Callable[[str], str] = lambda role: f"User:{role}",
) -> None:
    """Create the grants' ACLs through ``bootstrap_servers`` (an admin's client, PLAINTEXT
    here: configure others with ``kafka-acls.sh``) and wait until the broker enforces them: it
    learns them from the metadata log a moment after the controller commits them."""
    bindings = [
        AclBinding(
            ResourceType[grant.resource],
            grant.name,
            ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
            principal(grant.role),
            "*",
            AclOperation[operation],
            AclPermissionType.ALLOW,
        )
        for grant in grants
        for operation in grant.operations
    ]
    if not bindings:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_acls(bindings).values():
        future.result(timeout=_TIMEOUT_S)
    wanted = {_key(binding) for binding in bindings}
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        present = {_key(b) for b in allowed_acls(admin)}
        if wanted <= present:
            return
        if time.monotonic() > deadline:
            missing = len(wanted - present)
            raise TimeoutError(f"{missing} ACLs not enforced by the broker {_TIMEOUT_S:.0f} s on")
        time.sleep(0.1)


def allowed_acls(admin: AdminClient) -> list[AclBinding]:
    """Every ALLOW binding the broker enforces, as it answers DescribeAcls."""
    every_allow = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ALLOW,
    )
    bindings: list[AclBinding] = admin.describe_acls(every_allow).result(timeout=_TIMEOUT_S)
    return bindings


def _key(binding: AclBinding) -> tuple[object, ...]:
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.operation,
    )
