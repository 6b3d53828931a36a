"""`exactly config`: the effective configuration, as every role would load it, secrets masked;
or the reference table of docs/configuration.md, generated from the settings' fields."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from runtime import ConfigError, load_settings, render_config
from runtime.settings_docs import reference_table, with_reference_table

CONFIG_ERROR_EXIT_STATUS = 2


@click.command()
@click.option(
    "--markdown",
    is_flag=True,
    help="Print the reference table of every variable (docs/configuration.md) instead.",
)
@click.option(
    "--write-docs",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Replace the generated table of this page (docs/configuration.md) with the current one.",
)
def config(markdown: bool, write_docs: Path | None) -> None:
    """Print the effective configuration from the environment, secrets masked."""
    if markdown:
        click.echo(reference_table().rstrip("\n"))
        return
    if write_docs is not None:
        write_docs.write_text(with_reference_table(write_docs.read_text()))
        return
    try:
        settings = load_settings(os.environ)
    except ConfigError as exc:
        # One line naming the variable, exit 2, no traceback (docs/design.md §7).
        click.echo(f"exactly: configuration error: {exc}", err=True)
        sys.exit(CONFIG_ERROR_EXIT_STATUS)
    click.echo(render_config(settings).rstrip("\n"))
