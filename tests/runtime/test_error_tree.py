"""One root: every error class of ours derives from ExactlyError, and runtime/errors.py draws the
whole tree as it is (a class added, moved or renamed without the drawing fails here)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import runtime.errors
from runtime.errors import ExactlyError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("envelope", "runtime", "localkafka", "replicator", "deduplicator", "offsetsync")
PACKAGES += ("validator", "exactly", "bench")
# The modules that define error classes outside an errors.py.
MODULES_WITH_ERRORS = ("runtime.http", "exactly.supervise", "exactly.harness.failover")
_DRAWN = re.compile(r"^(?P<indent>[│ ├└─]*?)(?:[├└]── )?(?P<name>[A-Z]\w+(?:Error|Exception))\b")


def _drawn_tree() -> dict[str, str | None]:
    """Class name -> drawn parent, from the tree in runtime/errors.py's docstring."""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in (runtime.errors.__doc__ or "").splitlines():
        match = _DRAWN.match(line)
        if match is None:
            continue
        depth = len(match.group("indent")) // 4 + (0 if line.startswith(match["name"]) else 1)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match["name"]] = stack[-1][1] if stack else None
        stack.append((depth, match["name"]))
    return parents


def _real_tree() -> dict[str, str | None]:
    for path in sorted(ROOT.glob("*/errors.py")) + sorted(ROOT.glob("*/*/errors.py")):
        importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    for module in MODULES_WITH_ERRORS:
        importlib.import_module(module)
    parents: dict[str, str | None] = {"ExactlyError": None}
    pending = [ExactlyError]
    while pending:
        parent = pending.pop()
        for child in parent.__subclasses__():
            if child.__module__.startswith("tests"):
                continue
            parents[child.__name__] = parent.__name__
            pending.append(child)
    return parents


def test_the_drawing_is_the_tree():
    assert _drawn_tree() == _real_tree()


def test_no_other_root():
    """No error class of ours derives from Exception except ExactlyError (a BaseException such
    as the demo's SIGTERM signal is control flow, not an error)."""
    roots = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(base, ast.Name) and base.id == "Exception" for base in node.bases
                ):
                    roots.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert roots == ["runtime/errors.py:ExactlyError"]
