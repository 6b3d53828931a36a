"""`exactly acls`: the ACLs each role of the flow in the environment needs, as a table or as
the `kafka-acls.sh` commands that grant them (runtime/grants.py says why each)."""

from __future__ import annotations

import os
import shlex
import sys

import click
from confluent_kafka import KafkaException

from exactly.acls import Grant, flow_grants
from runtime import ConfigError, Settings, admin_client, kafka_error_of, load_settings
from runtime.grants import ROLES, SOURCE, TARGET
from runtime.settings import DESTINATION_PREFIX, SOURCE_PREFIX
from runtime.topics import admin_result

CONFIG_ERROR_EXIT_STATUS = 2
_CLUSTER_VARIABLES = {SOURCE: SOURCE_PREFIX, TARGET: DESTINATION_PREFIX}


@click.command()
@click.option(
    "--topic",
    "topics",
    multiple=True,
    help="A source topic the flow copies (repeatable); default: those on the source that "
    "REPLICATION_TOPICS_INCLUDE selects now.",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    help="A consumer group offset sync moves (repeatable); default: those on the source that "
    "OFFSETSYNC_GROUPS_INCLUDE selects now.",
)
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="ROLE=PRINCIPAL",
    help="The principal of a role (replicator, deduplicator, offsetsync, validator); default "
    "User:<role>.",
)
@click.option("--commands", is_flag=True, help="Print kafka-acls.sh commands instead of a table.")
def acls(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    principals: tuple[str, ...],
    commands: bool,
) -> None:
    """The least each role needs granted on each cluster, for the flow in the environment."""
    try:
        settings = load_settings(os.environ)
        chosen = dict(_principal(text) for text in principals)
    except ConfigError as exc:
        click.echo(f"exactly: configuration error: {exc}", err=True)
        sys.exit(CONFIG_ERROR_EXIT_STATUS)
    try:
        grants = flow_grants(
            settings,
            list(topics) or _source_topics(settings),
            list(groups) or _source_groups(settings),
        )
    except ConfigError as exc:  # two topics copied to one: stage 1 would stop
        click.echo(f"exactly: configuration error: {exc}", err=True)
        sys.exit(CONFIG_ERROR_EXIT_STATUS)
    except KafkaException as exc:
        click.echo(
            f"exactly acls: cannot list the source's topics and groups "
            f"({kafka_error_of(exc).str()}); name them with --topic and --group",
            err=True,
        )
        sys.exit(1)
    for grant in grants:
        principal = chosen.get(grant.role, f"User:{grant.role}")
        click.echo(_command(grant, principal) if commands else _row(grant, principal))


def _principal(text: str) -> tuple[str, str]:
    role, separator, principal = text.partition("=")
    if not separator or not principal:
        raise ConfigError("--principal", "expected ROLE=PRINCIPAL (replicator=User:repl)", text)
    if role not in ROLES:
        raise ConfigError("--principal", f"no role {role!r} (one of {', '.join(ROLES)})", text)
    return role, principal


def _source_topics(settings: Settings) -> list[str]:
    # Every topic: flow_grants keeps those the flow copies.
    return sorted(admin_client(settings.source).list_topics(timeout=30).topics)


def _source_groups(settings: Settings) -> list[str]:
    if not settings.groups_include:
        return []
    # admin_result: an answer that never comes is a KafkaException (_TIMED_OUT) like the others,
    # not concurrent.futures.TimeoutError's traceback.
    listing = admin_result(admin_client(settings.source).list_consumer_groups(), 30)
    return sorted(g.group_id for g in listing.valid if settings.syncs_group(g.group_id))


def _row(grant: Grant, principal: str) -> str:
    pattern = "prefixed" if grant.prefixed else "literal"
    operations = ",".join(grant.operations)
    return (
        f"{grant.cluster:6}  {principal:20}  {grant.resource:16}  {pattern:8}  "
        f"{grant.name}  {operations}  # {grant.why}"
    )


def _command(grant: Grant, principal: str) -> str:
    """One kafka-acls.sh command; BOOTSTRAP and its --command-config are the operator's."""
    resource = {
        "TOPIC": "--topic",
        "GROUP": "--group",
        "TRANSACTIONAL_ID": "--transactional-id",
    }[grant.resource]
    operations = " ".join(f"--operation {op.title().replace('_', '')}" for op in grant.operations)
    pattern = " --resource-pattern-type prefixed" if grant.prefixed else ""
    bootstrap = f"${_CLUSTER_VARIABLES[grant.cluster]}_BOOTSTRAP_SERVERS"
    return (
        f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal "
        f"{shlex.quote(principal)} {operations} {resource} {shlex.quote(grant.name)}{pattern}"
    )
