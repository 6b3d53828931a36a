"""Entry point of the `exactly` command."""

from __future__ import annotations

import importlib
import sys

import click

from exactly.acls_command import acls
from exactly.config_command import config
from validator.command import validate

# The kit's commands, by the module that defines each: imported only when named (or listed by
# --help), so that what the image runs (`exactly run`, a role) never loads localkafka or the
# demo kit (tests/cli/test_product_imports.py).
_KIT_COMMANDS = {
    "kafka": "exactly.kafka_command",
    "demo": "exactly.demo_command",
    "chaos": "exactly.chaos_command",
}


class _Commands(click.Group):
    """The group with the kit's commands loaded on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_KIT_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _KIT_COMMANDS and cmd_name not in self.commands:
            module = importlib.import_module(_KIT_COMMANDS[cmd_name])
            self.add_command(getattr(module, cmd_name))
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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


cli.add_command(acls)
cli.add_command(config)
cli.add_command(validate)


def main() -> None:
    cli(prog_name="exactly")
