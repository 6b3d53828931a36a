"""A flow between the session's secured listeners: the source over SASL_SSL (SCRAM-SHA-512),
the target over mutual TLS, each role as its own principal with only the ACLs exactly/acls.py
lists for it.

    envs = secured_flow(source_cluster, target_cluster, env, topics, groups)
    roles.start("replicator", envs["replicator"])

The password reaches a role through a ``_FILE`` variable, as a secret should; the tests read
the files to look for the passwords where they must not be.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from exactly.acls import ROLES, SOURCE, TARGET, Grant, flow_grants
from localkafka import LocalCluster
from localkafka.security import USERS
from runtime import load_settings
from tests.backends import KafkaBackend

SOURCE_PROTOCOL = "SASL_SSL"
TARGET_PROTOCOL = "SSL"
_PREFIXES = {SOURCE: "KAFKA_CLUSTERS_SOURCE", TARGET: "KAFKA_CLUSTERS_DESTINATION"}


def secured_clusters(*backends: KafkaBackend) -> list[LocalCluster]:
    clusters = [backend.secured for backend in backends]
    if any(cluster is None for cluster in clusters):
        pytest.skip("secured listeners need the localkafka backend")
    return [cluster for cluster in clusters if cluster is not None]


def secured_flow(
    source: KafkaBackend,
    target: KafkaBackend,
    env: Mapping[str, str],
    source_topics: Sequence[str],
    groups: Sequence[str] = (),
    *,
    leave_out: tuple[Grant, str] | None = None,
) -> dict[str, dict[str, str]]:
    """Grant each role its ACLs (all but ``leave_out``: one grant's one operation) and return
    each role's environment: ``env`` with both clusters reached through their secured
    listeners as that role."""
    source_cluster, target_cluster = secured_clusters(source, target)
    grants = flow_grants(load_settings(dict(env)), source_topics, groups)
    if leave_out is not None:
        taken, operation = leave_out
        grants = [
            dataclasses.replace(g, operations=tuple(o for o in g.operations if o != operation))
            if g == taken
            else g
            for g in grants
        ]
    for cluster, backend in ((SOURCE, source), (TARGET, target)):
        grant_acls(backend.bootstrap_servers, [g for g in grants if g.cluster == cluster])
    return {
        role: {
            **env,
            **cluster_environment(SOURCE, source_cluster, SOURCE_PROTOCOL, role),
            **cluster_environment(TARGET, target_cluster, TARGET_PROTOCOL, role),
        }
        for role in ROLES
    }


def cluster_environment(
    side: str, cluster: LocalCluster, protocol: str, user: str
) -> dict[str, str]:
    """The variables that reach ``cluster`` through its ``protocol`` listener as ``user``."""
    prefix = _PREFIXES[side]
    env = {}
    for name, value in cluster.client_properties(protocol, user).items():
        if name == "bootstrap.servers":
            env[f"{prefix}_BOOTSTRAP_SERVERS"] = value
        elif name == "sasl.password":
            path = cluster.credentials.password_path(user)
            env[f"{prefix}_PROPERTIES_SASL_PASSWORD_FILE"] = str(path)
        else:
            env[f"{prefix}_PROPERTIES_{name.upper().replace('.', '_')}"] = value
    return env


def grant_acls(bootstrap_servers: str, grants: Sequence[Grant]) -> None:
    """Create the ACLs (through the PLAINTEXT listener, a super-user's) and wait until the
    broker enforces them: it learns them from the metadata log a moment after the controller."""
    bindings = [
        AclBinding(
            ResourceType[grant.resource],
            grant.name,
            ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
            f"User:{grant.role}",
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
        future.result(timeout=30)
    wanted = {_key(b) for b in bindings}
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deadline = time.monotonic() + 30
    while True:
        present = {_key(b) for b in admin.describe_acls(everything).result(timeout=30)}
        if wanted <= present:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(wanted - present)} ACLs not visible on the broker in 30 s")
        time.sleep(0.1)


def _key(binding: AclBinding) -> tuple[object, ...]:
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.operation,
    )


def secrets_of(*clusters: LocalCluster) -> list[str]:
    """What must never be shown: every user's SCRAM password, and each line of every private
    key's body (the users' and the broker's)."""
    secrets = []
    for cluster in clusters:
        credentials = cluster.credentials
        keys = [credentials.broker_keystore_path.read_text()]
        for user in USERS:
            secrets.append(credentials.password(user))
            keys.append(credentials.key_path(user).read_text())
        for pem in keys:
            body = pem.split("PRIVATE KEY-----", 1)[1].split("-----END", 1)[0]
            secrets += [line for line in body.split() if len(line) >= 16]
    return secrets


def assert_no_secret(texts: Mapping[str, str], secrets: Sequence[str]) -> None:
    """None of ``secrets`` in any of ``texts`` (what each text is: its name)."""
    assert len(secrets) > len(USERS)  # there is something to look for
    leaks = [name for name, text in texts.items() for secret in secrets if secret in text]
    assert leaks == [], f"secrets shown in: {sorted(set(leaks))}"
