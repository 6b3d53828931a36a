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
from collections.abc import Callable, Mapping, Sequence

import pytest

from exactly.acls import ROLES, Grant, apply_flow_grants, flow_grants
from exactly.localenv import secured_pair_environment
from localkafka import LocalCluster
from localkafka.security import USERS
from runtime import load_settings
from tests.backends import KafkaBackend
from tests.kafka_helpers import create_topic


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
    apply_flow_grants(source.bootstrap_servers, target.bootstrap_servers, grants)
    return {
        role: {**env, **secured_pair_environment(source_cluster, target_cluster, role)}
        for role in ROLES
    }


def secured_topic_flow(
    source: KafkaBackend,
    target: KafkaBackend,
    unique_topic: Callable[[str], str],
    partitions: int,
    **extra: str,
) -> dict[str, dict[str, str]]:
    """Each role's environment (``secured_flow``) of a flow of one new source topic of
    ``partitions``, its name taken from ``unique_topic``, with ``extra`` variables."""
    topic = unique_topic("secured")
    create_topic(source.bootstrap_servers, topic, partitions)
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": topic,
        "REPLICATION_FLOW": unique_topic("flow").replace(".", "-")[-90:],
        "METRICS_PORT": "0",
        **extra,
    }
    groups = [extra["OFFSETSYNC_GROUPS_INCLUDE"]] if "OFFSETSYNC_GROUPS_INCLUDE" in extra else []
    return secured_flow(source, target, env, [topic], groups)


def secrets_of(*clusters: LocalCluster) -> list[str]:
    """What must never be shown: every user's SCRAM password, the broker's key store password,
    and each line of every user's private key's body."""
    secrets = []
    for cluster in clusters:
        credentials = cluster.credentials
        secrets.append(credentials.broker_keystore_password)
        keys = []
        for user in USERS:
            secrets.append(credentials.password(user))
            keys.append(credentials.key_path(user).read_text())
        for pem in keys:
            body = pem.split("PRIVATE KEY-----", 1)[1].split("-----END", 1)[0]
            secrets += [line for line in body.split() if len(line) >= 16]
    return secrets


def assert_no_secret(texts: Mapping[str, str], secrets: Sequence[str]) -> None:
    """None of ``secrets`` in any of ``texts`` (what each text is: its name)."""
    passwords = len(secrets) - sum(1 for secret in secrets if len(secret) == 64)
    assert passwords >= len(USERS)  # every password is looked for,
    assert len(secrets) - passwords >= len(USERS)  # and a line of every key's body
    leaks = [name for name, text in texts.items() for secret in secrets if secret in text]
    assert leaks == [], f"secrets shown in: {sorted(set(leaks))}"
