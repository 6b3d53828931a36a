"""Fixtures of the runtime tests."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator

import pytest

from runtime import configure_logging


@pytest.fixture
def configure() -> Iterator[Callable[..., io.StringIO]]:
    """configure_logging into a StringIO; the root logger is put back as it was afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def configure(level: str = "INFO", *, json: bool = False) -> io.StringIO:
        stream = io.StringIO()
        configure_logging(level, "replicator", json=json, stream=stream)
        return stream

    yield configure
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
