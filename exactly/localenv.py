"""The environment that reaches a local cluster (localkafka) as a role would be given it:
``exactly kafka up`` prints it, the tests and benches of secured flows use it."""

from __future__ import annotations

from localkafka import LocalCluster
from runtime.settings import DESTINATION_PREFIX, SOURCE_PREFIX

__all__ = [
    "DESTINATION_PREFIX",
    "SOURCE_PREFIX",
    "SOURCE_PROTOCOL",
    "TARGET_PROTOCOL",
    "cluster_environment",
    "secured_pair_environment",
]

# How a secured local pair is reached: each cluster secured differently, as in docs/security.md.
SOURCE_PROTOCOL = "SASL_SSL"  # SCRAM-SHA-512
TARGET_PROTOCOL = "SSL"  # mutual TLS


def cluster_environment(
    prefix: str, cluster: LocalCluster, protocol: str | None = None, user: str = ""
) -> dict[str, str]:
    """``<prefix>_BOOTSTRAP_SERVERS`` and the ``<prefix>_PROPERTIES_...`` that reach
    ``cluster``: its PLAINTEXT listener (``protocol`` None), or its ``protocol`` listener
    (SASL_SSL, SSL) as ``user``, the password by its file as a secret should be given."""
    if protocol is None:
        return {f"{prefix}_BOOTSTRAP_SERVERS": cluster.bootstrap_servers}
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


def secured_pair_environment(
    source: LocalCluster, target: LocalCluster, user: str
) -> dict[str, str]:
    """The variables that reach ``source`` over SASL_SSL and ``target`` over mutual TLS as
    ``user``."""
    return cluster_environment(SOURCE_PREFIX, source, SOURCE_PROTOCOL, user) | (
        cluster_environment(DESTINATION_PREFIX, target, TARGET_PROTOCOL, user)
    )
