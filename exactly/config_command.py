"""`exactly config`: the effective configuration, as every role would load it, secrets masked."""

from __future__ import annotations

import os
import sys

import click

from runtime import ConfigError, load_settings, render_config

CONFIG_ERROR_EXIT_STATUS = 2


@click.command()
def config() -> None:
    """Print the effective configuration from the environment, secrets masked."""
    try:
        settings = load_settings(os.environ)
    except ConfigError as exc:
        # One line naming the variable, exit 2, no traceback (docs/design.md §7).
        click.echo(f"exactly: configuration error: {exc}", err=True)
        sys.exit(CONFIG_ERROR_EXIT_STATUS)
    click.echo(render_config(settings).rstrip("\n"))
