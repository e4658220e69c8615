"""The layer contracts hold (import-linter, [tool.importlinter] in pyproject.toml), a deliberate
upward import breaks them, and the package has no import cycles; no function grows past 60 lines
and no module re-exports names, beyond the shrinking lists in tests/data (tests/contracts.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import contracts
import pytest

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


def test_contracts_script_into_a_closed_pipe_ends_quietly():
    """`python tests/contracts.py | head -0`: as the console script (tests/test_cli_commands.py),
    the check ends with the shell's 141 and no BrokenPipeError traceback when its reader is gone."""
    p = subprocess.Popen(
        [sys.executable, contracts.__file__],
        cwd=contracts.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.mark.parametrize(
    "module, line, contract",
    [
        ("core/kernel.py", "import decodelab.components.ops", "the kernels know nothing"),
        ("core/build.py", "import decodelab.modes.static", "layers"),
        ("modes/static.py", "import decodelab.tracking.store", "layers"),
        ("output/files.py", "import mlflow", "only decodelab.tracking knows MLflow"),
        ("runs/claims.py", "import hydra", "only decodelab.config and the apps know Hydra"),
        ("core/kernel_lookup.py", "import decodelab.opcost.gemm", "the kernel knows nothing of table"),
        ("core/pipeline.py", "import pyarrow", "the kernel knows nothing of table"),
        ("core/metrics.py", "import omegaconf", "core never imports omegaconf or hydra"),
        ("components/placement.py", "import omegaconf", "components know nothing of Hydra"),
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
    from pathlib import Path

    import tomllib

    root = Path(contracts.ROOT)
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for src, name in (("framework", "decodelab"), ("components", "decodelab.components")):
        for init in (root / src).rglob("__init__.py"):
            rel = init.parent.relative_to(root / src).parts
            found.add(".".join((name, *rel)))
    assert found <= listed, sorted(found - listed)


def test_no_function_grows_past_the_limit():
    """tests/data/long_functions.txt: the functions over 60 lines, each at most its listed length;
    the message says which line to add, change or remove."""
    problems = contracts.long_function_problems()
    assert not problems, "\n".join(problems)


def test_no_new_reexport_shims():
    """tests/data/reexports.txt: the names modules import only to pass on; the list only shrinks."""
    problems = contracts.reexport_problems()
    assert not problems, "\n".join(problems)


@pytest.fixture
def tiny_tree(tmp_path, monkeypatch):
    """A repository of two source files and empty lists, in place of the real one."""
    for folder in ("framework", "components"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "framework" / "inner.py").write_text("def helper():\n    return 1\n")
    (tmp_path / "tests" / "data").mkdir(parents=True)
    monkeypatch.setattr(contracts, "ROOT", tmp_path)
    for name, file in (("LONG_FUNCTIONS", "long_functions.txt"), ("REEXPORTS", "reexports.txt")):
        monkeypatch.setattr(contracts, name, tmp_path / "tests" / "data" / file)
        (tmp_path / "tests" / "data" / file).write_text("# header\n")
    return tmp_path


def _function(name: str, lines: int, docstring: bool = True) -> str:
    doc = '    """A docstring\n    of two lines."""\n' if docstring else ""
    return f"def {name}(x):\n{doc}" + "    x += 1\n" * (lines - 2) + "    return x\n"


def test_the_function_ratchet_counts_and_only_shrinks(tiny_tree):
    mod = tiny_tree / "components" / "big.py"
    mod.write_text(_function("f", 61) + "class C:\n" + textwrap.indent(_function("m", 60), "    "))
    lengths = contracts.function_lengths()
    assert lengths["components/big.py::f"] == 61  # def line to last line, docstring not counted
    assert lengths["components/big.py::C.m"] == 60
    assert contracts.long_function_problems() == [
        "components/big.py::f is 61 lines (over 60): split it; a function that cannot be split yet "
        "is listed in tests/data/long_functions.txt with the line\n    components/big.py::f 61"
    ]
    contracts.LONG_FUNCTIONS.write_text("components/big.py::f 61\ncomponents/big.py::gone 70\n")
    assert contracts.long_function_problems() == [
        "components/big.py::gone is gone: remove the line\n    components/big.py::gone 70\n"
        "  from tests/data/long_functions.txt"
    ]
    mod.write_text(_function("f", 62))
    contracts.LONG_FUNCTIONS.write_text("components/big.py::f 61\n")
    assert "grew to 62 lines, listed at 61" in contracts.long_function_problems()[0]
    mod.write_text(_function("f", 60, docstring=False))
    assert contracts.long_function_problems() == [
        "components/big.py::f is 60 lines now: remove the line\n    components/big.py::f 61\n"
        "  from tests/data/long_functions.txt"
    ]


def test_the_reexport_ratchet_finds_shims_not_side_effect_imports(tiny_tree):
    (tiny_tree / "framework" / "shim.py").write_text(
        "from decodelab import inner  # a module: a side-effect import, not a re-export\n"
        "from decodelab.inner import helper\n"
        "from decodelab.errors import ConfigError, Infeasible\n"
        "from .inner import *\n"
        "__all__ = ['Infeasible']\n"
        "def f():\n    raise Infeasible(ConfigError)\n"
    )
    (tiny_tree / "framework" / "__init__.py").write_text("from decodelab.inner import helper\n")
    assert contracts.reexports() == {
        "framework/shim.py::helper": "from decodelab.inner",
        "framework/shim.py::Infeasible": "from decodelab.errors",
        "framework/shim.py::*": "from decodelab.inner",
    }
    problems = contracts.reexport_problems()
    assert len(problems) == 3
    assert problems[2].startswith("framework/shim.py::helper (from decodelab.inner) is imported only")
    assert problems[2].endswith("with the line\n    framework/shim.py::helper")
    contracts.REEXPORTS.write_text(
        "framework/shim.py::helper\nframework/shim.py::Infeasible\nframework/shim.py::*\nframework/shim.py::old\n"
    )
    assert contracts.reexport_problems() == [
        "framework/shim.py::old is no longer re-exported: remove the line\n    framework/shim.py::old\n"
        "  from tests/data/reexports.txt"
    ]
