"""The shape of the non-test code: long modules, long functions, exception roots, Kafka errors
unpacked by hand, flow-derived names built in place (issue 15's before/after)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

PACKAGES = (
    "envelope",
    "runtime",
    "localkafka",
    "replicator",
    "deduplicator",
    "offsetsync",
    "validator",
    "exactly",
    "bench",
)
ROOT = Path(__file__).resolve().parent.parent
# e.g. an f-string "exactly." or "__exactly." + the flow, or the staging name + ".meta"
NAME_PATTERN = re.compile(r"""f["'](__)?exactly\.\{[^}]*flow|staging_topic_name\}\.""")
UNPACK = "args" + "[0]"  # spelled apart so this file does not count itself


def sources(include_tests: bool) -> list[Path]:
    dirs = [*PACKAGES, "tests"] if include_tests else PACKAGES
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def main() -> None:
    include_tests = "--tests" in sys.argv
    long_modules, long_functions, roots, unpacks, names = [], [], [], [], []
    for path in sources(include_tests):
        rel = path.relative_to(ROOT)
        text = path.read_text()
        lines = text.count("\n")
        if lines > 400:
            long_modules.append(f"{rel} ({lines})")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 80:
                    long_functions.append(f"{rel}:{node.lineno} {node.name} ({length})")
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "Exception" for b in node.bases
            ):
                roots.append(f"{rel}:{node.lineno} {node.name}")
        for number, line in enumerate(text.splitlines(), 1):
            if UNPACK in line:
                unpacks.append(f"{rel}:{number}")
            if NAME_PATTERN.search(line):
                names.append(f"{rel}:{number}")
    for title, found in (
        ("modules over 400 lines", long_modules),
        ("functions over 80 lines", long_functions),
        ("exception roots (classes deriving from Exception)", roots),
        ("lines unpacking a Kafka error by hand", unpacks),
        ("lines building a flow-derived name", names),
    ):
        print(f"{title}: {len(found)}")
        for item in found:
            print(f"  {item}")


if __name__ == "__main__":
    main()
