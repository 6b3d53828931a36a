"""The types of the settings' fields: each parses its variable's text into a value.

Values given in Python (tests, ``Settings(...)``) pass as they are; text from the environment
goes through the parsers of runtime/values.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator

from runtime.values import check_topic_name, parse_bootstrap_servers, parse_pattern, parse_patterns


def from_text(parse: Callable[[str], object]) -> BeforeValidator:
    """Apply ``parse`` to text from the environment; values given in Python pass as they are."""
    return BeforeValidator(lambda value: parse(value) if isinstance(value, str) else value)


def non_empty(value: object) -> object:
    if value == "":
        raise ValueError("is empty")
    return value


Servers = Annotated[tuple[str, ...], from_text(parse_bootstrap_servers)]
TopicName = Annotated[str, AfterValidator(check_topic_name)]
Patterns = Annotated[tuple[re.Pattern[str], ...], from_text(parse_patterns)]
Pattern = Annotated[re.Pattern[str], from_text(parse_pattern)]
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR"], from_text(lambda text: text.strip().upper())
]
LogFormat = Annotated[Literal["text", "json"], from_text(lambda text: text.strip().lower())]
