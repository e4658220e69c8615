"""Check the import contracts of pyproject.toml ([tool.importlinter]) with import-linter.

The `decodelab` package is assembled from two source folders (framework/ and components/ as
decodelab.components, see [tool.setuptools] package-dir), which import-linter cannot follow in a
checkout: it scans one folder per package. So the package is first staged as it installs, into a
temporary directory, and checked there. `python tests/contracts.py` exits non-zero when a
contract is broken (run by .ci/run, the pre-commit hook and tests/test_architecture.py).

It also checks two habits of the code with ratchets, lists that may only shrink:

- function size: no function or method under framework/ or components/ is longer than
  MAX_FUNCTION_LINES lines, counted from its `def` line to its last line (comments and blank lines
  included; decorators and the docstring not), unless listed in tests/data/long_functions.txt with
  its length, which it may not exceed; a listed one that shrank to the limit or is gone leaves
  the list. Nested functions count in their parent and on their own (`outer.inner`).
- no re-export shims: outside the public entry points (PUBLIC_MODULES) a module does not import a
  name only to pass it on: a module-level `from m import name` whose name the module never uses,
  a `from m import *`, or an imported name in `__all__`. Importing a module for its side effect
  (`from decodelab.config import schema`) is not a re-export. Today's shims are listed in
  tests/data/reexports.txt; import the name from where it is defined instead.

Each failure prints the exact line to add to or remove from its list."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (("framework", "decodelab"), ("components", "decodelab.components"))
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS = ROOT / "tests" / "data" / "long_functions.txt"
REEXPORTS = ROOT / "tests" / "data" / "reexports.txt"
# the documented public entry points, which exist to gather names: `import decodelab`, the API
PUBLIC_MODULES = ("framework/__init__.py", "framework/api.py")


def stage(dest: Path) -> Path:
    """dest/decodelab: framework/ with components/ as its components subpackage (sources only)."""
    pkg = dest / "decodelab"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "data", "*.md")
    shutil.copytree(ROOT / "framework", pkg, ignore=ignore)
    shutil.copytree(ROOT / "components", pkg / "components", ignore=ignore)
    return pkg


def check(staged_root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(staged_root)}
    return subprocess.run(
        ["lint-imports", "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=staged_root,
        env=env,
        capture_output=True,
        text=True,
    )


def source_files() -> Iterator[Tuple[str, str, ast.Module]]:
    """(path relative to the repository, dotted module name, syntax tree) of every source file."""
    for folder, package in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield path.relative_to(ROOT).as_posix(), ".".join((package, *parts)), ast.parse(path.read_text())


def function_lengths() -> Dict[str, int]:
    """{"path::Class.method": lines} of every function and method (the rule: module docstring)."""
    lengths: Dict[str, int] = {}

    def walk(node: ast.AST, rel: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = child.end_lineno - child.lineno + 1
                if ast.get_docstring(child, clean=False) is not None:
                    doc = child.body[0]
                    n -= doc.end_lineno - doc.lineno + 1
                key = f"{rel}::{prefix}{child.name}"
                lengths[key] = max(n, lengths.get(key, 0))  # a name defined twice: the longer
                walk(child, rel, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, rel, f"{prefix}{child.name}.")
            else:
                walk(child, rel, prefix)

    for rel, _, tree in source_files():
        walk(tree, rel, "")
    return lengths


def read_list(path: Path) -> List[str]:
    """The entries of a ratchet list: one a line, `#` comments and blank lines skipped."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def long_function_problems() -> List[str]:
    lengths = function_lengths()
    listed: Dict[str, int] = {}
    for entry in read_list(LONG_FUNCTIONS):
        name, n = entry.rsplit(None, 1)
        listed[name] = int(n)
    where = LONG_FUNCTIONS.relative_to(ROOT)
    problems = []
    for name, n in sorted(lengths.items()):
        if n <= MAX_FUNCTION_LINES:
            continue
        if name not in listed:
            problems.append(
                f"{name} is {n} lines (over {MAX_FUNCTION_LINES}): split it; a function that "
                f"cannot be split yet is listed in {where} with the line\n    {name} {n}"
            )
        elif n > listed[name]:
            problems.append(
                f"{name} grew to {n} lines, listed at {listed[name]} in {where}: shorten it back "
                f"(the list only shrinks)"
            )
        elif n < listed[name]:
            problems.append(
                f"{name} shrank to {n} lines: in {where} replace the line\n    {name} {listed[name]}"
                f"\n  with\n    {name} {n}"
            )
    for name, n in sorted(listed.items()):
        now = lengths.get(name)
        if now is None or now <= MAX_FUNCTION_LINES:
            why = "is gone" if now is None else f"is {now} lines now"
            problems.append(f"{name} {why}: remove the line\n    {name} {n}\n  from {where}")
    return problems


def _is_module(module: str, name: str) -> bool:
    """`from module import name` binds a module (a side-effect import, not a re-export)."""
    for folder, package in SOURCES[::-1]:
        if module == package or module.startswith(package + "."):
            base = ROOT / folder / Path(*module[len(package) :].lstrip(".").split(".")) / name
            return base.with_suffix(".py").exists() or (base / "__init__.py").exists()
    try:
        return importlib.util.find_spec(f"{module}.{name}") is not None
    except (ImportError, ValueError):
        return False


def _module_statements(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's own statements, including those under a top-level if/try."""
    for stmt in body:
        yield stmt
        for block in ("body", "orelse", "finalbody"):
            if isinstance(stmt, (ast.If, ast.Try)):
                yield from _module_statements(getattr(stmt, block, []))
        for handler in getattr(stmt, "handlers", []):
            yield from _module_statements(handler.body)


def reexports() -> Dict[str, str]:
    """{"path::name": "from module"} of every re-exported name outside PUBLIC_MODULES."""
    found: Dict[str, str] = {}
    for rel, dotted, tree in source_files():
        if rel in PUBLIC_MODULES:
            continue
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        exported = set()
        for stmt in tree.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                if isinstance(stmt.value, (ast.List, ast.Tuple)):
                    exported |= {e.value for e in stmt.value.elts if isinstance(e, ast.Constant)}
        package = dotted if rel.endswith("__init__.py") else dotted.rpartition(".")[0]
        for stmt in _module_statements(tree.body):
            if not isinstance(stmt, ast.ImportFrom) or stmt.module == "__future__":
                continue
            module = stmt.module or ""
            if stmt.level:
                base = package.split(".")[: len(package.split(".")) - stmt.level + 1]
                module = ".".join(base + ([module] if module else []))
            for alias in stmt.names:
                name = alias.asname or alias.name
                if (
                    alias.name == "*"
                    or name in exported
                    or (name not in used and not _is_module(module, alias.name))
                ):
                    found[f"{rel}::{name}"] = f"from {module}"
    return found


def reexport_problems() -> List[str]:
    found = reexports()
    listed = set(read_list(REEXPORTS))
    where = REEXPORTS.relative_to(ROOT)
    problems = [
        f"{name} ({found[name]}) is imported only to be re-exported: import it from where it is "
        f"defined at the call sites instead (a new public entry point goes in "
        f"contracts.PUBLIC_MODULES; a shim that cannot go yet is listed in {where} with the line"
        f"\n    {name}"
        for name in sorted(set(found) - listed)
    ]
    problems += [
        f"{name} is no longer re-exported: remove the line\n    {name}\n  from {where}"
        for name in sorted(listed - set(found))
    ]
    return problems


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        stage(Path(d))
        p = check(Path(d))
        sys.stdout.write(p.stdout[-6000:])
        sys.stderr.write(p.stderr[-3000:])
    problems = long_function_problems() + reexport_problems()
    for problem in problems:
        print(f"ratchet: {problem}")
    print(f"Ratchets (function size, re-exports): {len(problems)} problem(s).")
    return p.returncode or int(bool(problems))


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `python tests/contracts.py | head`: quiet, with the shell's 141, as the CLI
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
    sys.exit(code)
