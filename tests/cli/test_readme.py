"""The README documents every environment variable the settings read (docs/design.md §7)."""

from __future__ import annotations

from pathlib import Path

from runtime import load_settings, render_config

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_variable_is_documented_in_the_readme():
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "a:1",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "b:1",
        }
    )
    names = [line.split("=", 1)[0] for line in render_config(settings).splitlines() if line]
    assert len(names) >= 12
    readme = README.read_text()
    undocumented = [name for name in names if f"`{name}`" not in readme]
    assert undocumented == []
