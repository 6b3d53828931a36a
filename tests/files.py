"""Files changed the way the tests' subjects meet them changed."""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """As a mounted Kubernetes Secret changes: the new file whole, in one rename, never a
    half-written one under ``path``."""
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)
