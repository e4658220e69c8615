"""The layer contracts hold (import-linter, [tool.importlinter] in pyproject.toml), a deliberate
upward import breaks them, and the package has no import cycles."""

from __future__ import annotations

import shutil

import pytest

import contracts

pytest.importorskip("importlinter")


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    root = tmp_path_factory.mktemp("staged")
    contracts.stage(root)
    return root


def test_contracts_hold(staged):
    p = contracts.check(staged)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout


@pytest.mark.parametrize(
    "module, line, contract",
    [
        ("core/kernel.py", "import decodelab.components.ops", "the kernels know nothing"),
        ("core/build.py", "import decodelab.modes.static", "layers"),
        ("modes/static.py", "import decodelab.tracking.store", "layers"),
        ("output/files.py", "import mlflow", "only decodelab.tracking knows MLflow"),
        ("runs/claims.py", "import hydra", "only decodelab.config and the apps know Hydra"),
    ],
)
def test_an_upward_import_breaks_a_contract(tmp_path, staged, module, line, contract):
    root = tmp_path / "bad"
    shutil.copytree(staged, root)
    path = root / "decodelab" / module
    path.write_text(path.read_text() + f"\n{line}  # deliberately upward\n")
    p = contracts.check(root)
    assert p.returncode != 0, p.stdout[-3000:]
    broken = p.stdout.split("Broken contracts")[-1]
    assert contract in broken, p.stdout[-3000:]


def test_no_import_cycles(staged, monkeypatch):
    import grimp

    monkeypatch.syspath_prepend(str(staged))
    for name in [
        m for m in list(__import__("sys").modules) if m == "decodelab" or m.startswith("decodelab.")
    ]:
        monkeypatch.delitem(__import__("sys").modules, name)
    graph = grimp.build_graph("decodelab", cache_dir=None)
    cycles = []
    for m in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(m):
            if imported != m and graph.find_shortest_chain(importer=imported, imported=m):
                cycles.append((m, imported))
    # the package's lazy `decodelab.api` attribute (PEP 562) is the one allowed loop
    cycles = [c for c in cycles if "decodelab" not in c]
    assert not cycles, cycles[:10]


def test_every_source_package_is_in_the_wheel():
    """pyproject.toml lists the packages explicitly (package-dir mapping): a new subpackage that is
    not listed would be missing from `pip install .` and the wheel."""
    import tomllib
    from pathlib import Path

    root = Path(contracts.ROOT)
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for src, name in (("framework", "decodelab"), ("components", "decodelab.components")):
        for init in (root / src).rglob("__init__.py"):
            rel = init.parent.relative_to(root / src).parts
            found.add(".".join((name, *rel)))
    assert found <= listed, sorted(found - listed)
