"""docs/configuration.md documents every environment variable the settings read (docs/design.md
§7) in a table generated from the settings' own fields, and the README and docs/ name no variable
under the product's prefixes that they do not."""

from __future__ import annotations

import re
from pathlib import Path

from runtime import load_settings, render_config
from runtime.settings import DESTINATION_PREFIX, SOURCE_PREFIX
from runtime.settings_docs import REGENERATE, reference_table, split_page

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
# A whole variable name under one of the product's prefixes (runtime.settings.PREFIXES); a
# prefix or a pattern written as `REPLICATION_TOPICS_RENAME_*` or `..._PROPERTIES_<PROPERTY>` is
# not one (it ends in an underscore). KAFKA_EXACTLY_TEST_... does not start at a word boundary.
VARIABLE = re.compile(r"\b(?:KAFKA_CLUSTERS|REPLICATION|OFFSETSYNC|EXACTLY)_[A-Z0-9_]*[A-Z0-9]\b")
# librdkafka properties per cluster: checked against librdkafka by the settings, any name.
PROPERTY_PREFIXES = (f"{SOURCE_PREFIX}_PROPERTIES_", f"{DESTINATION_PREFIX}_PROPERTIES_")


def setting_names() -> list[str]:
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "a:1",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "b:1",
        }
    )
    return [line.split("=", 1)[0] for line in render_config(settings).splitlines() if line]


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_variable_is_documented_in_the_configuration_page():
    names = setting_names()
    assert len(names) >= 12
    page = CONFIGURATION.read_text()
    undocumented = [name for name in names if f"`{name}`" not in page]
    assert undocumented == []


def test_the_configuration_table_is_the_one_the_settings_generate():
    _, generated, _ = split_page(CONFIGURATION.read_text())
    assert generated == reference_table(), (
        "docs/configuration.md's table is not the one generated from the settings' fields "
        f"(runtime/settings.py): regenerate it with `{REGENERATE}`"
    )


def test_the_table_names_each_field_variable_once_with_its_default():
    rows = reference_table().splitlines()[2:]
    names = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert len(names) == len(set(names))
    assert "| `REPLICATION_FLOW` | `default` | Names the flow;" in reference_table()
    assert "| `REPLICATION_PROVENANCE_HEADER` | `true` |" in reference_table()
    assert "| `KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS` | required |" in reference_table()


def test_every_variable_the_readme_and_docs_name_is_one_the_settings_read():
    known = set(setting_names())
    named = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in documents()
        for name in sorted(set(VARIABLE.findall(path.read_text())))
        if name not in known and not name.startswith(PROPERTY_PREFIXES)
    ]
    assert len(documents()) > 10  # the README and the pages were found
    assert named == []


def test_the_variable_pattern_reads_names_not_prefixes_or_patterns():
    text = (
        "`REPLICATION_FLOW`, `KAFKA_CLUSTERS_`, `REPLICATION_TOPICS_RENAME_*`, "
        "`KAFKA_CLUSTERS_SOURCE_PROPERTIES_<PROPERTY>`, `KAFKA_EXACTLY_TEST_BACKEND`, "
        "EXACTLY_LOG_LEVEL=INFO"
    )
    assert VARIABLE.findall(text) == ["REPLICATION_FLOW", "EXACTLY_LOG_LEVEL"]
