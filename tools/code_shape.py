"""The shape of the non-test code: long modules, long functions, exception roots, Kafka errors
unpacked by hand, flow-derived names built in place (issue 15's before/after, issue 33's bounds).

    python tools/code_shape.py [--tests] [--max-function N] [--max-module N]

It reports and always exits 0: the bounds are where to look, not a gate (a table, such as a
metrics registry or a properties file, may be longer than a function should be)."""

from __future__ import annotations

import argparse
import ast
import re
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
    "tools",
)
ROOT = Path(__file__).resolve().parent.parent
# Issue 33's bounds: a module of at most 400 lines, a function of at most 60.
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# e.g. an f-string "exactly." or "__exactly." + the flow, or the staging name + ".meta"
NAME_PATTERN = re.compile(r"""f["'](__)?exactly\.\{[^}]*flow|staging_topic_name\}\.""")
UNPACK = "args" + "[0]"  # spelled apart so this file does not count itself


def sources(include_tests: bool) -> list[Path]:
    dirs = [*PACKAGES, "tests"] if include_tests else PACKAGES
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="Read tests/ too.")
    parser.add_argument("--max-function", type=int, default=MAX_FUNCTION_LINES, metavar="N")
    parser.add_argument("--max-module", type=int, default=MAX_MODULE_LINES, metavar="N")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    long_modules: list[str] = []
    long_functions: list[str] = []
    roots: list[str] = []
    unpacks: list[str] = []
    names: list[str] = []
    for path in sources(args.tests):
        rel = path.relative_to(ROOT)
        text = path.read_text()
        lines = text.count("\n")
        if lines > args.max_module:
            long_modules.append(f"{rel} ({lines})")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > args.max_function:
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
        (f"modules over {args.max_module} lines", long_modules),
        (f"functions over {args.max_function} lines", long_functions),
        ("exception roots (classes deriving from Exception)", roots),
        ("lines unpacking a Kafka error by hand", unpacks),
        ("lines building a flow-derived name", names),
    ):
        print(f"{title}: {len(found)}")
        for item in found:
            print(f"  {item}")


if __name__ == "__main__":
    main()
