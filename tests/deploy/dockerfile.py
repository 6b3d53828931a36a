"""The Dockerfile read the way `docker build` reads it: stages and their RUN commands, so that
tests run the image's own install steps rather than a copy of them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.replication.processes import REPOSITORY_ROOT

DOCKERFILE = REPOSITORY_ROOT / "Dockerfile"


def stage_instructions(stage: str, path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(instruction, arguments) of ``stage`` (``FROM ... AS stage``), continuation lines
    joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    found: list[tuple[str, str]] = []
    current = None
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "FROM":
            current = words[-1] if len(words) >= 4 and words[-2].upper() == "AS" else None
        elif current == stage:
            found.append((words[0], line.strip()[len(words[0]) :].strip()))
    assert found, f"no stage {stage!r} in {path}"
    return found


def stage_runs(stage: str, path: Path = DOCKERFILE) -> list[str]:
    """The RUN commands of ``stage``."""
    runs = [
        arguments
        for instruction, arguments in stage_instructions(stage, path)
        if instruction == "RUN"
    ]
    assert runs, f"no RUN in stage {stage!r} of {path}"
    return runs


def as_argv(command: str, replacements: dict[str, str]) -> list[str]:
    """One RUN command as an argument list, its image paths replaced by local ones."""
    for image_path, local in replacements.items():
        command = command.replace(image_path, local)
    return shlex.split(command)
