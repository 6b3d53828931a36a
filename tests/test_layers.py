"""The layout is the architecture: dependencies flow one way, command line -> roles -> envelope,
localkafka -> runtime. A role never imports another role; bench/ and the command line never
reach into tests/ or a package's private names, so editing a test helper breaks no benchmark."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROLES = {"replicator", "deduplicator", "offsetsync", "validator"}
# What each package may import of ours (besides itself).
ALLOWED = {
    "runtime": set(),
    "envelope": {"runtime"},
    "localkafka": {"runtime"},
    **{role: {"runtime", "envelope"} for role in ROLES},
    "exactly": {"runtime", "envelope", "localkafka", *ROLES},
    "bench": {"runtime", "envelope", "localkafka", *ROLES, "exactly"},
}
OURS = {*ALLOWED, "tests"}


def _imports(package: str) -> list[tuple[str, str]]:
    """(file, imported module) for every import of ours in `package`."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in OURS:
                    found.append((str(path.relative_to(ROOT)), name))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_dependencies_flow_one_way(package):
    wrong = [
        (file, name)
        for file, name in _imports(package)
        if name.split(".")[0] not in ALLOWED[package] | {package}
    ]
    assert wrong == []


@pytest.mark.parametrize("package", ["bench", "exactly", *sorted(ROLES)])
def test_no_private_name_of_another_package(package):
    wrong = [
        (file, name)
        for file, name in _imports(package)
        if name.split(".")[0] != package
        and any(part.startswith("_") and part != "__future__" for part in name.split("."))
    ]
    assert wrong == []
