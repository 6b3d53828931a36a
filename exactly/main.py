"""Entry point of the `exactly` command."""

from __future__ import annotations

import sys

import click

from exactly.acls_command import acls
from exactly.chaos_command import chaos
from exactly.config_command import config
from exactly.demo_command import demo
from exactly.kafka_command import kafka
from validator.command import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafka-exactly")
def cli() -> None:
    """kafka-exactly: exactly-once replication of Kafka topics between clusters."""


@cli.command(context_settings={"ignore_unknown_options": True})
def replicator() -> None:
    """Stage 1: source topics into staging envelopes (configured by the environment)."""
    # Imported only when the role runs: `exactly kafka` stays quick.
    from exactly.supervise import run_stage
    from replicator.app import run

    sys.exit(run_stage("replicator", run))


@cli.command(context_settings={"ignore_unknown_options": True})
def deduplicator() -> None:
    """Stage 2: staging envelopes into the original records, exactly once (environment)."""
    from deduplicator.app import run
    from exactly.supervise import run_stage

    sys.exit(run_stage("deduplicator", run))


@cli.command(context_settings={"ignore_unknown_options": True})
def offsetsync() -> None:
    """Consumer-group offsets source -> target, exact by provenance (environment)."""
    from offsetsync.app import run  # imported only when the role runs: `exactly kafka` stays quick

    sys.exit(run())


@cli.command(context_settings={"ignore_unknown_options": True})
def run() -> None:
    """Every role of one flow, supervised, in one process: restarted when one dies (environment)."""
    from exactly.supervise import run as run_supervised

    sys.exit(run_supervised())


cli.add_command(kafka)
cli.add_command(acls)
cli.add_command(config)
cli.add_command(demo)
cli.add_command(chaos)
cli.add_command(validate)


def main() -> None:
    cli(prog_name="exactly")
