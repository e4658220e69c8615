"""The subcommands as a table: help for each, claims what-ifs, the Numba cache; the CLI's own
behaviour (--version, --help lists the commands, did-you-mean)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    ROOT,  # noqa: F401
    all_runs,
    decodelab,
)
from decodelab.core import kernel as K  # noqa: F401

# MLflow's SQLAlchemy store, read back in this process, warns about its own ORM usage.
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")


def test_every_subcommand_has_help(tmp_path):
    from decodelab.apps.cli import COMMANDS

    for name in COMMANDS:
        res = decodelab(tmp_path, name, "--help")
        assert res.rc == 0 and f"decodelab {name}" in res.out, (name, res.explain())
        assert "Traceback" not in res.text


@pytest.mark.slow
def test_help_lists_every_subcommand_and_the_groups(tmp_path):
    from decodelab.apps.cli import COMMANDS

    res = decodelab(tmp_path, "--help")
    assert res.rc == 0, res.explain()
    listed = re.findall(r"^  ([a-z-]+)  ", res.out, flags=re.M)
    assert listed[: len(COMMANDS)] == list(COMMANDS)
    assert "== Config ==" in res.out or "model:" in res.out  # Hydra's groups follow


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`decodelab --help | head -0`: the reader closes the pipe before the command writes (its
    ~20 KB of help would fit a pipe's buffer: reading a line first would race), every write fails
    (EPIPE) and it exits 141, as a shell tool killed by SIGPIPE, with no traceback."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("HYDRA_FULL_ERROR", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "decodelab.apps.cli", "--help"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # no reader left: the command's first write meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_version_is_the_package_version(tmp_path):
    from importlib.metadata import version

    res = decodelab(tmp_path, "--version")
    assert res.rc == 0 and res.out.strip() == f"decodelab {version('decodelab')}", res.explain()


@pytest.mark.parametrize(
    "word, near", [("compre", "compare"), ("claim", "claims"), ("valdate", "validate"), ("zzzz", None)]
)
def test_unknown_subcommand_is_one_line_with_a_suggestion(tmp_path, word, near):
    res = decodelab(tmp_path, word)
    assert res.rc == 2 and res.out == "", res.explain()
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: unknown command '{word}'"), res.explain()
    assert (f"did you mean '{near}'" in lines[0]) if near else "did you mean" not in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "-j", "-3", "workload.batch_size=1"],
        ["sweep", "--children", "best", "workload.batch_size=1"],
        ["sweep", "--backend", "spark", "workload.batch_size=1"],
        ["sweep", "--address", "tcp://x:1", "workload.batch_size=1", "tracking=off"],
        ["search", "--trials", "0", "x"],
        ["kvplot"],
        ["claims", "--bogus"],
        ["validate", "--nope"],
    ],
)
def test_bad_subcommand_arguments_are_one_error_line(tmp_path, args):
    res = decodelab(tmp_path, *args)
    assert res.rc == 2, res.explain()
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.text, res.explain()


@pytest.mark.slow
def test_claims_what_if_override_is_applied_and_labelled(tmp_path):
    """`decodelab claims ID KEY=VALUE`: the override reaches every job, the table says it is a
    what-if, and the MLflow run carries it; a misspelled key is one error line."""
    base = decodelab(tmp_path, "claims", "C5", "--no-track")
    fast = decodelab(tmp_path, "claims", "C5", "hardware.memory.hbm.bandwidth_gb_s=3200")
    assert base.rc in (0, 1) and fast.rc in (0, 1), (base.explain(), fast.explain())
    assert "WHAT-IF" in fast.out and "WHAT-IF" not in base.out

    def tok_s(res):
        row = next(line for line in res.out.splitlines() if "tok/s per user" in line)
        return float(row.split("│")[4])

    assert tok_s(fast) > 1.5 * tok_s(base)  # twice the HBM bandwidth, weight-bound
    runs = all_runs(tmp_path)
    assert [r.data.tags.get("what_if") for r in runs] == ["hardware.memory.hbm.bandwidth_gb_s=3200"]
    bad = decodelab(tmp_path, "claims", "C5", "hardware.fill_drian_us=1", "--no-track")
    assert bad.rc == 2 and bad.err.startswith("error:") and "fill_drian_us" in bad.err, bad.explain()
    assert len(bad.text.strip().splitlines()) == 1 and "Traceback" not in bad.text


def test_numba_cache_dir_follows_the_jitted_sources(tmp_path):
    """framework/__init__.py keys Numba's cache by a hash of the jitted sources (an edit of
    kernel.py can never leave serving_kernel.py a stale inlined step); a user's own
    NUMBA_CACHE_DIR is kept. The cache sits under decodelab's cache root, so $DECODELAB_CACHE
    moves it as it moves the table and store caches."""
    code = "import decodelab, os; print(os.environ['NUMBA_CACHE_DIR'])"
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DECODELAB_CACHE")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert re.fullmatch(re.escape(str(tmp_path / "xdg" / "decodelab" / "numba")) + r"/[0-9a-f]{16}", out), out
    assert Path(out).is_dir()
    env["DECODELAB_CACHE"] = str(tmp_path / "own")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert re.fullmatch(re.escape(str(tmp_path / "own" / "numba")) + r"/[0-9a-f]{16}", out), out
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == str(tmp_path / "mine")
