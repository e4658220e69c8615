"""Check the import contracts of pyproject.toml ([tool.importlinter]) with import-linter.

The `decodelab` package is assembled from two source folders (framework/ and components/ as
decodelab.components, see [tool.setuptools] package-dir), which import-linter cannot follow in a
checkout: it scans one folder per package. So the package is first staged as it installs, into a
temporary directory, and checked there. `python tests/contracts.py` exits non-zero when a
contract is broken (run by .ci/run and tests/test_architecture.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        stage(Path(d))
        p = check(Path(d))
        sys.stdout.write(p.stdout[-6000:])
        sys.stderr.write(p.stderr[-3000:])
        return p.returncode


if __name__ == "__main__":
    sys.exit(main())
