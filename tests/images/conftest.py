"""The image tests' session: one Docker engine (tests/images/engine.py) and the product's two
images built once from the repository's Dockerfile, beside the suite's localkafka clusters
(every container here runs on the host network and reaches them on loopback)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.images.engine import Engine, EngineUnavailableError, docker_engine
from tests.images.images import (
    ROLES_IMAGE,
    VALIDATOR_IMAGE,
    build_product_image,
    ensure_base_image,
)
from tests.replication.processes import REPOSITORY_ROOT

_notes: list[str] = []


def note(line: str) -> None:
    """A measurement for the session's summary (image sizes, build and stop times)."""
    _notes.append(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _notes:
        terminalreporter.section("images")
        for line in _notes:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    try:
        with docker_engine() as started:
            yield started
    except EngineUnavailableError as exc:
        # `make test-images` installs and starts what it needs: an engine missing there is a
        # failure to see, never a skip.
        pytest.fail(f"no Docker engine: {exc}")


def _context_copy(destination: Path) -> Path:
    """The build context a user has after editing one source file: every file of the checkout
    git tracks or would track, one comment appended to a module."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        origin = REPOSITORY_ROOT / name
        if origin.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(origin.read_bytes())
            target.chmod(origin.stat().st_mode)
    edited = destination / "runtime" / "__init__.py"
    edited.write_text(edited.read_text() + "# a source edit\n")
    return destination


@pytest.fixture(scope="session")
def roles_image(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> str:
    ensure_base_image(engine)
    # Cold: nothing of an earlier build cached (the base image stays: it stands for a pull).
    engine.docker("builder", "prune", "--all", "--force", timeout=600)
    engine.docker("image", "rm", "--force", ROLES_IMAGE, check=False)
    cold = build_product_image(engine, REPOSITORY_ROOT, "exactly", ROLES_IMAGE)
    size = engine.image_size_mb(ROLES_IMAGE)
    # A source edit: the dependencies' layers come from the cache, only the package is new.
    context = _context_copy(tmp_path_factory.mktemp("edited-context"))
    edited = build_product_image(engine, context, "exactly", "kafka-exactly:edited")
    note(
        f"roles' image {ROLES_IMAGE}: {size:.0f} MB; built cold in {cold.seconds:.0f} s, "
        f"after a source edit in {edited.seconds:.0f} s"
    )
    cached = " ".join(edited.cached_steps())
    assert "pip install" in cached, edited.log[-4000:]
    engine.docker("image", "rm", "kafka-exactly:edited")
    return ROLES_IMAGE


@pytest.fixture(scope="session")
def validator_image(engine: Engine, roles_image: str) -> str:
    """Built after the roles' image: the stages the two share come from its cache, the rest
    (Java, pyspark, the connector's jars, the merge plan's jar) is built here."""
    engine.docker("image", "rm", "--force", VALIDATOR_IMAGE, check=False)
    built = build_product_image(engine, REPOSITORY_ROOT, "exactly-validator", VALIDATOR_IMAGE)
    size = engine.image_size_mb(VALIDATOR_IMAGE)
    note(
        f"validator's image {VALIDATOR_IMAGE}: {size:.0f} MB; built in {built.seconds:.0f} s "
        "after the roles' image"
    )
    return VALIDATOR_IMAGE
